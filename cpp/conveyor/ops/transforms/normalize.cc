#include "conveyor/ops/transforms/normalize.h"

#include <cmath>
#include <string>

#include "conveyor/core/error.h"

namespace conveyor {

namespace {

class NormalizeStep final : public PointwiseStep {
 public:
  NormalizeStep(std::vector<float> mean, std::vector<float> std) : mean_(std::move(mean)), std_(std::move(std)) {}

  StepPlan plan(ChainPlan& chain) const override {
    check_config(chain.dtype != DType::kUInt8,
                 "Normalize: the output dtype is uint8; use float32 or float16 with Normalize");
    check_config(mean_.size() == static_cast<size_t>(chain.channels) && std_.size() == mean_.size(),
                 "Normalize: mean and std need one value per channel (" + std::to_string(chain.channels) + "), got " +
                     std::to_string(mean_.size()) + " and " + std::to_string(std_.size()));
    return {};
  }

  // float32 arithmetic in torchvision's order: (x - mean) / std.
  float map_value(int channel, float value) const override { return (value - mean_[channel]) / std_[channel]; }

  std::optional<ChannelNormalization> normalization() const override { return ChannelNormalization{mean_, std_}; }

 private:
  std::vector<float> mean_;
  std::vector<float> std_;
};

std::vector<float> to_floats(const std::vector<double>& values) { return {values.begin(), values.end()}; }

}  // namespace

NormalizeSpec::operator TransformSpec() const {
  return {"normalize", {{"mean", {mean.begin(), mean.end()}}, {"std", {std.begin(), std.end()}}}};
}

std::unique_ptr<const TransformStep> make_normalize_step(const TransformParams& params) {
  TransformArgs args("Normalize", params);
  std::vector<float> mean = to_floats(args.numbers("mean"));
  std::vector<float> std = to_floats(args.numbers("std"));
  args.check(!mean.empty() && !std.empty(), "mean and std must be non-empty");
  args.check(mean.size() == std.size(),
             "mean has " + std::to_string(mean.size()) + " values but std has " + std::to_string(std.size()));
  for (size_t k = 0; k < mean.size(); ++k) {
    args.check(std::isfinite(mean[k]), "mean must be finite, got " + args.given("mean"));
  }
  for (size_t k = 0; k < std.size(); ++k) {
    args.check(std::isfinite(std[k]) && std[k] != 0, "std must be finite and non-zero, got " + args.given("std"));
  }
  args.finish();
  return std::make_unique<NormalizeStep>(std::move(mean), std::move(std));
}

}  // namespace conveyor
