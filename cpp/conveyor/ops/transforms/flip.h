#pragma once

#include <memory>

#include "conveyor/ops/transforms/registry.h"

namespace conveyor {

/// torchvision.transforms.RandomHorizontalFlip. Registered as
/// "horizontal_flip" with parameter p. Converts implicitly to its TransformSpec.
struct HorizontalFlipSpec {
  double p = 0.5;

  operator TransformSpec() const;  // NOLINT(google-explicit-constructor): chains are written as lists of specs.
};

/// torchvision.transforms.RandomVerticalFlip. Registered as "vertical_flip"
/// with parameter p.
struct VerticalFlipSpec {
  double p = 0.5;

  operator TransformSpec() const;  // NOLINT(google-explicit-constructor): chains are written as lists of specs.
};

/// The "horizontal_flip" factory (listed in registry.cc).
std::unique_ptr<const TransformStep> make_horizontal_flip_step(const TransformParams& params);

/// The "vertical_flip" factory (listed in registry.cc).
std::unique_ptr<const TransformStep> make_vertical_flip_step(const TransformParams& params);

/// Mirrors `sample` (and its boxes) left-right, or top-bottom if `vertical`.
void flip_image(SampleImage& sample, bool vertical);

/// The image functions "horizontal_flip" and "vertical_flip" (no parameters;
/// torchvision.transforms.v2.functional's), listed in registry.cc.
void horizontal_flip_function(const TransformParams& params, SampleImage& sample);
void vertical_flip_function(const TransformParams& params, SampleImage& sample);

}  // namespace conveyor
