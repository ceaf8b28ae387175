#pragma once

#include <array>
#include <memory>

#include "conveyor/core/rng.h"
#include "conveyor/ops/transforms/registry.h"

namespace conveyor {

/// torchvision.transforms.RandomResizedCrop: torchvision's sampling rule (10
/// attempts, then the central-crop fallback), then an antialiased resize.
/// Registered as "random_resized_crop" with parameters size, scale, ratio,
/// interpolation and antialias (as "resize" reads them: read_resampling).
/// Converts implicitly to its TransformSpec.
struct RandomResizedCropSpec {
  Size2D size;
  std::array<double, 2> scale{0.08, 1.0};
  std::array<double, 2> ratio{3.0 / 4.0, 4.0 / 3.0};
  bool antialias = true;
  Interpolation interpolation = Interpolation::kBilinear;

  operator TransformSpec() const;  // NOLINT(google-explicit-constructor): chains are written as lists of specs.
};

/// A crop box in pixels: rows [top, top + height), columns [left, left + width).
struct CropBox {
  int top = 0;
  int left = 0;
  int height = 0;
  int width = 0;
};

/// torchvision's RandomResizedCrop.get_params for an image of `height` x
/// `width`: up to 10 draws of a log-uniform aspect ratio and uniform area
/// fraction (w = round(sqrt(area * ratio)), h = round(sqrt(area / ratio)),
/// top = randint(0, H - h + 1), left = randint(0, W - w + 1)), then the central
/// crop fallback (aspect clamped to `ratio`). Unlike torchvision, the fallback
/// never gives a side of 0 pixels (an extreme ratio such as (1000, 1000) on a
/// 4:3 image): each side is at least 1. Draws only from `rng`.
CropBox sample_random_resized_crop(int height, int width, const std::array<double, 2>& scale,
                                   const std::array<double, 2>& ratio, SampleRng& rng);

/// The "random_resized_crop" factory (listed in registry.cc).
std::unique_ptr<const TransformStep> make_random_resized_crop_step(const TransformParams& params);

}  // namespace conveyor
