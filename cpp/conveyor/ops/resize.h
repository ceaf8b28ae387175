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

/// How a resample computes an output pixel from the source: torchvision's
/// InterpolationMode on tensors, numbered as in the parameter records.
enum class Interpolation { kNearest = 0, kBilinear = 1, kBicubic = 2, kNearestExact = 3 };

/// A resize's choices: the interpolation, and whether a shrink is antialiased
/// (bilinear and bicubic; nearest never is).
struct Resampling {
  Interpolation interpolation = Interpolation::kBilinear;
  bool antialias = true;
};

/// Resamples the part `box` of `src` into the `dst_height` x `dst_width` HWC
/// buffer `dst` (same channel count, rows `dst_stride` bytes apart).
/// - Bilinear: like PIL's bilinear resize of that box (what torchvision
///   uses): when antialiasing, an axis shrinking by s is first smoothed with
///   a triangle filter of radius s (PIL's antialiasing kernel), then every
///   output pixel is sampled at its exact (fractional) source position.
///   Pixels outside `src` are replicated edges.
/// - Bicubic: exactly what torch's uint8 interpolate computes (fixed-point
///   weights of the cubic kernel, a = -0.5 antialiased and -0.75 not, the
///   kernel cut at the edges of `src`; a horizontal pass to 8 bits, then a
///   vertical one).
/// - Nearest and nearest-exact: torch's source index of each output pixel.
/// Fractional boxes are honoured exactly, which matters for fused
/// Resize-then-crop chains and DCT-scaled decodes (see
/// docs/design/resize.md): resampling the box equals resampling the whole of
/// `src` and cropping. `scratch` holds intermediate rows.
/// Runs single-threaded (OpenCV's own threading is turned off once: our
/// workers parallelize). Thread-safe for distinct buffers.
void resize_image(const ImageView& src, const BoxF& box, uint8_t* dst, int dst_height, int dst_width,
                  ptrdiff_t dst_stride, Resampling resampling, std::vector<uint8_t>& scratch);

/// Turns off OpenCV's internal thread pool (idempotent, thread-safe).
void use_single_threaded_opencv();

}  // namespace conveyor
