#include "conveyor/ops/transforms/random_resized_crop.h"

#include <algorithm>
#include <cmath>

#include "conveyor/ops/transforms/resize.h"

namespace conveyor {

namespace {

// Python's round(): half to even (the default floating-point rounding mode).
double round_half_even(double v) { return std::nearbyint(v); }

class RandomResizedCropStep final : public GeometricStep {
 public:
  explicit RandomResizedCropStep(RandomResizedCropSpec spec) : spec_(spec) {}

  StepPlan plan(ChainPlan& chain) const override {
    chain.size = spec_.size;
    return {.antialias = spec_.antialias, .interpolation = spec_.interpolation};
  }

  void place(Placement& p, SampleRng& rng) const override {
    const CropBox box = sample_random_resized_crop(static_cast<int>(p.height), static_cast<int>(p.width), spec_.scale,
                                                   spec_.ratio, rng);
    p.crop(box.top, box.left, box.height, box.width);
    p.resize(spec_.size.height, spec_.size.width);
  }

 private:
  RandomResizedCropSpec spec_;
};

}  // namespace

CropBox sample_random_resized_crop(int height, int width, const std::array<double, 2>& scale,
                                   const std::array<double, 2>& ratio, SampleRng& rng) {
  const double area = static_cast<double>(height) * width;
  const double log_r0 = std::log(ratio[0]), log_r1 = std::log(ratio[1]);
  for (int attempt = 0; attempt < 10; ++attempt) {
    const double target_area = area * rng.uniform(scale[0], scale[1]);
    const double aspect = std::exp(rng.uniform(log_r0, log_r1));
    const double w = round_half_even(std::sqrt(target_area * aspect));
    const double h = round_half_even(std::sqrt(target_area / aspect));
    if (0 < w && w <= width && 0 < h && h <= height) {
      CropBox box;
      box.height = static_cast<int>(h);
      box.width = static_cast<int>(w);
      box.top = static_cast<int>(rng.below(static_cast<uint64_t>(height - box.height + 1)));
      box.left = static_cast<int>(rng.below(static_cast<uint64_t>(width - box.width + 1)));
      return box;
    }
  }
  // Central crop with the aspect ratio clamped into `ratio`. torchvision
  // rounds a side to 0 when the ratio is far from the image's (its crop is
  // then empty); at least 1 pixel keeps the crop valid (it was an all-zero
  // image here before).
  CropBox box{0, 0, height, width};
  const double in_ratio = static_cast<double>(width) / height;
  const double r_min = std::min(ratio[0], ratio[1]), r_max = std::max(ratio[0], ratio[1]);
  if (in_ratio < r_min) {
    box.height = static_cast<int>(std::max(1.0, round_half_even(width / r_min)));
  } else if (in_ratio > r_max) {
    box.width = static_cast<int>(std::max(1.0, round_half_even(height * r_max)));
  }
  box.top = (height - box.height) / 2;
  box.left = (width - box.width) / 2;
  return box;
}

RandomResizedCropSpec::operator TransformSpec() const {
  TransformSpec spec{"random_resized_crop",
                     {{"size", {static_cast<double>(size.height), static_cast<double>(size.width)}},
                      {"scale", {scale[0], scale[1]}},
                      {"ratio", {ratio[0], ratio[1]}}}};
  write_resampling({interpolation, antialias}, spec.params);
  return spec;
}

std::unique_ptr<const TransformStep> make_random_resized_crop_step(const TransformParams& params) {
  TransformArgs args("RandomResizedCrop", params);
  RandomResizedCropSpec spec;
  spec.size = args.size2d("size");
  const std::vector<double> scale = args.numbers("scale", 2, std::vector<double>{spec.scale[0], spec.scale[1]});
  const std::vector<double> ratio = args.numbers("ratio", 2, std::vector<double>{spec.ratio[0], spec.ratio[1]});
  args.check(scale[0] > 0 && scale[0] <= scale[1] && std::isfinite(scale[1]),
             "scale must be (lo, hi) with 0 < lo <= hi, got " + args.given("scale"));
  args.check(ratio[0] > 0 && ratio[0] <= ratio[1] && std::isfinite(ratio[1]),
             "ratio must be (lo, hi) with 0 < lo <= hi, got " + args.given("ratio"));
  spec.scale = {scale[0], scale[1]};
  spec.ratio = {ratio[0], ratio[1]};
  const Resampling resampling = read_resampling(args);
  spec.interpolation = resampling.interpolation;
  spec.antialias = resampling.antialias;
  args.finish();
  return std::make_unique<RandomResizedCropStep>(spec);
}

}  // namespace conveyor
