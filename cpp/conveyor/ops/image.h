#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace conveyor {

/// A read-only view of 8-bit interleaved (HWC) pixels whose rows are `stride`
/// bytes apart. Does not own the pixels; valid as long as they are.
struct ImageView {
  const uint8_t* data = nullptr;
  int height = 0;
  int width = 0;
  int channels = 0;
  ptrdiff_t stride = 0;  ///< Bytes from one row to the next (>= width * channels).

  /// First byte of row `y`.
  const uint8_t* row(int y) const noexcept { return data + static_cast<ptrdiff_t>(y) * stride; }
};

/// An owned 8-bit HWC image with tightly packed rows.
struct Image {
  int height = 0;
  int width = 0;
  int channels = 0;
  std::vector<uint8_t> pixels;  ///< height * width * channels bytes.

  /// A view of all pixels; valid while this image is alive and unchanged.
  ImageView view() const noexcept {
    return {pixels.data(), height, width, channels, static_cast<ptrdiff_t>(width) * channels};
  }
};

}  // namespace conveyor
