#include "conveyor/ops/transforms/pad_crop.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <opencv2/core.hpp>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "conveyor/core/checked_size.h"
#include "conveyor/core/error.h"

namespace conveyor {

namespace {

int cv_border(PadMode mode) {
  switch (mode) {
    case PadMode::kEdge:
      return cv::BORDER_REPLICATE;
    case PadMode::kReflect:
      return cv::BORDER_REFLECT_101;  // torch's "reflect": gfedcb|abcdefgh|gfedcba.
    case PadMode::kSymmetric:
      return cv::BORDER_REFLECT;  // torch's "symmetric": fedcba|abcdefgh|hgfedcb.
    case PadMode::kConstant:
      break;
  }
  return cv::BORDER_CONSTANT;
}

// Padding [left, top, right, bottom], each a non-negative int; required
// without a fallback.
std::array<int, 4> read_padding(TransformArgs& args, std::optional<std::vector<double>> fallback) {
  const std::vector<double> values = args.numbers("padding", 4, std::move(fallback));
  std::array<int, 4> padding{};
  for (size_t i = 0; i < 4; ++i) {
    args.check(values[i] == std::floor(values[i]) && values[i] >= 0 && values[i] <= (1 << 30),
               "padding must be non-negative integers of at most 2**30, got " + args.given("padding"));
    padding[i] = static_cast<int>(values[i]);
  }
  return padding;
}

// torchvision's Pad with padding [left, top, right, bottom] around the
// image, `fill` and `mode`.
struct Padding {
  std::array<int, 4> padding{};
  FillArg fill;
  PadMode mode = PadMode::kConstant;

  void plan(ChainPlan& chain) const {
    fill.check_channels("Pad", chain.channels);
    if (chain.size) {
      const int64_t h = static_cast<int64_t>(chain.size->height) + padding[1] + padding[3];
      const int64_t w = static_cast<int64_t>(chain.size->width) + padding[0] + padding[2];
      chain.size = Size2D{checked_int(h, "Pad: the padded height"), checked_int(w, "Pad: the padded width")};
    }
  }
};

// Pads `sample`'s image with padding [left, top, right, bottom].
void pad(SampleImage& sample, const std::array<int, 4>& padding, PadMode mode, const Fill& fill,
         std::string_view what) {
  const Image& src = sample.image;
  const int64_t h = static_cast<int64_t>(src.height) + padding[1] + padding[3];
  const int64_t w = static_cast<int64_t>(src.width) + padding[0] + padding[2];
  sample.check_size(h, w, what);
  const int ih = static_cast<int>(h), iw = static_cast<int>(w);
  Image out{0, 0, 0, std::move(sample.spare)};
  pad_crop_image(src, -padding[1], -padding[0], ih, iw, mode, fill, out);
  sample.spare = std::move(sample.image.pixels);
  sample.image = std::move(out);
  crop_boxes(sample.boxes, -padding[1], -padding[0], ih, iw);
}

// Pad with a constant fill: a crop reaching outside the image, fused into
// the group's resample.
class ConstantPadStep final : public GeometricStep {
 public:
  explicit ConstantPadStep(Padding padding) : p_(std::move(padding)) {}

  StepPlan plan(ChainPlan& chain) const override {
    p_.plan(chain);
    return {.fill = p_.fill.bytes()};
  }

  void place(Placement& p, SampleRng& /*rng*/) const override {
    const std::array<int, 4>& pad = p_.padding;
    p.crop(-pad[1], -pad[0], p.height + pad[1] + pad[3], p.width + pad[0] + pad[2]);
  }

 private:
  Padding p_;
};

// Pad in the other modes, which need pixels: runs on the image.
class PadImageStep final : public ImageStep {
 public:
  explicit PadImageStep(Padding padding) : p_(std::move(padding)) {}

  StepPlan plan(ChainPlan& chain) const override {
    p_.plan(chain);
    return {};
  }

  void apply_image(SampleImage& sample, SampleRng& /*rng*/) const override {
    pad(sample, p_.padding, p_.mode, p_.fill.bytes(), "Pad");
  }

 private:
  Padding p_;
};

// torchvision's RandomCrop: optional padding (and pad_if_needed), then a
// crop at a uniformly drawn position.
struct RandomCropWindow {
  Size2D size;
  std::array<int, 4> padding{};
  bool padded = false;
  bool pad_if_needed = false;
  FillArg fill;
  PadMode mode = PadMode::kConstant;

  // The crop's top-left corner in the unpadded image (negative: in the padding).
  struct Window {
    int64_t top = 0;
    int64_t left = 0;
  };

  void plan(ChainPlan& chain) const {
    fill.check_channels("RandomCrop", chain.channels);
    chain.size = size;
  }

