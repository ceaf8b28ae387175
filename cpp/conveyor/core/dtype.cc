#include "conveyor/core/dtype.h"

#include <string>

#include "conveyor/core/checked_size.h"
#include "conveyor/core/error.h"

namespace conveyor {

std::string_view dtype_name(DType dtype) noexcept {
  switch (dtype) {
    case DType::kUInt8:
      return "uint8";
    case DType::kInt64:
      return "int64";
    case DType::kFloat16:
      return "float16";
    case DType::kFloat32:
      return "float32";
    case DType::kBFloat16:
      return "bfloat16";
  }
  return "uint8";
}

DType parse_dtype(std::string_view name) {
  for (DType dtype : {DType::kUInt8, DType::kInt64, DType::kFloat16, DType::kFloat32, DType::kBFloat16}) {
    if (name == dtype_name(dtype)) return dtype;
  }
  throw Error(ErrorKind::kConfig,
              "unknown dtype '" + std::string(name) + "' (uint8, int64, float16, float32 or bfloat16)");
}

namespace {
std::string shape_text(const std::vector<int64_t>& shape) {
  std::string text = "(";
  for (size_t i = 0; i < shape.size(); ++i) text += (i ? ", " : "") + std::to_string(shape[i]);
  return text + ")";
}
}  // namespace

int64_t SampleSpec::num_elements() const {
  int64_t n = 1;
  for (int64_t d : shape) n = checked_mul(n, d, "the element count of sample shape " + shape_text(shape));
  return n;
}

size_t SampleSpec::num_bytes() const {
  const int64_t bytes = checked_mul(num_elements(), static_cast<int64_t>(dtype_size(dtype)),
                                    "the size in bytes of sample shape " + shape_text(shape));
  return static_cast<size_t>(bytes);  // Not negative: checked_mul refused negative factors.
}

}  // namespace conveyor
