#pragma once

#include <array>
#include <memory>

#include "conveyor/core/rng.h"
#include "conveyor/ops/transforms/registry.h"

namespace conveyor {

// The neighbourhood family: torchvision 0.29 transforms.v2.functional on uint8
// HWC images of 1 or 3 channels (see docs/design/color.md). Both build their
// result in `sample.spare` and swap it in (no allocation of ours once warm).
// Pure functions: thread-safe on distinct samples.

/// F.gaussian_blur: torchvision's kernel (a softmax of -(x / sigma)^2 over
/// linspace(-(k - 1) / (2 sqrt 2), ..)), reflect padding, rounded to nearest
/// even. `kernel_size` and `sigma` are (x, y) as torchvision's; sizes odd and
/// positive, sigmas positive. Unlike torchvision (which refuses a padding of
/// the image's size or more), an image smaller than the kernel is reflected
/// as often as needed.
void gaussian_blur(SampleImage& sample, std::array<int, 2> kernel_size, std::array<double, 2> sigma);

/// F.adjust_sharpness: blends with the image smoothed by torchvision's 3x3
/// kernel (1 1 1 / 1 5 1 / 1 1 1, over 13, rounded); the one-pixel border is
/// unchanged, as is any image of 2 rows or columns or fewer. factor >= 0.
void adjust_sharpness(SampleImage& sample, double factor);

/// Draws GaussianBlur's sigma: uniform in [sigma[0], sigma[1]] (torchvision's
/// make_params), used for both axes.
double sample_gaussian_blur_sigma(const std::array<double, 2>& sigma, SampleRng& rng);

/// The "gaussian_blur" factory (GaussianBlur(kernel_size, sigma); listed in registry.cc).
std::unique_ptr<const TransformStep> make_gaussian_blur_step(const TransformParams& params);
/// The "random_adjust_sharpness" factory (RandomAdjustSharpness(sharpness_factor, p)).
std::unique_ptr<const TransformStep> make_random_adjust_sharpness_step(const TransformParams& params);

/// The "gaussian_blur" image function (kernel_size, optional sigma: the
/// functional API; listed in registry.cc).
void gaussian_blur_function(const TransformParams& params, SampleImage& sample);
/// The "adjust_sharpness" image function (sharpness_factor).
void adjust_sharpness_function(const TransformParams& params, SampleImage& sample);

}  // namespace conveyor
