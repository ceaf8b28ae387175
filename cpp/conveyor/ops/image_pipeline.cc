#include "conveyor/ops/image_pipeline.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>
#include <type_traits>
#include <utility>

#include "conveyor/core/error.h"
#include "conveyor/ops/image_decoder.h"
#include "conveyor/ops/resize.h"

namespace conveyor {

namespace {

// Python's round(): half to even (the default floating-point rounding mode).
double round_half_even(double v) { return std::nearbyint(v); }

// IEEE binary16 from binary32, round to nearest even (F. Giesen's
// float_to_half_fast3_rtne); matches numpy's astype(float16) and torch's .half().
uint16_t float_to_half(float value) {
  uint32_t x;
  std::memcpy(&x, &value, sizeof(x));
  const uint32_t sign = x & 0x80000000u;
  x ^= sign;
  uint16_t h;
  if (x >= (127u + 16u) << 23) {  // Overflow to infinity, or NaN.
    h = x > (255u << 23) ? 0x7e00 : 0x7c00;
  } else if (x < (113u << 23)) {  // Subnormal or zero: let the FPU round.
    const uint32_t magic_bits = ((127u - 15u) + (23u - 10u) + 1u) << 23;
    float magic;
    std::memcpy(&magic, &magic_bits, sizeof(magic));
    float f;
    std::memcpy(&f, &x, sizeof(f));
    f += magic;
    std::memcpy(&x, &f, sizeof(x));
    h = static_cast<uint16_t>(x - magic_bits);
  } else {
    const uint32_t mantissa_odd = (x >> 13) & 1u;
    x -= 112u << 23;  // Rebias the exponent from 127 to 15.
    x += 0xfffu + mantissa_odd;
    h = static_cast<uint16_t>(x >> 13);
  }
  return static_cast<uint16_t>(h | (sign >> 16));
}

std::string size_text(const Size2D& s) {
  std::string text = "(";  // Built by appends: GCC 12 warns (-Wrestrict) on "(" + std::string.
  text += std::to_string(s.height);
  text += ", ";
  text += std::to_string(s.width);
  text += ")";
  return text;
}

// Where the output comes from: output pixel (y, x) samples source position
// (y0 + y * sy, x0 + x * sx) (pixel edges), then the image is mirrored if `flip`.
struct Placement {
  double x0 = 0, y0 = 0, sx = 1, sy = 1;
  bool flip = false;
};

// The single pass after the resize: flip, dtype conversion, normalization and
// layout, through a per-channel lookup table (256 entries: the input is uint8),
// so every value is exactly torchvision's (x / 255 - mean) / std in float32.
template <typename T, int C>
void write_output(const ImageView& img, bool flip, Layout layout, const T* lut, T* out) {
  const int h = img.height, w = img.width;
  if (layout == Layout::kCHW) {
    const ptrdiff_t plane = static_cast<ptrdiff_t>(h) * w;
    for (int y = 0; y < h; ++y) {
      const uint8_t* s = img.row(y);
      T* o = out + static_cast<ptrdiff_t>(y) * w;
      if (flip) {
        for (int x = 0; x < w; ++x)
          for (int c = 0; c < C; ++c) o[c * plane + (w - 1 - x)] = lut[c * 256 + s[x * C + c]];
      } else {
        for (int x = 0; x < w; ++x)
          for (int c = 0; c < C; ++c) o[c * plane + x] = lut[c * 256 + s[x * C + c]];
      }
    }
  } else {
    for (int y = 0; y < h; ++y) {
      const uint8_t* s = img.row(y);
      T* o = out + static_cast<ptrdiff_t>(y) * w * C;
      if (flip) {
        for (int x = 0; x < w; ++x)
          for (int c = 0; c < C; ++c) o[(w - 1 - x) * C + c] = lut[c * 256 + s[x * C + c]];
      } else if constexpr (std::is_same_v<T, uint8_t>) {
        std::memcpy(o, s, static_cast<size_t>(w) * C);  // The identity table.
      } else {
        for (int x = 0; x < w * C; x += C)
          for (int c = 0; c < C; ++c) o[x + c] = lut[c * 256 + s[x + c]];
      }
    }
  }
}

template <typename T>
void write_output(const ImageView& img, bool flip, Layout layout, const T* lut, void* out) {
  if (img.channels == 3) {
    write_output<T, 3>(img, flip, layout, lut, static_cast<T*>(out));
  } else {
    write_output<T, 1>(img, flip, layout, lut, static_cast<T*>(out));
  }
}

}  // namespace

CropBox sample_random_resized_crop(int height, int width, const std::array<double, 2>& scale,
                                   const std::array<double, 2>& ratio, SampleRng& rng) {
  const double area = static_cast<double>(height) * width;
  const double log_r0 = std::log(ratio[0]), log_r1 = std::log(ratio[1]);
  for (int attempt = 0; attempt < 10; ++attempt) {
    const double target_area = area * rng.uniform(scale[0], scale[1]);
    const double aspect = std::exp(rng.uniform(log_r0, log_r1));
    const double w = round_half_even(std::sqrt(target_area * aspect));
    const double h = round_half_even(std::sqrt(target_area / aspect));
    if (0 < w && w <= width && 0 < h && h <= height) {
      CropBox box;
      box.height = static_cast<int>(h);
      box.width = static_cast<int>(w);
      box.top = static_cast<int>(rng.below(static_cast<uint64_t>(height - box.height + 1)));
      box.left = static_cast<int>(rng.below(static_cast<uint64_t>(width - box.width + 1)));
      return box;
    }
  }
  // Central crop with the aspect ratio clamped into `ratio`.
  CropBox box{0, 0, height, width};
  const double in_ratio = static_cast<double>(width) / height;
  const double r_min = std::min(ratio[0], ratio[1]), r_max = std::max(ratio[0], ratio[1]);
  if (in_ratio < r_min) {
    box.height = static_cast<int>(round_half_even(width / r_min));
  } else if (in_ratio > r_max) {
    box.width = static_cast<int>(round_half_even(height * r_max));
  }
  box.top = (height - box.height) / 2;
  box.left = (width - box.width) / 2;
  return box;
}

struct ImagePipeline::Plan {
  std::vector<TransformSpec> geometry;  // Resize, crops and flips, in order (Normalize folded into the tables).
  ImageOutputSpec output;
  ImagePipelineOptions options;
  int64_t max_pixels = kDefaultMaxPixels;
  Size2D size;            // Fixed output size.
  bool antialias = true;  // False if any resizing step asked for no antialiasing.
  std::vector<uint8_t> lut_u8;
  std::vector<uint16_t> lut_f16;
  std::vector<float> lut_f32;

