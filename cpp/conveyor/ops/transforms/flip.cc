#include "conveyor/ops/transforms/flip.h"

#include <cstring>
#include <utility>

#include "conveyor/ops/transforms/image_step.h"

namespace conveyor {

namespace {

// A mirror: the flip is one bit of the placement, applied by the output pass
// (a vertical one as a view with its rows reversed; a later crop is mirrored
// instead), so it costs no extra pass.
class FlipStep final : public MirrorStep {
 public:
  FlipStep(double p, bool vertical) : p_(p), vertical_(vertical) {}

  void place(Placement& placement, SampleRng& rng) const override {
    if (rng.uniform() < p_) {
      bool& flip = vertical_ ? placement.vflip : placement.flip;
      flip = !flip;
    }
  }

 private:
  double p_;
  bool vertical_;
};

std::unique_ptr<const TransformStep> make_flip_step(const char* name, const TransformParams& params, bool vertical) {
  TransformArgs args(name, params);
  const double p = probability_arg(args, 0.5);
  args.finish();
  return std::make_unique<FlipStep>(p, vertical);
}

}  // namespace

HorizontalFlipSpec::operator TransformSpec() const { return {"horizontal_flip", {{"p", {p}}}}; }

VerticalFlipSpec::operator TransformSpec() const { return {"vertical_flip", {{"p", {p}}}}; }

std::unique_ptr<const TransformStep> make_horizontal_flip_step(const TransformParams& params) {
  return make_flip_step("RandomHorizontalFlip", params, false);
}

std::unique_ptr<const TransformStep> make_vertical_flip_step(const TransformParams& params) {
  return make_flip_step("RandomVerticalFlip", params, true);
}

void flip_image(SampleImage& sample, bool vertical) {
  Image& img = sample.image;
  const int h = img.height, w = img.width, c = img.channels;
  const size_t row_bytes = static_cast<size_t>(w) * c;
  sample.spare.resize(img.pixels.size());
  for (int y = 0; y < h; ++y) {
    const uint8_t* s = img.pixels.data() + y * row_bytes;
    uint8_t* d = sample.spare.data() + (vertical ? h - 1 - y : y) * row_bytes;
    if (vertical) {
      std::memcpy(d, s, row_bytes);
    } else {
      for (int x = 0; x < w; ++x)
        std::memcpy(d + static_cast<size_t>(w - 1 - x) * c, s + static_cast<size_t>(x) * c, c);
    }
  }
  std::swap(img.pixels, sample.spare);
  if (sample.boxes != nullptr) {
    for (BoundingBox& b : *sample.boxes) {
      if (vertical) {
        b.y = static_cast<float>(h - (static_cast<double>(b.y) + b.height));
      } else {
        b.x = static_cast<float>(w - (static_cast<double>(b.x) + b.width));
      }
    }
  }
}

void horizontal_flip_function(const TransformParams& params, SampleImage& sample) {
  TransformArgs("horizontal_flip", params).finish();
  flip_image(sample, false);
}

void vertical_flip_function(const TransformParams& params, SampleImage& sample) {
  TransformArgs("vertical_flip", params).finish();
  flip_image(sample, true);
}

}  // namespace conveyor
