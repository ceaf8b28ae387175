#pragma once

#include <memory>

#include "conveyor/ops/transforms/registry.h"

namespace conveyor {

/// torchvision.transforms.Resize: `shorter` > 0 resizes the shorter side to it
/// (aspect kept); otherwise resizes to exactly `size`. Antialiased downscaling.
/// Registered as "resize" with parameters size ([shorter] or [h, w]),
/// interpolation (Interpolation's number; bilinear when absent) and antialias
/// (0/1). Converts implicitly to its TransformSpec.
struct ResizeSpec {
  int shorter = 0;
  Size2D size;
  bool antialias = true;
  Interpolation interpolation = Interpolation::kBilinear;

  operator TransformSpec() const;  // NOLINT(google-explicit-constructor): chains are written as lists of specs.
};

/// The "resize" factory (listed in registry.cc).
std::unique_ptr<const TransformStep> make_resize_step(const TransformParams& params);

/// A resize's interpolation (parameter "interpolation": Interpolation's
/// number, bilinear when absent) and antialias (0/1, true when absent), with
/// the rule on them: the steps and functions that resize read them so.
Resampling read_resampling(TransformArgs& args);

/// `r` as parameters added to `params`: antialias always, interpolation when
/// not bilinear (the default).
void write_resampling(Resampling r, TransformParams& params);

/// The image functions "resize" (size [h, w], interpolation, antialias) and
/// "resized_crop" (top, left, height, width, size [h, w], interpolation,
/// antialias: a crop, zero-padded where it leaves the image, then a resize),
/// as torchvision.transforms.v2.functional's; the pipeline's resampler (see
/// resize.h). Listed in registry.cc.
void resize_function(const TransformParams& params, SampleImage& sample);
void resized_crop_function(const TransformParams& params, SampleImage& sample);

}  // namespace conveyor
