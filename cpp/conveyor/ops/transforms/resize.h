#pragma once

#include <memory>

#include "conveyor/ops/transforms/registry.h"

namespace conveyor {

/// torchvision.transforms.Resize: `shorter` > 0 resizes the shorter side to it
/// (aspect kept); otherwise resizes to exactly `size`. Antialiased downscaling.
/// Registered as "resize" with parameters size ([shorter] or [h, w]) and
/// antialias (0/1). Converts implicitly to its TransformSpec.
struct ResizeSpec {
  int shorter = 0;
  Size2D size;
  bool antialias = true;

  operator TransformSpec() const;  // NOLINT(google-explicit-constructor): chains are written as lists of specs.
};

/// The "resize" factory (listed in registry.cc).
std::unique_ptr<const TransformStep> make_resize_step(const TransformParams& params);

/// The image functions "resize" (size [h, w], antialias) and "resized_crop"
/// (top, left, height, width, size [h, w], antialias: a crop, zero-padded
/// where it leaves the image, then a resize), as
/// torchvision.transforms.v2.functional's with bilinear interpolation; the
/// pipeline's resampler (PIL-parity, see resize.h). Listed in registry.cc.
void resize_function(const TransformParams& params, SampleImage& sample);
void resized_crop_function(const TransformParams& params, SampleImage& sample);

}  // namespace conveyor
