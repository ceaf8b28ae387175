#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "conveyor/ops/image.h"

namespace conveyor {

/// A rectangle with fractional edges, in pixel units of an image (pixel i
/// spans [i, i + 1)).
struct BoxF {
  double x0 = 0;
  double y0 = 0;
  double x1 = 0;
  double y1 = 0;
};

/// Resamples the part `box` of `src` into the `dst_height` x `dst_width` HWC
/// buffer `dst` (same channel count, rows `dst_stride` bytes apart), like PIL's
/// bilinear resize of that box (what torchvision uses): when `antialias`, an
/// axis shrinking by s is first smoothed with a triangle filter of radius s
/// (PIL's antialiasing kernel), then every output pixel is sampled at its exact
/// (fractional) source position with bilinear interpolation. Fractional boxes
/// are honoured exactly, which matters for fused Resize-then-crop chains and
/// DCT-scaled decodes (see docs/design/resize.md). Pixels outside `src` are
/// replicated edges. `scratch` holds the smoothed rows.
/// Runs single-threaded (OpenCV's own threading is turned off once: our
/// workers parallelize). Thread-safe for distinct buffers.
void resize_image(const ImageView& src, const BoxF& box, uint8_t* dst, int dst_height, int dst_width,
                  ptrdiff_t dst_stride, bool antialias, std::vector<uint8_t>& scratch);

/// Turns off OpenCV's internal thread pool (idempotent, thread-safe).
void use_single_threaded_opencv();

}  // namespace conveyor