  // Runs the geometric steps symbolically on an image of `height` x `width`:
  // every crop and resize composes into one affine map from output to source,
  // so the whole chain becomes one source box and one resize. Flips are
  // deferred to the output pass; a crop after a flip is mirrored instead.
  Placement place(int height, int width, SampleRng& rng) const {
    Placement p;
    double cur_h = height, cur_w = width;
    auto crop = [&](double top, double left, double h, double w) {
      if (p.flip) left = cur_w - w - left;
      p.x0 += left * p.sx;
      p.y0 += top * p.sy;
      cur_h = h;
      cur_w = w;
    };
    auto resize = [&](double h, double w) {
      p.sx *= cur_w / w;
      p.sy *= cur_h / h;
      cur_h = h;
      cur_w = w;
    };
    for (const TransformSpec& step : geometry) {
      if (const auto* r = std::get_if<ResizeSpec>(&step)) {
        if (r->shorter > 0) {
          // torchvision: the long side is int(shorter * long / short), truncated.
          const int ih = static_cast<int>(cur_h), iw = static_cast<int>(cur_w);
          const int short_side = std::min(ih, iw), long_side = std::max(ih, iw);
          const auto new_long = static_cast<int>(static_cast<int64_t>(r->shorter) * long_side / short_side);
          if (iw <= ih) {
            resize(new_long, r->shorter);
          } else {
            resize(r->shorter, new_long);
          }
        } else {
          resize(r->size.height, r->size.width);
        }
      } else if (const auto* c = std::get_if<CenterCropSpec>(&step)) {
        // torchvision pads (zeros) a too-small image by (crop - size) // 2 on
        // the top/left, else offsets by round((size - crop) / 2).
        const int ih = static_cast<int>(cur_h), iw = static_cast<int>(cur_w);
        const int ch = c->size.height, cw = c->size.width;
        const double top = ch > ih ? -((ch - ih) / 2) : round_half_even((ih - ch) / 2.0);
        const double left = cw > iw ? -((cw - iw) / 2) : round_half_even((iw - cw) / 2.0);
        crop(top, left, ch, cw);
      } else if (const auto* rrc = std::get_if<RandomResizedCropSpec>(&step)) {
        const CropBox box =
            sample_random_resized_crop(static_cast<int>(cur_h), static_cast<int>(cur_w), rrc->scale, rrc->ratio, rng);
        crop(box.top, box.left, box.height, box.width);
        resize(rrc->size.height, rrc->size.width);
      } else if (const auto* f = std::get_if<HorizontalFlipSpec>(&step)) {
        if (rng.uniform() < f->p) p.flip = !p.flip;
      }
    }
    return p;
  }
};

ImagePipeline::ImagePipeline(std::vector<TransformSpec> transforms, ImageOutputSpec output, int64_t max_pixels,
                             ImagePipelineOptions options) {
  auto plan = std::make_unique<Plan>();
  plan->output = output;
  plan->options = options;
  plan->max_pixels = max_pixels;
  const int channels = output.channels;
  check_config(channels == 1 || channels == 3,
               "ImagePipeline: channels must be 1 or 3, got " + std::to_string(channels));
  check_config(output.dtype == DType::kUInt8 || output.dtype == DType::kFloat16 || output.dtype == DType::kFloat32,
               "ImagePipeline: dtype must be uint8, float16 or float32, got " + std::string(dtype_name(output.dtype)));
  check_config(max_pixels > 0, "ImagePipeline: max_pixels must be positive");

  auto check_size = [](const Size2D& s, const char* what) {
    check_config(s.height > 0 && s.width > 0, std::string(what) + ": size must be positive, got " + size_text(s));
  };
  // Per-channel affine map of the [0, 1] value, applied in float32 in order.
  std::vector<std::pair<std::vector<float>, std::vector<float>>> normalizations;
  bool fixed = false;  // Whether the geometry so far yields a fixed size.
  for (size_t i = 0; i < transforms.size(); ++i) {
    const TransformSpec& step = transforms[i];
    const std::string where = "transform " + std::to_string(i) + " ";
    const bool geometric =
        !std::holds_alternative<HorizontalFlipSpec>(step) && !std::holds_alternative<NormalizeSpec>(step);
    check_config(!geometric || normalizations.empty(),
                 where + "(a resize or crop) comes after Normalize: put Normalize after every resize and crop");
    if (const auto* r = std::get_if<ResizeSpec>(&step)) {
      check_config(r->shorter >= 0, where + "Resize: size must be positive, got " + std::to_string(r->shorter));
      if (r->shorter > 0) {
        check_config(r->size.height == 0 && r->size.width == 0, where + "Resize: give either a shorter side or (h, w)");
        plan->size = {0, 0};
        fixed = false;
      } else {
        check_size(r->size, (where + "Resize").c_str());
        plan->size = r->size;
        fixed = true;
      }
      plan->antialias = plan->antialias && r->antialias;
    } else if (const auto* c = std::get_if<CenterCropSpec>(&step)) {
      check_size(c->size, (where + "CenterCrop").c_str());
      plan->size = c->size;
      fixed = true;
    } else if (const auto* rrc = std::get_if<RandomResizedCropSpec>(&step)) {
      check_size(rrc->size, (where + "RandomResizedCrop").c_str());
      check_config(rrc->scale[0] > 0 && rrc->scale[0] <= rrc->scale[1] && std::isfinite(rrc->scale[1]),
                   where + "RandomResizedCrop: scale must be (lo, hi) with 0 < lo <= hi");
      check_config(rrc->ratio[0] > 0 && rrc->ratio[0] <= rrc->ratio[1] && std::isfinite(rrc->ratio[1]),
                   where + "RandomResizedCrop: ratio must be (lo, hi) with 0 < lo <= hi");
      plan->size = rrc->size;
      plan->antialias = plan->antialias && rrc->antialias;
      fixed = true;
    } else if (const auto* f = std::get_if<HorizontalFlipSpec>(&step)) {
      check_config(f->p >= 0 && f->p <= 1, where + "RandomHorizontalFlip: p must be in [0, 1]");
    } else if (const auto* n = std::get_if<NormalizeSpec>(&step)) {
      check_config(output.dtype != DType::kUInt8,
                   where + "Normalize: the output dtype is uint8; use float32 or float16 with Normalize");
      check_config(n->mean.size() == static_cast<size_t>(channels) && n->std.size() == static_cast<size_t>(channels),
                   where + "Normalize: mean and std need one value per channel (" + std::to_string(channels) +
                       "), got " + std::to_string(n->mean.size()) + " and " + std::to_string(n->std.size()));
      for (size_t k = 0; k < n->std.size(); ++k) {
        check_config(std::isfinite(n->mean[k]) && std::isfinite(n->std[k]) && n->std[k] != 0,
                     where + "Normalize: mean must be finite and std finite and non-zero");
      }
      normalizations.emplace_back(n->mean, n->std);
      continue;
    }
    plan->geometry.push_back(step);
  }
  check_config(fixed,
               "ImagePipeline: the transforms do not give a fixed output size; end the resizes and crops with "
               "CenterCrop, RandomResizedCrop or Resize((h, w))");

  for (int c = 0; c < channels; ++c) {
    for (int v = 0; v < 256; ++v) {
      plan->lut_u8.push_back(static_cast<uint8_t>(v));
      float x = static_cast<float>(v) / 255.0f;
      for (const auto& [mean, std] : normalizations) x = (x - mean[c]) / std[c];
      plan->lut_f32.push_back(x);
      plan->lut_f16.push_back(float_to_half(x));
    }
  }
  use_single_threaded_opencv();
  plan_ = std::move(plan);
}

ImagePipeline::~ImagePipeline() = default;

SampleSpec ImagePipeline::output_spec() const {
  const Plan& plan = *plan_;
  const int64_t c = plan.output.channels, h = plan.size.height, w = plan.size.width;
  SampleSpec spec;
  spec.shape = plan.output.layout == Layout::kCHW ? std::vector<int64_t>{c, h, w} : std::vector<int64_t>{h, w, c};
  spec.dtype = plan.output.dtype;
  return spec;
}

void ImagePipeline::apply(std::span<const uint8_t> input, SampleRng& rng, void* out) const {
  run(input, rng, out, nullptr);
}

bool ImagePipeline::apply_tracked(std::span<const uint8_t> input, SampleRng& rng, void* out,
                                  SampleGeometry& geometry) const {
  run(input, rng, out, &geometry);
  return true;
}

void ImagePipeline::run(std::span<const uint8_t> input, SampleRng& rng, void* out, SampleGeometry* geometry) const {
  const Plan& plan = *plan_;
  // Per-thread buffers: no allocation per sample once warm. Very large ones
  // are released afterwards so one huge image does not pin memory.
  thread_local detail::Scratch scratch;
  struct Trim {
    ~Trim() {
      constexpr size_t kKeep = size_t{64} << 20;
      for (auto* b : {&scratch.decoded, &scratch.converted, &scratch.oriented, &scratch.prefiltered, &scratch.resized,
                      &scratch.padded})
        if (b->capacity() > kKeep) std::vector<uint8_t>().swap(*b);
    }
  } trim;

  auto decoder = detail::open_image_decoder(input, plan.max_pixels);
  const ImageInfo& info = decoder->info();
  const Placement p = plan.place(info.height, info.width, rng);
  const int out_h = plan.size.height, out_w = plan.size.width, channels = plan.output.channels;
  if (geometry != nullptr) *geometry = {p.x0, p.y0, p.sx, p.sy, p.flip, out_h, out_w};

  // The source box (fractional after a resize), clipped to the image (a
  // CenterCrop larger than the image pads with zeros), and the output
  // rectangle it covers.
  BoxF box{std::max(p.x0, 0.0), std::max(p.y0, 0.0), std::min(p.x0 + p.sx * out_w, static_cast<double>(info.width)),
           std::min(p.y0 + p.sy * out_h, static_cast<double>(info.height))};
  const int dx0 = std::clamp(static_cast<int>(std::lround((box.x0 - p.x0) / p.sx)), 0, out_w);
  const int dx1 = std::clamp(static_cast<int>(std::lround((box.x1 - p.x0) / p.sx)), 0, out_w);
  const int dy0 = std::clamp(static_cast<int>(std::lround((box.y0 - p.y0) / p.sy)), 0, out_h);
  const int dy1 = std::clamp(static_cast<int>(std::lround((box.y1 - p.y0) / p.sy)), 0, out_h);
  const int rect_w = dx1 - dx0, rect_h = dy1 - dy0;
  const bool covered = rect_w > 0 && rect_h > 0 && box.x1 > box.x0 && box.y1 > box.y0;

  ImageView image;
  if (covered) {
    // The decoded region: the box itself when its edges are whole pixels (a
    // crop: PIL crops, then resizes), else the box grown by the resize
    // kernel's reach, so the samples near its edges see their real neighbours.
    auto whole = [](double v) { return std::abs(v - std::round(v)) < 1e-6; };
    const bool exact = whole(box.x0) && whole(box.x1) && whole(box.y0) && whole(box.y1);
    const int mx = exact ? 0 : static_cast<int>(std::ceil(std::max(p.sx, 1.0))) + 1;
    const int my = exact ? 0 : static_cast<int>(std::ceil(std::max(p.sy, 1.0))) + 1;
    const int rx0 = std::max(static_cast<int>(std::floor(box.x0 + 1e-6)) - mx, 0);
    const int rx1 = std::min(static_cast<int>(std::ceil(box.x1 - 1e-6)) + mx, info.width);
    const int ry0 = std::max(static_cast<int>(std::floor(box.y0 + 1e-6)) - my, 0);
    const int ry1 = std::min(static_cast<int>(std::ceil(box.y1 - 1e-6)) + my, info.height);
    detail::DecodeRequest request;
    request.channels = channels;
    request.region = plan.options.crop_decode ? detail::Region{rx0, ry0, rx1 - rx0, ry1 - ry0}
                                              : detail::Region{0, 0, info.width, info.height};
    if (plan.options.dct_scale) {
      // The region may be decoded downscaled as long as the box stays
      // dct_margin times larger than its output rectangle.
      const double margin = std::max(1.0, plan.options.dct_margin);
      request.min_width = static_cast<int>(std::ceil(margin * rect_w * request.region.width / (box.x1 - box.x0)));
      request.min_height = static_cast<int>(std::ceil(margin * rect_h * request.region.height / (box.y1 - box.y0)));
    }
    const detail::Decoded region = decoder->decode(request, scratch);
    const ImageView& decoded = region.view;
    // The box in the decoded view's pixels (which may be downscaled).
    const double k = 1.0 / region.scale;
    BoxF in_decoded{(box.x0 - region.x) * k, (box.y0 - region.y) * k, (box.x1 - region.x) * k, (box.y1 - region.y) * k};
    ImageView source = decoded;
    if (exact) {
      // A crop: the resize must not see pixels beyond it, whether or not the
      // decoder returned more (full decode) -- PIL crops, then resizes.
      const int cx0 = std::clamp(static_cast<int>(std::floor(in_decoded.x0 + 1e-6)), 0, decoded.width - 1);
      const int cy0 = std::clamp(static_cast<int>(std::floor(in_decoded.y0 + 1e-6)), 0, decoded.height - 1);
      const int cx1 = std::clamp(static_cast<int>(std::ceil(in_decoded.x1 - 1e-6)), cx0 + 1, decoded.width);
      const int cy1 = std::clamp(static_cast<int>(std::ceil(in_decoded.y1 - 1e-6)), cy0 + 1, decoded.height);
      source = detail::crop_view(decoded, {cx0, cy0, cx1 - cx0, cy1 - cy0});
      in_decoded = {in_decoded.x0 - cx0, in_decoded.y0 - cy0, in_decoded.x1 - cx0, in_decoded.y1 - cy0};
    }
    const bool plain_crop = whole(in_decoded.x0) && whole(in_decoded.y0) &&
                            std::abs(in_decoded.x1 - in_decoded.x0 - rect_w) < 1e-6 &&
                            std::abs(in_decoded.y1 - in_decoded.y0 - rect_h) < 1e-6;
    if (plain_crop) {
      image = detail::crop_view(source, {static_cast<int>(std::lround(in_decoded.x0)),
                                         static_cast<int>(std::lround(in_decoded.y0)), rect_w, rect_h});
    } else {
      std::vector<uint8_t>& dst = scratch.resized;
      dst.resize(static_cast<size_t>(rect_w) * rect_h * channels);
      resize_image(source, in_decoded, dst.data(), rect_h, rect_w, static_cast<ptrdiff_t>(rect_w) * channels,
                   plan.antialias, scratch.prefiltered);
      image = {dst.data(), rect_h, rect_w, channels, static_cast<ptrdiff_t>(rect_w) * channels};
    }
  }
  if (!covered || rect_w != out_w || rect_h != out_h) {
    // Padding: zeros around the covered rectangle, as torchvision's CenterCrop.
    const size_t row_bytes = static_cast<size_t>(out_w) * channels;
    std::vector<uint8_t>& canvas = scratch.padded;
    canvas.assign(row_bytes * out_h, 0);
    if (covered) {
      for (int y = 0; y < rect_h; ++y) {
        std::memcpy(canvas.data() + (dy0 + y) * row_bytes + static_cast<size_t>(dx0) * channels, image.row(y),
                    static_cast<size_t>(rect_w) * channels);
      }
    }
    image = {canvas.data(), out_h, out_w, channels, static_cast<ptrdiff_t>(row_bytes)};
  }

  switch (plan.output.dtype) {
    case DType::kUInt8:
      write_output<uint8_t>(image, p.flip, plan.output.layout, plan.lut_u8.data(), out);
      break;
    case DType::kFloat16:
      write_output<uint16_t>(image, p.flip, plan.output.layout, plan.lut_f16.data(), out);
      break;
    case DType::kFloat32:
      write_output<float>(image, p.flip, plan.output.layout, plan.lut_f32.data(), out);
      break;
    case DType::kInt64:
      break;
  }
}

}  // namespace conveyor
