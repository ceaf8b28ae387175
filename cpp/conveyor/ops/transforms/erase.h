#pragma once

#include <array>
#include <memory>
#include <optional>
#include <vector>

#include "conveyor/ops/transforms/registry.h"

namespace conveyor {

/// Rows [top, top + height) and columns [left, left + width) of an image.
struct ErasingBox {
  int top = 0;
  int left = 0;
  int height = 0;
  int width = 0;
};

/// torchvision v2 RandomErasing.make_params' box on a height x width image:
/// up to 10 attempts of an area fraction uniform in `scale` and a log-uniform
/// aspect ratio h / w in `ratio` (float32 draws, as torch's), sides rounded
/// half to even, kept when h < height and w < width, then the top-left corner
/// uniform; none (no erase) when every attempt fails. Pure given `rng`.
std::optional<ErasingBox> sample_erasing_box(int height, int width, const std::array<double, 2>& scale,
                                             const std::array<double, 2>& ratio, SampleRng& rng);

/// Sets every value of `box` (clipped to the sample) in every channel of
/// `sample` to `values[c]` (one value per channel, or one for all), converted
/// to the sample's dtype as torch's assignment converts float32: float16
/// rounded to nearest even, uint8 truncated through int64 (so -1 becomes 255).
/// Thread-safe (writes only `sample`).
void erase(OutputSample& sample, const ErasingBox& box, const std::vector<float>& values);

/// RandomErasing(p, scale, ratio, value | random) (kOutput: after Normalize,
/// on the written values). Parameters: "p", "scale", "ratio", "value" (1 or
/// channel-count numbers) or "random" = 1 (standard normal values per
/// element, drawn from the sample's stream in C, H, W order).
std::unique_ptr<const TransformStep> make_random_erasing_step(const TransformParams& params);

/// The functional erase(image, i, j, h, w, v) on a uint8 HWC image:
/// parameters "i", "j", "h", "w" (ints >= 0; the box is clipped to the
/// image, as torch's slicing) and "v" (1 or channel-count numbers).
void erase_function(const TransformParams& params, SampleImage& sample);

}  // namespace conveyor
