#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <string_view>
#include <vector>

namespace conveyor {

/// Element type of a batch tensor.
enum class DType { kUInt8, kInt64, kFloat16, kFloat32, kBFloat16 };

/// Size of one element of `dtype` in bytes.
constexpr size_t dtype_size(DType dtype) noexcept {
  switch (dtype) {
    case DType::kUInt8:
      return 1;
    case DType::kFloat16:
    case DType::kBFloat16:
      return 2;
    case DType::kFloat32:
      return 4;
    case DType::kInt64:
      return 8;
  }
  return 1;
}

/// The element types an image sample can be written in (every one but int64):
/// what ImagePipeline and the batch mixes accept.
inline constexpr std::array<DType, 4> kImageDTypes = {DType::kUInt8, DType::kFloat16, DType::kFloat32,
                                                      DType::kBFloat16};

/// Whether `dtype` is one of kImageDTypes.
constexpr bool is_image_dtype(DType dtype) noexcept {
  for (DType image_dtype : kImageDTypes)
    if (image_dtype == dtype) return true;
  return false;
}

/// "uint8", "int64", "float16", "float32" or "bfloat16".
std::string_view dtype_name(DType dtype) noexcept;

/// The DType named `name` (as dtype_name() spells it); throws Error{kConfig}
/// for any other name. Whether a consumer supports the dtype is its own check.
DType parse_dtype(std::string_view name);

/// Shape and element type of one sample as a transform writes it into a batch.
struct SampleSpec {
  std::vector<int64_t> shape;  ///< e.g. {3, 224, 224} for CHW images.
  DType dtype = DType::kUInt8;

  /// Product of `shape`. Throws Error{kConfig} naming the shape when it
  /// overflows int64_t or a dimension is negative.
  int64_t num_elements() const;
  /// num_elements() x the dtype's size, checked the same way.
  size_t num_bytes() const;
};

}  // namespace conveyor
