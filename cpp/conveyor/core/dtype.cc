#include "conveyor/core/dtype.h"

#include <string>

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
  }
  return "uint8";
}

DType parse_dtype(std::string_view name) {
  for (DType dtype : {DType::kUInt8, DType::kInt64, DType::kFloat16, DType::kFloat32}) {
    if (name == dtype_name(dtype)) return dtype;
  }
  throw Error(ErrorKind::kConfig, "unknown dtype '" + std::string(name) + "' (uint8, int64, float16 or float32)");
}

int64_t SampleSpec::num_elements() const noexcept {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

}  // namespace conveyor