  // torchvision's make_params: the padded size (pad_if_needed adds the
  // missing rows on both sides), then top (if any room), then left.
  Window draw(int64_t height, int64_t width, SampleRng& rng) const {
    int64_t left_pad = padding[0], top_pad = padding[1];
    int64_t ph = height + padding[1] + padding[3], pw = width + padding[0] + padding[2];
    if (pad_if_needed) {
      if (ph < size.height) {
        const int64_t diff = size.height - ph;
        top_pad += diff;
        ph += 2 * diff;
      }
      if (pw < size.width) {
        const int64_t diff = size.width - pw;
        left_pad += diff;
        pw += 2 * diff;
      }
    }
    if (ph < size.height || pw < size.width) {
      throw Error(ErrorKind::kConfig, "RandomCrop: required crop size (" + std::to_string(size.height) + ", " +
                                          std::to_string(size.width) + ") is larger than " + (padded ? "padded " : "") +
                                          "input image size (" + std::to_string(ph) + ", " + std::to_string(pw) + ")");
    }
    Window window;
    if (ph > size.height) window.top = static_cast<int64_t>(rng.below(static_cast<uint64_t>(ph - size.height + 1)));
    if (pw > size.width) window.left = static_cast<int64_t>(rng.below(static_cast<uint64_t>(pw - size.width + 1)));
    window.top -= top_pad;
    window.left -= left_pad;
    return window;
  }
};

// RandomCrop with a constant fill: a crop of the fused group.
class ConstantRandomCropStep final : public GeometricStep {
 public:
  explicit ConstantRandomCropStep(RandomCropWindow crop) : c_(std::move(crop)) {}

  StepPlan plan(ChainPlan& chain) const override {
    c_.plan(chain);
    if (c_.padded || c_.pad_if_needed) return {.fill = c_.fill.bytes()};
    return {};
  }

  void place(Placement& p, SampleRng& rng) const override {
    const RandomCropWindow::Window window = c_.draw(static_cast<int64_t>(p.height), static_cast<int64_t>(p.width), rng);
    p.crop(window.top, window.left, c_.size.height, c_.size.width);
  }

 private:
  RandomCropWindow c_;
};

// RandomCrop padding in the other modes: runs on the image.
class RandomCropImageStep final : public ImageStep {
 public:
  explicit RandomCropImageStep(RandomCropWindow crop) : c_(std::move(crop)) {}

  StepPlan plan(ChainPlan& chain) const override {
    c_.plan(chain);
    return {};
  }

  void apply_image(SampleImage& sample, SampleRng& rng) const override {
    const RandomCropWindow::Window window = c_.draw(sample.image.height, sample.image.width, rng);
    const Size2D size = c_.size;
    sample.check_size(size.height, size.width, "RandomCrop");
    Image out{0, 0, 0, std::move(sample.spare)};
    pad_crop_image(sample.image, static_cast<int>(window.top), static_cast<int>(window.left), size.height, size.width,
                   c_.mode, c_.fill.bytes(), out);
    sample.spare = std::move(sample.image.pixels);
    sample.image = std::move(out);
    crop_boxes(sample.boxes, window.top, window.left, size.height, size.width);
  }

