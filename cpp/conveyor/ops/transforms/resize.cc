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
  ResizeStep(int shorter, Size2D size, Resampling resampling)
      : shorter_(shorter), size_(size), resampling_(resampling) {}

  StepPlan plan(ChainPlan& chain) const override {
    if (shorter_ > 0) {
      chain.size.reset();
    } else {
      chain.size = size_;
    }
    return {.antialias = resampling_.antialias, .interpolation = resampling_.interpolation};
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
  Resampling resampling_;
};

}  // namespace

Resampling read_resampling(TransformArgs& args) {
  Resampling r;
  const double mode = args.number("interpolation", static_cast<double>(Interpolation::kBilinear));
  args.check(mode == 0 || mode == 1 || mode == 2 || mode == 3,
             "interpolation must be 0 (nearest), 1 (bilinear), 2 (bicubic) or 3 (nearest-exact), got " +
                 args.given("interpolation"));
  r.interpolation = static_cast<Interpolation>(static_cast<int>(mode));
  r.antialias = args.flag("antialias", true);
  return r;
}

void write_resampling(Resampling r, TransformParams& params) {
  params["antialias"] = {r.antialias ? 1.0 : 0.0};
  if (r.interpolation != Interpolation::kBilinear) {
    params["interpolation"] = {static_cast<double>(r.interpolation)};
  }
}

ResizeSpec::operator TransformSpec() const {
  TransformSpec spec{"resize", {}};
  write_resampling({interpolation, antialias}, spec.params);
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
  const Resampling resampling = read_resampling(args);
  args.finish();
  if (size.size() == 1) return std::make_unique<ResizeStep>(size[0], Size2D{}, resampling);
  return std::make_unique<ResizeStep>(0, Size2D{size[0], size[1]}, resampling);
}

namespace {

// Resamples `view` (all of it) into sample.image at `size` (checked by the caller).
void resize_into(const ImageView& view, Size2D size, Resampling resampling, SampleImage& sample) {
  thread_local std::vector<uint8_t> prefiltered;
  use_single_threaded_opencv();
  const int c = view.channels;
  std::vector<uint8_t> out = std::move(sample.spare);
  out.resize(static_cast<size_t>(size.height) * static_cast<size_t>(size.width) * static_cast<size_t>(c));
  resize_image(view, {0, 0, static_cast<double>(view.width), static_cast<double>(view.height)}, out.data(), size.height,
               size.width, static_cast<ptrdiff_t>(size.width) * c, resampling, prefiltered);
  if (sample.boxes != nullptr) {
    const double sx = static_cast<double>(view.width) / size.width, sy = static_cast<double>(view.height) / size.height;
    *sample.boxes = transform_boxes(*sample.boxes, {0, 0, sx, sy, false, size.height, size.width, false});
  }
  sample.spare = std::move(sample.image.pixels);
  sample.image = {size.height, size.width, c, std::move(out)};
}

}  // namespace

void resize_function(const TransformParams& params, SampleImage& sample) {
  TransformArgs args("resize", params);
  const std::vector<int> size = args.sizes("size", {2});
  const Resampling resampling = read_resampling(args);
  args.finish();
  sample.check_size(size[0], size[1], "resize");
  resize_into(sample.image.view(), {size[0], size[1]}, resampling, sample);
}

void resized_crop_function(const TransformParams& params, SampleImage& sample) {
  TransformArgs args("resized_crop", params);
  const int top = args.integer("top"), left = args.integer("left");
  const int height = args.integer("height"), width = args.integer("width");
  args.check(height > 0 && width > 0, "height and width must be positive");
  const std::vector<int> size = args.sizes("size", {2});
  const Resampling resampling = read_resampling(args);
  args.finish();
  sample.check_size(height, width, "resized_crop");
  sample.check_size(size[0], size[1], "resized_crop");
  // As torchvision: crop (zero padding outside the image), then resize the crop alone.
  Image cropped;
  pad_crop_image(sample.image, top, left, height, width, PadMode::kConstant, Fill{}, cropped);
  crop_boxes(sample.boxes, top, left, height, width);
  resize_into(cropped.view(), {size[0], size[1]}, resampling, sample);
}

}  // namespace conveyor
