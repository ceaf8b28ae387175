#include "conveyor/ops/transforms/function.h"

#include <utility>

#include "conveyor/core/error.h"

namespace conveyor {

namespace {

void check_channels(int64_t returned, int channels, std::string_view name) {
  if (returned != channels) {
    throw Error(ErrorKind::kDecode, std::string(name) + " returned an image of " + std::to_string(returned) +
                                        " channel(s); it must keep the chain's " + std::to_string(channels));
  }
}

class FunctionStep final : public ImageStep {
 public:
  FunctionStep(std::string name, ImageCallback function) : name_(std::move(name)), function_(std::move(function)) {}

  // The function may return any size.
  StepPlan plan(ChainPlan& chain) const override {
    chain.size.reset();
    return {};
  }

  void apply_image(SampleImage& sample, SampleRng& /*rng*/) const override {
    const int channels = sample.image.channels;
    function_(sample);
    // The callback checks what it returns; this keeps a faulty one from
    // handing the pipeline an image its buffers do not match.
    const Image& image = sample.image;
    check_channels(image.channels, channels, name_);
    sample.check_size(image.height, image.width, name_);
    if (static_cast<size_t>(image.height) * static_cast<size_t>(image.width) * static_cast<size_t>(channels) !=
        image.pixels.size()) {
      throw Error(ErrorKind::kInternal, name_ + " left an image whose pixels do not match its size");
    }
  }

 private:
  std::string name_;
  ImageCallback function_;
};

}  // namespace

void take_function_result(SampleImage& sample, const uint8_t* pixels, int64_t height, int64_t width, int64_t channels,
                          std::string_view name) {
  Image& image = sample.image;
  check_channels(channels, image.channels, name);
  sample.check_size(height, width, name);
  sample.spare.assign(pixels, pixels + height * width * channels);
  image.height = static_cast<int>(height);
  image.width = static_cast<int>(width);
  std::swap(image.pixels, sample.spare);
}

std::unique_ptr<const TransformStep> make_function_step(std::string name, ImageCallback function) {
  check_config(static_cast<bool>(function), name + ": no function given");
  return std::make_unique<FunctionStep>(std::move(name), std::move(function));
}

}  // namespace conveyor
