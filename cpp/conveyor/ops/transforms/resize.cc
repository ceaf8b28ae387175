#include "conveyor/ops/transforms/resize.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "conveyor/core/checked_size.h"
#include "conveyor/core/error.h"
#include "conveyor/ops/resize.h"
#include "conveyor/ops/transforms/pad_crop.h"

namespace conveyor {

namespace {

class ResizeStep final : public GeometricStep {
 public:
  ResizeStep(int shorter, Size2D size, bool antialias) : shorter_(shorter), size_(size), antialias_(antialias) {}

  StepPlan plan(ChainPlan& chain) const override {
    if (shorter_ > 0) {
      chain.size.reset();
    } else {
      chain.size = size_;
    }
    return {.antialias = antialias_};
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

namespace {

// Resamples `view` (all of it) into sample.image at `size` (checked by the caller).
void resize_into(const ImageView& view, Size2D size, bool antialias, SampleImage& sample) {
  thread_local std::vector<uint8_t> prefiltered;
  use_single_threaded_opencv();
  const int c = view.channels;
  std::vector<uint8_t> out = std::move(sample.spare);
  out.resize(static_cast<size_t>(size.height) * static_cast<size_t>(size.width) * static_cast<size_t>(c));
  resize_image(view, {0, 0, static_cast<double>(view.width), static_cast<double>(view.height)}, out.data(), size.height,
               size.width, static_cast<ptrdiff_t>(size.width) * c, antialias, prefiltered);
  if (sample.boxes != nullptr) {
    const double sx = static_cast<double>(view.width) / size.width, sy = static_cast<double>(view.height) / size.height;
    *sample.boxes = transform_boxes(*sample.boxes, {0, 0, sx, sy, false, size.height, size.width, false});
  }
  sample.spare = std::move(sample.image.pixels);
  sample.image = {size.height, size.width, c, std::move(out)};
}

int int_arg(TransformArgs& args, std::string_view arg) {
  const double v = args.number(arg);
  args.check(v == std::floor(v) && std::abs(v) <= (1 << 30), std::string(arg) + " must be an integer");
  return static_cast<int>(v);
}

}  // namespace

void resize_function(const TransformParams& params, SampleImage& sample) {
  TransformArgs args("resize", params);
  const std::vector<int> size = args.sizes("size", {2});
  const bool antialias = args.flag("antialias", true);
  args.finish();
  sample.check_size(size[0], size[1], "resize");
  resize_into(sample.image.view(), {size[0], size[1]}, antialias, sample);
}

void resized_crop_function(const TransformParams& params, SampleImage& sample) {
  TransformArgs args("resized_crop", params);
  const int top = int_arg(args, "top"), left = int_arg(args, "left");
  const int height = int_arg(args, "height"), width = int_arg(args, "width");
  args.check(height > 0 && width > 0, "height and width must be positive");
  const std::vector<int> size = args.sizes("size", {2});
  const bool antialias = args.flag("antialias", true);
  args.finish();
  sample.check_size(height, width, "resized_crop");
  sample.check_size(size[0], size[1], "resized_crop");
  // As torchvision: crop (zero padding outside the image), then resize the crop alone.
  Image cropped;
  pad_crop_image(sample.image, top, left, height, width, PadMode::kConstant, Fill{}, cropped);
  crop_boxes(sample.boxes, top, left, height, width);
  resize_into(cropped.view(), {size[0], size[1]}, antialias, sample);
}

}  // namespace conveyor
