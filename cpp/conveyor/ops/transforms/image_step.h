#pragma once

#include <functional>
#include <memory>
#include <optional>
#include <string_view>

#include "conveyor/ops/transforms/registry.h"

namespace conveyor {

/// What an image step does to one sample once it applies (draws its own
/// further parameters from the rng, if any).
using ImageStepFunction = std::function<void(SampleImage& sample, SampleRng& rng)>;

/// A check of the chain at construction (e.g. the output channel count);
/// throws Error{kConfig}. May be empty.
using ImageStepCheck = std::function<void(const ChainPlan& chain)>;

/// A step of kind kImage. With `p`, torchvision's _RandomApplyTransform: one
/// uniform draw per sample, `apply` runs when it is < p (nothing else is
/// drawn otherwise). Without `p` it always runs and draws nothing itself.
/// The result is immutable; `apply` must be thread-safe.
std::unique_ptr<const TransformStep> make_image_step(std::optional<double> p, ImageStepFunction apply,
                                                     ImageStepCheck check = {});

/// Reads the probability argument "p" (default `fallback`) and checks it is in
/// [0, 1] (Error{kConfig} "<transform>: p must be in [0, 1], got ...").
double probability_arg(TransformArgs& args, double fallback);

/// Throws Error{kConfig} "<op>: image must have 1 or 3 channels, got N" unless
/// `image` has 1 or 3 channels (what torchvision's colour kernels accept).
void check_color_channels(std::string_view op, const Image& image);

}  // namespace conveyor
