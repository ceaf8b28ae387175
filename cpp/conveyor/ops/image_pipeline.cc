#include "conveyor/ops/image_pipeline.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "conveyor/core/checked_size.h"
#include "conveyor/core/error.h"
#include "conveyor/ops/image_decoder.h"
#include "conveyor/ops/raw_decoder.h"
#include "conveyor/ops/resize.h"

namespace conveyor {

namespace {

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

// The per-sample plan: where the output comes from and what to decode.
struct SamplePlan {
  Placement placement;
  BoxF box;                    // The source box, clipped to the image.
  int dx0 = 0, dy0 = 0;        // Where the covered output rectangle starts ...
  int rect_w = 0, rect_h = 0;  // ... and its size (smaller than the output when padding).
  bool covered = false;        // Whether any output pixel comes from the image.
  bool exact = false;          // Whether the box's edges are whole pixels (a crop).
  detail::DecodeRequest request;
};

}  // namespace

struct ImagePipeline::Plan {
  std::vector<std::unique_ptr<const TransformStep>> geometry;  // Geometric and mirror steps, in order.
  ImageOutputSpec output;
  ImagePipelineOptions options;
  int64_t max_pixels = kDefaultMaxPixels;
  Size2D size;            // Fixed output size.
  bool antialias = true;  // False if any resizing step asked for no antialiasing.
  std::vector<uint8_t> lut_u8;
  std::vector<uint16_t> lut_f16;
  std::vector<float> lut_f32;

  // Runs the geometric steps symbolically on an image of `info`'s size: every
  // crop and resize composes into one affine map from output to source, so
  // the whole chain becomes one source box and one resize. Flips are deferred
  // to the output pass; a crop after a flip is mirrored instead. Then derives
  // the decode request for that box.
  SamplePlan plan_sample(const ImageInfo& info, SampleRng& rng) const {
    SamplePlan s;
    Placement& p = s.placement;
    p.height = info.height;
    p.width = info.width;
    for (const auto& step : geometry) step->place(p, rng);
    const int out_h = size.height, out_w = size.width;

    // The source box (fractional after a resize), clipped to the image (a
    // CenterCrop larger than the image pads with zeros), and the output
    // rectangle it covers.
    s.box = {std::max(p.x0, 0.0), std::max(p.y0, 0.0), std::min(p.x0 + p.sx * out_w, static_cast<double>(info.width)),
             std::min(p.y0 + p.sy * out_h, static_cast<double>(info.height))};
    const BoxF& box = s.box;
    s.dx0 = std::clamp(static_cast<int>(std::lround((box.x0 - p.x0) / p.sx)), 0, out_w);
    const int dx1 = std::clamp(static_cast<int>(std::lround((box.x1 - p.x0) / p.sx)), 0, out_w);
    s.dy0 = std::clamp(static_cast<int>(std::lround((box.y0 - p.y0) / p.sy)), 0, out_h);
    const int dy1 = std::clamp(static_cast<int>(std::lround((box.y1 - p.y0) / p.sy)), 0, out_h);
    s.rect_w = dx1 - s.dx0;
    s.rect_h = dy1 - s.dy0;
    s.covered = s.rect_w > 0 && s.rect_h > 0 && box.x1 > box.x0 && box.y1 > box.y0;
    if (!s.covered) return s;

    // The decoded region: the box itself when its edges are whole pixels (a
    // crop: PIL crops, then resizes), else the box grown by the resize
    // kernel's reach, so the samples near its edges see their real neighbours.
    s.exact = whole(box.x0) && whole(box.x1) && whole(box.y0) && whole(box.y1);
    const int mx = s.exact ? 0 : static_cast<int>(std::ceil(std::max(p.sx, 1.0))) + 1;
    const int my = s.exact ? 0 : static_cast<int>(std::ceil(std::max(p.sy, 1.0))) + 1;
    const int rx0 = std::max(static_cast<int>(std::floor(box.x0 + 1e-6)) - mx, 0);
    const int rx1 = std::min(static_cast<int>(std::ceil(box.x1 - 1e-6)) + mx, info.width);
    const int ry0 = std::max(static_cast<int>(std::floor(box.y0 + 1e-6)) - my, 0);
    const int ry1 = std::min(static_cast<int>(std::ceil(box.y1 - 1e-6)) + my, info.height);
    detail::DecodeRequest& request = s.request;
    request.channels = output.channels;
    request.region = options.crop_decode ? detail::Region{rx0, ry0, rx1 - rx0, ry1 - ry0}
                                         : detail::Region{0, 0, info.width, info.height};
    if (options.dct_scale) {
      // The region may be decoded downscaled as long as the box stays
      // dct_margin times larger than its output rectangle.
      // Capped at the region's size (no scaling is possible from there on):
      // a huge margin or output must not overflow the int.
      const double margin = std::max(1.0, options.dct_margin);
      const auto at_most = [](double v, int cap) {
        return static_cast<int>(std::min(std::ceil(v), static_cast<double>(cap)));
      };
      request.min_width = at_most(margin * s.rect_w * request.region.width / (box.x1 - box.x0), request.region.width);
      request.min_height =
          at_most(margin * s.rect_h * request.region.height / (box.y1 - box.y0), request.region.height);
    }
    return s;
  }

