#include "conveyor/ops/transforms/erase.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <numbers>
#include <string>
#include <utility>
#include <vector>

#include "conveyor/core/error.h"
#include "conveyor/core/float16.h"
#include "conveyor/core/number_format.h"
#include "conveyor/ops/transforms/image_step.h"

namespace conveyor {

namespace {

// torch's float32 -> uint8 conversion (c10's cast through int64, which
// truncates toward zero, then wraps). Out-of-range and NaN values (undefined
// in C++) are clamped into int64 first (NaN to 0).
uint8_t torch_u8(float v) {
  constexpr float kLimit = 9.2e18f;  // Below 2^63.
  if (!(v == v)) return 0;
  return static_cast<uint8_t>(static_cast<int64_t>(std::clamp(v, -kLimit, kLimit)));
}

// Writes value(c) (already in the output type) at every position of `box` in
// channel order, then rows, then columns: the order torch's normal_ fills a
// [C, h, w] tensor, whatever the layout.
template <typename T, typename Value>
void fill_box(const OutputSample& s, const ErasingBox& box, Value value) {
  T* data = static_cast<T*>(s.data);
  const auto y1 = static_cast<int>(std::min<int64_t>(s.height, int64_t{box.top} + box.height));
  const auto x1 = static_cast<int>(std::min<int64_t>(s.width, int64_t{box.left} + box.width));
  const ptrdiff_t plane = static_cast<ptrdiff_t>(s.height) * s.width;
  for (int c = 0; c < s.channels; ++c) {
    for (int y = box.top; y < y1; ++y) {
      for (int x = box.left; x < x1; ++x) {
        const ptrdiff_t at = s.chw ? c * plane + static_cast<ptrdiff_t>(y) * s.width + x
                                   : (static_cast<ptrdiff_t>(y) * s.width + x) * s.channels + c;
        data[at] = value(c);
      }
    }
  }
}

// Dispatches on the sample's dtype; `value(c)` gives float32 values.
template <typename Value>
void fill_converted(const OutputSample& s, const ErasingBox& box, Value value) {
  switch (s.dtype) {
    case DType::kUInt8:
      fill_box<uint8_t>(s, box, [&](int c) { return torch_u8(value(c)); });
      break;
    case DType::kFloat16:
      fill_box<uint16_t>(s, box, [&](int c) { return float_to_half(value(c)); });
      break;
    case DType::kBFloat16:
      fill_box<uint16_t>(s, box, [&](int c) { return float_to_bfloat16(value(c)); });
      break;
    case DType::kFloat32:
      fill_box<float>(s, box, value);
      break;
    case DType::kInt64:
      break;
  }
}

// A standard normal float32 value (Box-Muller on two uniform draws; torch's
// normal_ uses Box-Muller too, from its own generator).
float standard_normal(SampleRng& rng) {
  const double u1 = rng.uniform(), u2 = rng.uniform();
  return static_cast<float>(std::sqrt(-2.0 * std::log1p(-u1)) * std::cos(2.0 * std::numbers::pi * u2));
}

class RandomErasingStep final : public OutputStep {
 public:
  RandomErasingStep(double p, std::array<double, 2> scale, std::array<double, 2> ratio, std::vector<float> value)
      : p_(p), scale_(scale), ratio_(ratio), value_(std::move(value)) {}

  StepPlan plan(ChainPlan& chain) const override {
    // An empty value is "random" (one value per element).
    check_config(value_.empty() || value_.size() == 1 || value_.size() == static_cast<size_t>(chain.channels),
                 "RandomErasing: value needs 1 or " + std::to_string(chain.channels) +
                     " numbers (one per output channel), got " + std::to_string(value_.size()));
    return {};
  }

  // torchvision's _RandomApplyTransform (one draw, erases when < p), then
  // make_params' box and values.
  void apply_output(OutputSample& sample, SampleRng& rng) const override {
    if (!(rng.uniform() < p_)) return;
    const std::optional<ErasingBox> box = sample_erasing_box(sample.height, sample.width, scale_, ratio_, rng);
    if (!box) return;
    if (value_.empty()) {
      fill_converted(sample, *box, [&](int /*c*/) { return standard_normal(rng); });
    } else {
      erase(sample, *box, value_);
    }
  }

