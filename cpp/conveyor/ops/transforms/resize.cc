#include "conveyor/ops/transforms/resize.h"

#include <algorithm>
#include <cstdint>
#include <string>

#include "conveyor/core/checked_size.h"
#include "conveyor/core/error.h"

namespace conveyor {

namespace {

class ResizeStep final : public TransformStep {
 public:
  ResizeStep(int shorter, Size2D size, bool antialias) : shorter_(shorter), size_(size), antialias_(antialias) {}

  StepKind kind() const override { return StepKind::kGeometric; }

  void plan(ChainPlan& chain) const override {
    if (shorter_ > 0) {
      chain.size.reset();
    } else {
      chain.size = size_;
    }
    chain.antialias = chain.antialias && antialias_;
  }

  void place(Placement& p, SampleRng& /*rng*/) const override {
    if (shorter_ == 0) {
      p.resize(size_.height, size_.width);
      return;
    }
    // torchvision: the long side is int(shorter * long / short), truncated. A
    // very elongated image can make it exceed an int (1 x 178 M pixels
    // resized to 256): too large, not a wrapped size.
    const auto ih = static_cast<int64_t>(p.height), iw = static_cast<int64_t>(p.width);
    const int64_t short_side = std::min(ih, iw), long_side = std::max(ih, iw);
    const std::string what = "Resize(" + std::to_string(shorter_) + ") of a " + std::to_string(iw) + "x" +
                             std::to_string(ih) + " image: the long side";
    const int new_long = checked_int(checked_mul(shorter_, long_side, what, ErrorKind::kTooLarge) / short_side, what,
                                     ErrorKind::kTooLarge);
    if (iw <= ih) {
      p.resize(new_long, shorter_);
    } else {
      p.resize(shorter_, new_long);
    }
  }

  float map_value(int /*channel*/, float value) const override { return value; }

  void apply_image(SampleImage& /*sample*/, SampleRng& /*rng*/) const override {}

 private:
  int shorter_;
  Size2D size_;
  bool antialias_;
};

}  // namespace

ResizeSpec::operator TransformSpec() const {
  TransformSpec spec{"resize", {{"antialias", {antialias ? 1.0 : 0.0}}}};
  if (shorter != 0 && size.height == 0 && size.width == 0) {
    spec.params["size"] = {static_cast<double>(shorter)};
  } else if (shorter == 0) {
    spec.params["size"] = {static_cast<double>(size.height), static_cast<double>(size.width)};
  } else {
    spec.params["size"] = {static_cast<double>(shorter), static_cast<double>(size.height),
                           static_cast<double>(size.width)};
  }
  return spec;
}

std::unique_ptr<const TransformStep> make_resize_step(const TransformParams& params) {
  TransformArgs args("Resize", params);
  // One value: the shorter side; two: exactly (h, w).
  const std::vector<int> size = args.sizes("size", {1, 2});
  const bool antialias = args.flag("antialias", true);
  args.finish();
  if (size.size() == 1) return std::make_unique<ResizeStep>(size[0], Size2D{}, antialias);
  return std::make_unique<ResizeStep>(0, Size2D{size[0], size[1]}, antialias);
}

}  // namespace conveyor
