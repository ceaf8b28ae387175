#pragma once

#include <memory>
#include <vector>

#include "conveyor/ops/transforms/registry.h"

namespace conveyor {

/// torchvision.transforms.Normalize on values scaled to [0, 1]
/// (out = (x / 255 - mean) / std), one entry per channel. Registered as
/// "normalize" with parameters mean and std. Converts implicitly to its
/// TransformSpec.
struct NormalizeSpec {
  std::vector<float> mean;
  std::vector<float> std;

  operator TransformSpec() const;  // NOLINT(google-explicit-constructor): chains are written as lists of specs.
};

/// The "normalize" factory (listed in registry.cc).
std::unique_ptr<const TransformStep> make_normalize_step(const TransformParams& params);

}  // namespace conveyor
