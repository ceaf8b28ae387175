#include "conveyor/ops/transforms/image_step.h"

#include <string>
#include <utility>

#include "conveyor/core/error.h"
#include "conveyor/core/number_format.h"

namespace conveyor {

namespace {

class FunctionImageStep final : public ImageStep {
 public:
  FunctionImageStep(std::optional<double> p, ImageStepFunction apply, ImageStepCheck check)
      : p_(p), apply_(std::move(apply)), check_(std::move(check)) {}

  StepPlan plan(ChainPlan& chain) const override {
    if (check_) check_(chain);
    return {};
  }

  void apply_image(SampleImage& sample, SampleRng& rng) const override {
    // torchvision: `if torch.rand(1) >= self.p: return inputs`.
    if (p_ && rng.uniform() >= *p_) return;
    apply_(sample, rng);
  }

 private:
  std::optional<double> p_;
  ImageStepFunction apply_;
  ImageStepCheck check_;
};

}  // namespace

std::unique_ptr<const TransformStep> make_image_step(std::optional<double> p, ImageStepFunction apply,
                                                     ImageStepCheck check) {
  return std::make_unique<FunctionImageStep>(p, std::move(apply), std::move(check));
}

double probability_arg(TransformArgs& args, double fallback) {
  const double p = args.number("p", fallback);
  args.check(p >= 0 && p <= 1, "p must be in [0, 1], got " + format_shortest(p));
  return p;
}

void check_color_channels(std::string_view op, const Image& image) {
  check_config(image.channels == 1 || image.channels == 3,
               std::string(op) + ": image must have 1 or 3 channels, got " + std::to_string(image.channels));
}

}  // namespace conveyor