 private:
  double p_;
  std::array<double, 2> scale_;
  std::array<double, 2> ratio_;
  std::vector<float> value_;  // Empty: "random".
};

std::array<double, 2> range_arg(TransformArgs& args, std::string_view arg, std::array<double, 2> fallback) {
  const std::vector<double> v = args.numbers(arg, 2, std::vector<double>{fallback[0], fallback[1]});
  args.check(std::isfinite(v[0]) && std::isfinite(v[1]) && v[0] <= v[1],
             std::string(arg) + " must be (min, max) with min <= max, got (" + format_shortest(v[0]) + ", " +
                 format_shortest(v[1]) + ")");
  return {v[0], v[1]};
}

std::vector<float> value_arg(TransformArgs& args, std::string_view arg) {
  std::vector<float> value;
  for (double v : args.numbers(arg)) {
    args.check(std::isfinite(v), std::string(arg) + " must be finite numbers");
    value.push_back(static_cast<float>(v));
  }
  args.check(!value.empty(), std::string(arg) + " must be one number or one per channel");
  return value;
}

int index_arg(TransformArgs& args, std::string_view arg) {
  const double v = args.number(arg);
  args.check(v == std::floor(v) && v >= 0 && v <= std::numeric_limits<int>::max(),
             std::string(arg) + " must be an integer >= 0, got " + format_shortest(v));
  return static_cast<int>(v);
}

}  // namespace

std::optional<ErasingBox> sample_erasing_box(int height, int width, const std::array<double, 2>& scale,
                                             const std::array<double, 2>& ratio, SampleRng& rng) {
  // torch.log(torch.tensor(ratio)) and uniform_ on float32 tensors.
  const float log_r0 = std::log(static_cast<float>(ratio[0])), log_r1 = std::log(static_cast<float>(ratio[1]));
  const double area = static_cast<double>(height) * width;
  for (int attempt = 0; attempt < 10; ++attempt) {
    const double erase_area = area * static_cast<float>(rng.uniform(scale[0], scale[1]));
    const double aspect = std::exp(static_cast<float>(rng.uniform(log_r0, log_r1)));
    // Python's round(): half to even (the default rounding mode).
    const double h = std::nearbyint(std::sqrt(erase_area * aspect));
    const double w = std::nearbyint(std::sqrt(erase_area / aspect));
    if (!(h < height && w < width)) continue;
    ErasingBox box;
    box.height = static_cast<int>(h);
    box.width = static_cast<int>(w);
    box.top = static_cast<int>(rng.below(static_cast<uint64_t>(height - box.height + 1)));
    box.left = static_cast<int>(rng.below(static_cast<uint64_t>(width - box.width + 1)));
    return box;
  }
  return std::nullopt;
}

void erase(OutputSample& sample, const ErasingBox& box, const std::vector<float>& values) {
  fill_converted(sample, box, [&](int c) { return values[values.size() == 1 ? 0 : static_cast<size_t>(c)]; });
}

std::unique_ptr<const TransformStep> make_random_erasing_step(const TransformParams& params) {
  TransformArgs args("RandomErasing", params);
  const double p = probability_arg(args, 0.5);
  const std::array<double, 2> scale = range_arg(args, "scale", {0.02, 0.33});
  args.check(scale[0] >= 0 && scale[1] <= 1,
             "scale must be within [0, 1], got (" + format_shortest(scale[0]) + ", " + format_shortest(scale[1]) + ")");
  const std::array<double, 2> ratio = range_arg(args, "ratio", {0.3, 3.3});
  args.check(ratio[0] > 0,
             "ratio must be positive, got (" + format_shortest(ratio[0]) + ", " + format_shortest(ratio[1]) + ")");
  const bool random = args.flag("random", false);
  std::vector<float> value;
  if (!random) value = args.has("value") ? value_arg(args, "value") : std::vector<float>{0.0f};
  args.check(!(random && args.has("value")), "give value or random, not both");
  args.finish();
  return std::make_unique<RandomErasingStep>(p, scale, ratio, std::move(value));
}

void erase_function(const TransformParams& params, SampleImage& sample) {
  TransformArgs args("erase", params);
  const int i = index_arg(args, "i"), j = index_arg(args, "j");
  const int h = index_arg(args, "h"), w = index_arg(args, "w");
  const std::vector<float> v = value_arg(args, "v");
  args.finish();
  Image& image = sample.image;
  args.check(
      v.size() == 1 || v.size() == static_cast<size_t>(image.channels),
      "v needs 1 or " + std::to_string(image.channels) + " numbers (one per channel), got " + std::to_string(v.size()));
  OutputSample out{image.pixels.data(), DType::kUInt8, false, image.channels, image.height, image.width};
  erase(out, {std::min(i, image.height), std::min(j, image.width), h, w}, v);
}

}  // namespace conveyor
