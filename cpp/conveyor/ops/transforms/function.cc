#include "conveyor/ops/transforms/function.h"

#include <utility>

#include "conveyor/core/checked_size.h"
#include "conveyor/core/error.h"

namespace conveyor {

namespace {

class FunctionStep final : public TransformStep {
 public:
  FunctionStep(std::string name, ImageCallback function) : name_(std::move(name)), function_(std::move(function)) {}

  StepKind kind() const override { return StepKind::kImage; }

  // The function may return any size.
  void plan(ChainPlan& chain) const override { chain.size.reset(); }

  void place(Placement& /*placement*/, SampleRng& /*rng*/) const override {}

  float map_value(int /*channel*/, float value) const override { return value; }

  void apply_image(SampleImage& sample, SampleRng& /*rng*/) const override {
    const int channels = sample.image.channels;
    function_(sample);
    // The callback checks what it returns; this keeps a faulty one from
    // handing the pipeline an image its buffers do not match.
    const Image& image = sample.image;
    if (image.channels != channels) {
      throw Error(ErrorKind::kDecode, name_ + " returned an image of " + std::to_string(image.channels) +
                                          " channel(s); it must keep the chain's " + std::to_string(channels));
    }
    if (image.height < 1 || image.width < 1 ||
        checked_mul(checked_mul(image.height, image.width, name_, ErrorKind::kTooLarge), channels, name_,
                    ErrorKind::kTooLarge) != static_cast<int64_t>(image.pixels.size())) {
      throw Error(ErrorKind::kInternal, name_ + " left an image whose pixels do not match its size");
    }
  }

  void apply_output(OutputSample& /*sample*/, SampleRng& /*rng*/) const override {}

 private:
  std::string name_;
  ImageCallback function_;
};

}  // namespace

std::unique_ptr<const TransformStep> make_function_step(std::string name, ImageCallback function) {
  check_config(static_cast<bool>(function), name + ": no function given");
  return std::make_unique<FunctionStep>(std::move(name), std::move(function));
}

}  // namespace conveyor