 private:
  RandomCropWindow c_;
};

// torchvision's crop / center_crop anchor and their zero padding.
void crop_sample(SampleImage& sample, int top, int left, int height, int width, std::string_view what) {
  sample.check_size(height, width, what);
  Image out{0, 0, 0, std::move(sample.spare)};
  pad_crop_image(sample.image, top, left, height, width, PadMode::kConstant, Fill{}, out);
  sample.spare = std::move(sample.image.pixels);
  sample.image = std::move(out);
  crop_boxes(sample.boxes, top, left, height, width);
}

}  // namespace

FillArg FillArg::read(TransformArgs& args, std::string_view arg) {
  FillArg fill;
  fill.values = args.numbers(arg, 0, std::vector<double>{0});
  args.check(fill.values.size() == 1 || fill.values.size() == 3,
             std::string(arg) + " must be one number or one per channel (3), got " + args.given(arg));
  for (const double v : fill.values) {
    args.check(std::isfinite(v) && v >= 0 && v <= 255,
               std::string(arg) + " values must be in [0, 255], got " + args.given(arg));
  }
  return fill;
}

void FillArg::check_channels(std::string_view transform, int channels) const {
  if (values.size() != 1 && static_cast<int>(values.size()) != channels) {
    throw Error(ErrorKind::kConfig, std::string(transform) + ": fill has " + std::to_string(values.size()) +
                                        " values but the images have " + std::to_string(channels) + " channel(s)");
  }
}

Fill FillArg::bytes() const {
  return {static_cast<uint8_t>(at(0)), static_cast<uint8_t>(at(1)), static_cast<uint8_t>(at(2))};
}

PadMode read_pad_mode(TransformArgs& args, std::string_view arg) {
  const double v = args.number(arg, 0);
  args.check(v == 0 || v == 1 || v == 2 || v == 3,
             std::string(arg) + " must be 0 (constant), 1 (edge), 2 (reflect) or 3 (symmetric)");
  return static_cast<PadMode>(static_cast<int>(v));
}

void pad_crop_image(const Image& src, int top, int left, int height, int width, PadMode mode, const Fill& fill,
                    Image& dst) {
  const int c = src.channels;
  const auto row_bytes =
      static_cast<size_t>(checked_mul(width, c, "the row of a padded or cropped image", ErrorKind::kTooLarge));
  dst.height = height;
  dst.width = width;
  dst.channels = c;
  dst.pixels.resize(static_cast<size_t>(
      checked_mul(static_cast<int64_t>(row_bytes), height, "a padded or cropped image", ErrorKind::kTooLarge)));
  const int border = cv_border(mode);
  // Source column of each output column (-1: the fill), computed once.
  thread_local std::vector<int> columns;
  columns.resize(static_cast<size_t>(width));
  for (int x = 0; x < width; ++x) columns[x] = cv::borderInterpolate(left + x, src.width, border);
  std::array<uint8_t, 3> pixel_fill{fill[0], c == 1 ? fill[0] : fill[1], c == 1 ? fill[0] : fill[2]};
  for (int y = 0; y < height; ++y) {
    const int sy = cv::borderInterpolate(top + y, src.height, border);
    uint8_t* d = dst.pixels.data() + static_cast<size_t>(y) * row_bytes;
    if (sy < 0) {
      for (int x = 0; x < width; ++x) std::memcpy(d + static_cast<size_t>(x) * c, pixel_fill.data(), c);
      continue;
    }
    const uint8_t* s = src.pixels.data() + static_cast<size_t>(sy) * src.width * c;
    const int x0 = std::clamp(-left, 0, width), x1 = std::clamp(src.width - left, x0, width);
    for (int x = 0; x < x0; ++x) {
      const int sx = columns[x];
      std::memcpy(d + static_cast<size_t>(x) * c, sx < 0 ? pixel_fill.data() : s + static_cast<size_t>(sx) * c, c);
    }
    if (x1 > x0)
      std::memcpy(d + static_cast<size_t>(x0) * c, s + static_cast<size_t>(left + x0) * c,
                  static_cast<size_t>(x1 - x0) * c);
    for (int x = x1; x < width; ++x) {
      const int sx = columns[x];
      std::memcpy(d + static_cast<size_t>(x) * c, sx < 0 ? pixel_fill.data() : s + static_cast<size_t>(sx) * c, c);
    }
  }
}

void crop_boxes(std::vector<BoundingBox>* boxes, double top, double left, int height, int width) {
  if (boxes == nullptr) return;
  *boxes = transform_boxes(*boxes, {left, top, 1, 1, false, height, width, false});
}

std::unique_ptr<const TransformStep> make_pad_step(const TransformParams& params) {
  TransformArgs args("Pad", params);
  const std::array<int, 4> padding = read_padding(args, std::nullopt);
  FillArg fill = FillArg::read(args);
  const PadMode mode = read_pad_mode(args);
  args.finish();
  Padding p{padding, std::move(fill), mode};
  if (mode == PadMode::kConstant) return std::make_unique<ConstantPadStep>(std::move(p));
  return std::make_unique<PadImageStep>(std::move(p));
}

std::unique_ptr<const TransformStep> make_random_crop_step(const TransformParams& params) {
  TransformArgs args("RandomCrop", params);
  const Size2D size = args.size2d("size");
  const bool padded = args.has("padding");
  const std::array<int, 4> padding = read_padding(args, std::vector<double>{0, 0, 0, 0});
  const bool pad_if_needed = args.flag("pad_if_needed", false);
  FillArg fill = FillArg::read(args);
  const PadMode mode = read_pad_mode(args);
  args.finish();
  RandomCropWindow crop{size, padding, padded, pad_if_needed, std::move(fill), mode};
  if (mode == PadMode::kConstant) return std::make_unique<ConstantRandomCropStep>(std::move(crop));
  return std::make_unique<RandomCropImageStep>(std::move(crop));
}

void crop_function(const TransformParams& params, SampleImage& sample) {
  TransformArgs args("crop", params);
  const int top = args.integer("top"), left = args.integer("left");
  const std::vector<int> size = args.sizes("size", {2});
  args.finish();
  crop_sample(sample, top, left, size[0], size[1], "crop");
}

void center_crop_function(const TransformParams& params, SampleImage& sample) {
  TransformArgs args("center_crop", params);
  const Size2D size = args.size2d("output_size");
  args.finish();
  // As CenterCrop: a too-small side is padded by (crop - size) // 2 on the
  // top/left, else offset by round((size - crop) / 2) (half to even).
  const int ih = sample.image.height, iw = sample.image.width;
  const int top =
      size.height > ih ? -((size.height - ih) / 2) : static_cast<int>(std::nearbyint((ih - size.height) / 2.0));
  const int left =
      size.width > iw ? -((size.width - iw) / 2) : static_cast<int>(std::nearbyint((iw - size.width) / 2.0));
  crop_sample(sample, top, left, size.height, size.width, "center_crop");
}

void pad_function(const TransformParams& params, SampleImage& sample) {
  TransformArgs args("pad", params);
  const std::array<int, 4> padding = read_padding(args, std::nullopt);
  const FillArg fill = FillArg::read(args);
  const PadMode mode = read_pad_mode(args);
  args.finish();
  fill.check_channels("pad", sample.image.channels);
  pad(sample, padding, mode, fill.bytes(), "pad");
}

}  // namespace conveyor
