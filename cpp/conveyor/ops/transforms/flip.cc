#include "conveyor/ops/transforms/flip.h"

namespace conveyor {

namespace {

// A mirror: the flip is one bit of the placement, applied by the output pass
// (a later crop is mirrored instead), so it costs no extra pass.
class HorizontalFlipStep final : public TransformStep {
 public:
  explicit HorizontalFlipStep(double p) : p_(p) {}

  StepKind kind() const override { return StepKind::kMirror; }

  void plan(ChainPlan& /*chain*/) const override {}

  void place(Placement& placement, SampleRng& rng) const override {
    if (rng.uniform() < p_) placement.flip = !placement.flip;
  }

  float map_value(int /*channel*/, float value) const override { return value; }

  void apply_image(SampleImage& /*sample*/, SampleRng& /*rng*/) const override {}

 private:
  double p_;
};

}  // namespace

HorizontalFlipSpec::operator TransformSpec() const { return {"horizontal_flip", {{"p", {p}}}}; }

std::unique_ptr<const TransformStep> make_horizontal_flip_step(const TransformParams& params) {
  TransformArgs args("RandomHorizontalFlip", params);
  const double p = args.number("p", 0.5);
  args.check(p >= 0 && p <= 1, "p must be in [0, 1]");
  args.finish();
  return std::make_unique<HorizontalFlipStep>(p);
}

}  // namespace conveyor
