#include "conveyor/ops/transforms/compose.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <optional>
#include <string>
#include <utility>

#include "conveyor/core/error.h"
#include "conveyor/core/number_format.h"
#include "conveyor/ops/transforms/image_step.h"

namespace conveyor {

namespace {

using Children = std::vector<std::unique_ptr<const TransformStep>>;

bool same_size(const std::optional<Size2D>& a, const std::optional<Size2D>& b) {
  if (a.has_value() != b.has_value()) return false;
  return !a || (a->height == b->height && a->width == b->width);
}

// The chain's size after `steps` run in order on `chain` (their checks run too).
std::optional<Size2D> size_after(const std::vector<const ImageStep*>& steps, ChainPlan chain) {
  for (const ImageStep* step : steps) step->plan(chain);
  return chain.size;
}

// What the three share: the children, taken as steps on the image, and how
// they run on a sample.
class CompoundStep : public ImageStep {
 public:
  CompoundStep(const char* name, Children children) : name_(name), owned_(std::move(children)) {
    check_config(!owned_.empty(), std::string(name_) + ": transforms must not be empty");
    for (size_t i = 0; i < owned_.size(); ++i) {
      const StepKind kind = owned_[i]->kind();
      check_config(kind == StepKind::kImage,
                   std::string(name_) + ": transforms[" + std::to_string(i) + "] is " +
                       (kind == StepKind::kPointwise ? "Normalize-like (pointwise)"
                        : kind == StepKind::kOutput  ? "a step on the written output"
                                                     : "a crop, resize or flip") +
                       "; per sample, " + name_ +
                       " takes steps on the image (colour, blur, rotations, policies, T.Lambda)");
      children_.push_back(&step_as<ImageStep>(*owned_[i]));
    }
  }

 protected:
  // Runs `steps` on `sample`: a pointwise result may wait as tables only
  // after the last one (the next child reads the pixels).
  static void run(const std::vector<const ImageStep*>& steps, SampleImage& sample, SampleRng& rng) {
    const bool defer = sample.defer_tables;
    for (size_t i = 0; i < steps.size(); ++i) {
      sample.defer_tables = defer && i + 1 == steps.size();
      steps[i]->apply_image(sample, rng);
    }
    sample.defer_tables = defer;
  }

  // Sets the chain's size to the outcomes' when they all agree, else leaves it to the sample.
  static void settle_size(ChainPlan& chain, const std::vector<std::optional<Size2D>>& outcomes) {
    for (const auto& size : outcomes) {
      if (!same_size(size, outcomes.front())) {
        chain.size.reset();
        return;
      }
    }
    chain.size = outcomes.front();
  }

  const char* name_;
  Children owned_;
  std::vector<const ImageStep*> children_;
};

class RandomApplyStep final : public CompoundStep {
 public:
  RandomApplyStep(double p, Children children) : CompoundStep("RandomApply", std::move(children)), p_(p) {}

  StepPlan plan(ChainPlan& chain) const override {
    settle_size(chain, {chain.size, size_after(children_, chain)});
    return {};
  }

  // torchvision: `if torch.rand(1) >= self.p: return inputs`.
  void apply_image(SampleImage& sample, SampleRng& rng) const override {
    if (rng.uniform() >= p_) return;
    run(children_, sample, rng);
  }

 private:
  double p_;
};

class RandomChoiceStep final : public CompoundStep {
 public:
  RandomChoiceStep(std::vector<double> weights, Children children)
      : CompoundStep("RandomChoice", std::move(children)), cumulative_(std::move(weights)) {
    // Scaled by the largest first, so that huge weights do not sum to
    // infinity and tiny ones keep their ratios.
    const double most = *std::max_element(cumulative_.begin(), cumulative_.end());
    for (double& w : cumulative_) w /= most;
    std::partial_sum(cumulative_.begin(), cumulative_.end(), cumulative_.begin());
  }

  StepPlan plan(ChainPlan& chain) const override {
    std::vector<std::optional<Size2D>> outcomes;
    for (const ImageStep* child : children_) outcomes.push_back(size_after({child}, chain));
    settle_size(chain, outcomes);
    return {};
  }

  // One draw picks transform i with probability weight[i] / sum (torchvision
  // normalises p and draws with torch.multinomial).
  void apply_image(SampleImage& sample, SampleRng& rng) const override {
    const double r = rng.uniform() * cumulative_.back();
    size_t i = 0;
    while (i + 1 < cumulative_.size() && !(r < cumulative_[i])) ++i;
    run({children_[i]}, sample, rng);
  }

 private:
  std::vector<double> cumulative_;
};

class RandomOrderStep final : public CompoundStep {
 public:
  explicit RandomOrderStep(Children children) : CompoundStep("RandomOrder", std::move(children)) {}

  // The size is the children's in any order only when none changes it.
  StepPlan plan(ChainPlan& chain) const override {
    std::vector<std::optional<Size2D>> outcomes{chain.size};
    for (const ImageStep* child : children_) outcomes.push_back(size_after({child}, chain));
    outcomes.push_back(size_after(children_, chain));
    settle_size(chain, outcomes);
    return {};
  }

  // torchvision: `for idx in torch.randperm(len(self.transforms))`; here a
  // Fisher-Yates shuffle of the sample's own stream.
  void apply_image(SampleImage& sample, SampleRng& rng) const override {
    std::vector<const ImageStep*> order = children_;
    for (size_t i = order.size(); i > 1; --i) std::swap(order[i - 1], order[rng.below(i)]);
    run(order, sample, rng);
  }
};

}  // namespace

std::unique_ptr<const TransformStep> make_random_apply_step(const TransformParams& params, Children children) {
  TransformArgs args("RandomApply", params);
  const double p = probability_arg(args, 0.5);
  args.finish();
  return std::make_unique<RandomApplyStep>(p, std::move(children));
}

std::unique_ptr<const TransformStep> make_random_choice_step(const TransformParams& params, Children children) {
  TransformArgs args("RandomChoice", params);
  args.check(!children.empty(), "transforms must not be empty");
  std::vector<double> weights = args.numbers(
      "p", children.size(), std::vector<double>(children.size(), 1.0 / std::max<size_t>(1, children.size())));
  for (double w : weights) {
    args.check(std::isfinite(w) && w >= 0, "p must be finite numbers >= 0, got " + args.given("p"));
  }
  args.check(*std::max_element(weights.begin(), weights.end()) > 0, "p must not be all 0, got " + args.given("p"));
  args.finish();
  return std::make_unique<RandomChoiceStep>(std::move(weights), std::move(children));
}

std::unique_ptr<const TransformStep> make_random_order_step(const TransformParams& params, Children children) {
  TransformArgs("RandomOrder", params).finish();
  return std::make_unique<RandomOrderStep>(std::move(children));
}

}  // namespace conveyor
