#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "conveyor/ops/image.h"

namespace conveyor {

/// Which interpolation resize_image() uses for each axis.
enum class ResizeFilter {
  kArea,    ///< OpenCV INTER_AREA: box-filter antialiasing, for downscaling.
  kLinear,  ///< OpenCV INTER_LINEAR: bilinear without antialiasing, for upscaling.
};

/// Resizes `src` into the `dst_height` x `dst_width` HWC buffer `dst` (same
/// channel count, rows `dst_stride` bytes apart), approximating PIL's
/// antialiased bilinear resize (what torchvision uses): when `antialias`, axes
/// that shrink by s get a box prefilter of width s then INTER_AREA (together a
/// tent of radius s, PIL's filter); axes that grow (or all, without
/// `antialias`) use INTER_LINEAR; mixed axes run in two passes (see
/// docs/design/resize.md). `tmp` and `prefiltered` are scratch buffers. Runs single-threaded
/// (OpenCV's own threading is turned off once: our workers parallelize).
/// Thread-safe for distinct buffers.
void resize_image(const ImageView& src, uint8_t* dst, int dst_height, int dst_width, ptrdiff_t dst_stride,
                  bool antialias, std::vector<uint8_t>& tmp, std::vector<uint8_t>& prefiltered);

/// Turns off OpenCV's internal thread pool (idempotent, thread-safe).
void use_single_threaded_opencv();

}  // namespace conveyor