  // Decodes the planned region and resamples it to the output size (padding
  // with zeros where the box leaves the image): the image the output pass
  // reads, in `scratch` or in the decoder's buffers.
  ImageView render(detail::ImageDecoder& decoder, const SamplePlan& s, detail::Scratch& scratch) const {
    const int out_h = size.height, out_w = size.width, channels = output.channels;
    ImageView image;
    if (s.covered) {
      const detail::Decoded region = decoder.decode(s.request, scratch);
      const ImageView& decoded = region.view;
      // The box in the decoded view's pixels (which may be downscaled).
      const double k = 1.0 / region.scale;
      BoxF in_decoded{(s.box.x0 - region.x) * k, (s.box.y0 - region.y) * k, (s.box.x1 - region.x) * k,
                      (s.box.y1 - region.y) * k};
      ImageView source = decoded;
      if (s.exact) {
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
                              std::abs(in_decoded.x1 - in_decoded.x0 - s.rect_w) < 1e-6 &&
                              std::abs(in_decoded.y1 - in_decoded.y0 - s.rect_h) < 1e-6;
      if (plain_crop) {
        image = detail::crop_view(source, {static_cast<int>(std::lround(in_decoded.x0)),
                                           static_cast<int>(std::lround(in_decoded.y0)), s.rect_w, s.rect_h});
      } else {
        // Bounded by the output size, whose byte count the constructor checked.
        std::vector<uint8_t>& dst = scratch.resized;
        dst.resize(static_cast<size_t>(s.rect_w) * s.rect_h * channels);
        resize_image(source, in_decoded, dst.data(), s.rect_h, s.rect_w, static_cast<ptrdiff_t>(s.rect_w) * channels,
                     antialias, scratch.prefiltered);
        image = {dst.data(), s.rect_h, s.rect_w, channels, static_cast<ptrdiff_t>(s.rect_w) * channels};
      }
    }
    if (!s.covered || s.rect_w != out_w || s.rect_h != out_h) {
      // Padding: zeros around the covered rectangle, as torchvision's CenterCrop.
      const size_t row_bytes = static_cast<size_t>(out_w) * channels;
      std::vector<uint8_t>& canvas = scratch.padded;
      canvas.assign(row_bytes * out_h, 0);
      if (s.covered) {
        for (int y = 0; y < s.rect_h; ++y) {
          std::memcpy(canvas.data() + (s.dy0 + y) * row_bytes + static_cast<size_t>(s.dx0) * channels, image.row(y),
                      static_cast<size_t>(s.rect_w) * channels);
        }
      }
      image = {canvas.data(), out_h, out_w, channels, static_cast<ptrdiff_t>(row_bytes)};
    }
    return image;
  }

  // The output pass: flip, pointwise steps (tables), dtype and layout, written
  // into the batch slot `out`.
  void write(const ImageView& image, bool flip, void* out) const {
    switch (output.dtype) {
      case DType::kUInt8:
        write_output<uint8_t>(image, flip, output.layout, lut_u8.data(), out);
        break;
      case DType::kFloat16:
        write_output<uint16_t>(image, flip, output.layout, lut_f16.data(), out);
        break;
      case DType::kFloat32:
        write_output<float>(image, flip, output.layout, lut_f32.data(), out);
        break;
      case DType::kInt64:
        break;
    }
  }

  static bool whole(double v) { return std::abs(v - std::round(v)) < 1e-6; }
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

  std::optional<Size2D> input_size;
  if (options.raw_input) {
    detail::check_raw_shape(*options.raw_input);
    input_size = Size2D{options.raw_input->height, options.raw_input->width};
  }
  ChainPlan chain{channels, output.dtype, input_size, true};
  std::vector<std::unique_ptr<const TransformStep>> pointwise;
  for (size_t i = 0; i < transforms.size(); ++i) {
    const std::string where = "transform " + std::to_string(i) + " ";
    try {
      std::unique_ptr<const TransformStep> step = make_transform_step(transforms[i]);
      const StepKind kind = step->kind();
      check_config(
          kind != StepKind::kGeometric || pointwise.empty(),
          transforms[i].name + " (a resize or crop) comes after Normalize: put Normalize after every resize and crop");
      step->plan(chain);
      (kind == StepKind::kPointwise ? pointwise : plan->geometry).push_back(std::move(step));
    } catch (const Error& e) {
      if (e.kind() != ErrorKind::kConfig) throw;
      throw Error(ErrorKind::kConfig, where + e.cause());
    }
  }
  check_config(chain.size.has_value(),
               "ImagePipeline: the transforms do not give a fixed output size, so images of different sizes "
               "cannot be batched; end the resizes and crops with a crop or a resize to (h, w)");
  plan->size = *chain.size;
  plan->antialias = chain.antialias;
  // Every later product of the output's dimensions is bounded by this one.
  checked_mul(checked_mul(checked_mul(plan->size.height, plan->size.width, "ImagePipeline: the output size"), channels,
                          "ImagePipeline: the output size"),
              static_cast<int64_t>(dtype_size(output.dtype)), "ImagePipeline: the output size in bytes");

  for (int c = 0; c < channels; ++c) {
    for (int v = 0; v < 256; ++v) {
      plan->lut_u8.push_back(static_cast<uint8_t>(v));
      float x = static_cast<float>(v) / 255.0f;
      for (const auto& step : pointwise) x = step->map_value(c, x);
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

  auto decoder = plan.options.raw_input ? detail::open_raw(input, *plan.options.raw_input, plan.max_pixels)
                                        : detail::open_image_decoder(input, plan.max_pixels);
  const SamplePlan sample = plan.plan_sample(decoder->info(), rng);
  const Placement& p = sample.placement;
  if (geometry != nullptr) *geometry = {p.x0, p.y0, p.sx, p.sy, p.flip, plan.size.height, plan.size.width};
  plan.write(plan.render(*decoder, sample, scratch), p.flip, out);
}

}  // namespace conveyor
