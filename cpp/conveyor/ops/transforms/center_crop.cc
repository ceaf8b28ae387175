#include "conveyor/ops/transforms/center_crop.h"

#include <cmath>

namespace conveyor {

namespace {

class CenterCropStep final : public GeometricStep {
 public:
  explicit CenterCropStep(Size2D size) : size_(size) {}

  StepPlan plan(ChainPlan& chain) const override {
    chain.size = size_;
    return {.fill = Fill{0, 0, 0}};  // torchvision's CenterCrop pads a too-small image with zeros.
  }

  void place(Placement& p, SampleRng& /*rng*/) const override {
    // torchvision pads (zeros) a too-small image by (crop - size) // 2 on the
    // top/left, else offsets by round((size - crop) / 2) (half to even).
    const int ih = static_cast<int>(p.height), iw = static_cast<int>(p.width);
    const int ch = size_.height, cw = size_.width;
    const double top = ch > ih ? -((ch - ih) / 2) : std::nearbyint((ih - ch) / 2.0);
    const double left = cw > iw ? -((cw - iw) / 2) : std::nearbyint((iw - cw) / 2.0);
    p.crop(top, left, ch, cw);
  }

 private:
  Size2D size_;
};

}  // namespace

CenterCropSpec::operator TransformSpec() const {
  return {"center_crop", {{"size", {static_cast<double>(size.height), static_cast<double>(size.width)}}}};
}

std::unique_ptr<const TransformStep> make_center_crop_step(const TransformParams& params) {
  TransformArgs args("CenterCrop", params);
  const Size2D size = args.size2d("size");
  args.finish();
  return std::make_unique<CenterCropStep>(size);
}

}  // namespace conveyor
