#pragma once

#include <array>
#include <memory>
#include <optional>

#include "conveyor/core/rng.h"
#include "conveyor/ops/transforms/registry.h"

namespace conveyor {

// The pointwise and blend colour family: torchvision 0.29
// transforms.v2.functional on uint8 images, in its float32 arithmetic (see
// docs/design/color.md). Every kernel takes an HWC uint8 image of 1 or 3
// channels, works in place (a 1-channel image is left as torchvision leaves
// it: saturation and hue do nothing there) and allocates nothing. Pure
// functions: thread-safe on distinct images.

/// F.adjust_brightness: x * factor, clamped to [0, 255], truncated. factor >= 0.
void adjust_brightness(Image& image, double factor);
/// F.adjust_contrast: blends with the mean of the (floored) grayscale image.
/// factor >= 0.
void adjust_contrast(Image& image, double factor);
/// adjust_contrast's tables for `image`, without applying them (see pixel_tables.h).
ChannelTables contrast_tables(const Image& image, double factor);
/// F.adjust_saturation: blends each pixel with its (floored) grayscale value.
/// factor >= 0. No-op on 1 channel.
void adjust_saturation(Image& image, double factor);
/// F.adjust_hue: RGB -> HSV, h += hue_factor (mod 1), HSV -> RGB, as
/// torchvision's float32 code. hue_factor in [-0.5, 0.5]. No-op on 1 channel.
void adjust_hue(Image& image, double hue_factor);
/// F.rgb_to_grayscale: 0.2989 R + 0.587 G + 0.114 B truncated, as 1 or 3
/// (replicated) channels; a 1-channel image is copied or replicated. Uses
/// `sample.spare` when the image grows (1 -> 3 channels).
void rgb_to_grayscale(SampleImage& sample, int num_output_channels);
/// F.invert: 255 - x.
void invert(Image& image);
/// F.posterize: keeps the top `bits` bits (0..8) of each value.
void posterize(Image& image, int bits);
/// F.solarize: x >= threshold (compared in float32) becomes 255 - x.
/// threshold <= 255.
void solarize(Image& image, double threshold);

/// The factor ranges of a ColorJitter; an absent range is not drawn nor applied.
struct ColorJitterRanges {
  std::optional<std::array<double, 2>> brightness, contrast, saturation, hue;
};

/// One draw of ColorJitter's parameters, as torchvision's make_params: the
/// order (a random permutation of 0 = brightness, 1 = contrast, 2 =
/// saturation, 3 = hue), then each present factor uniform in its range.
struct ColorJitterParams {
  std::array<int, 4> order{0, 1, 2, 3};
  std::optional<double> brightness, contrast, saturation, hue;
};

/// Draws a ColorJitter's parameters from `rng` (see ColorJitterParams).
ColorJitterParams sample_color_jitter(const ColorJitterRanges& ranges, SampleRng& rng);

/// Applies `params` to `image` in their order (absent factors skipped).
void apply_color_jitter(Image& image, const ColorJitterParams& params);

/// The "color_jitter" factory: ColorJitter(brightness, contrast, saturation,
/// hue), each an optional (min, max) range (listed in registry.cc).
std::unique_ptr<const TransformStep> make_color_jitter_step(const TransformParams& params);
/// The "grayscale" factory: Grayscale(num_output_channels), which must equal
/// the pipeline's output channel count.
std::unique_ptr<const TransformStep> make_grayscale_step(const TransformParams& params);
/// The "random_grayscale" factory: RandomGrayscale(p) (keeps the channel count).
std::unique_ptr<const TransformStep> make_random_grayscale_step(const TransformParams& params);
/// The "random_invert" factory: RandomInvert(p).
std::unique_ptr<const TransformStep> make_random_invert_step(const TransformParams& params);
/// The "random_posterize" factory: RandomPosterize(bits, p).
std::unique_ptr<const TransformStep> make_random_posterize_step(const TransformParams& params);
/// The "random_solarize" factory: RandomSolarize(threshold, p).
std::unique_ptr<const TransformStep> make_random_solarize_step(const TransformParams& params);

// The image functions listed in registry.cc (the functional API), each
// parsing its arguments with ConfigErrors naming them.

/// "adjust_brightness" (brightness_factor).
void adjust_brightness_function(const TransformParams& params, SampleImage& sample);
/// "adjust_contrast" (contrast_factor).
void adjust_contrast_function(const TransformParams& params, SampleImage& sample);
/// "adjust_saturation" (saturation_factor).
void adjust_saturation_function(const TransformParams& params, SampleImage& sample);
/// "adjust_hue" (hue_factor).
void adjust_hue_function(const TransformParams& params, SampleImage& sample);
/// "rgb_to_grayscale" (num_output_channels, default 1).
void rgb_to_grayscale_function(const TransformParams& params, SampleImage& sample);
/// "invert" (no arguments).
void invert_function(const TransformParams& params, SampleImage& sample);
/// "posterize" (bits).
void posterize_function(const TransformParams& params, SampleImage& sample);
/// "solarize" (threshold).
void solarize_function(const TransformParams& params, SampleImage& sample);

}  // namespace conveyor
