#include "conveyor/ops/image_pipeline.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <optional>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "conveyor/core/checked_size.h"
#include "conveyor/core/error.h"
#include "conveyor/core/float16.h"
#include "conveyor/ops/float_output.h"
#include "conveyor/ops/image_decoder.h"
#include "conveyor/ops/raw_decoder.h"
#include "conveyor/ops/resize.h"
#include "conveyor/ops/transforms/warp.h"
#if defined(__GNUC__) && defined(__x86_64__)
#include <immintrin.h>
#endif

namespace conveyor {

namespace {

// The single pass after the resize: flip, dtype conversion, normalization and
// layout, through a per-channel lookup table (256 entries: the input is uint8),
// so every value is exactly torchvision's (x / 255 - mean) / std in float32.
template <typename T, int C>
void write_output(const ImageView& img, bool flip, Layout layout, const T* lut, T* out, bool identity) {
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
      } else if (std::is_same_v<T, uint8_t> && identity) {
        std::memcpy(o, s, static_cast<size_t>(w) * C);  // The identity table (uint8 only).
      } else {
        for (int x = 0; x < w * C; x += C)
          for (int c = 0; c < C; ++c) o[x + c] = lut[c * 256 + s[x + c]];
      }
    }
  }
}

template <typename T>
void write_output(const ImageView& img, bool flip, Layout layout, const T* lut, void* out, bool stream,
                  bool identity = false) {
  if constexpr (std::is_same_v<T, float>) {
    if (layout == Layout::kCHW) {
      write_chw_float(img, flip, lut, static_cast<float*>(out), stream);
      return;
    }
  }
  (void)stream;
  if (img.channels == 3) {
    write_output<T, 3>(img, flip, layout, lut, static_cast<T*>(out), identity);
  } else {
    write_output<T, 1>(img, flip, layout, lut, static_cast<T*>(out), identity);
  }
}

// The output's tables after `pending` (or the output's own without): value
// v of channel c becomes lut[c * 256 + pending[c][v]]. Per thread, so no
// allocation once warm.
template <typename T>
const T* composed(const std::vector<T>& lut, const ChannelTables* pending) {
  if (pending == nullptr) return lut.data();
  thread_local std::vector<T> tables;
  tables.resize(lut.size());
  for (size_t i = 0; i < lut.size(); ++i) tables[i] = lut[(i & ~size_t{255}) + (*pending)[i >> 8][i & 255]];
  return tables.data();
}

// One axis-aligned group's placement for one sample: where its output comes
// from in the image it resamples.
struct SamplePlan {
  Placement placement;
  Size2D out;                  // The group's output size.
  BoxF box;                    // The source box, clipped to the image.
  int dx0 = 0, dy0 = 0;        // Where the covered output rectangle starts ...
  int rect_w = 0, rect_h = 0;  // ... and its size (smaller than the output when padding).
  bool covered = false;        // Whether any output pixel comes from the image.
  BoxF bound;                  // The source pixels the resample may read (Placement::bound, or the image).
};

// Geometric and mirror steps resampled together: their placements compose
// into one source box and one resample (the leading group's is fused into
// the decode).
struct Group {
  const ImageStep* image = nullptr;            // The kImage step run before the group's resample, if any.
  std::vector<const PlacementStep*> steps;     // Geometric and mirror steps, in order.
  std::optional<Fill> fill;                    // What the padding shows, once a step declared it.
  bool antialias = true;                       // False if a resizing step of the group asked for no antialiasing.
  std::optional<Interpolation> interpolation;  // The group's resizing steps' interpolation (bilinear if none).
};

bool whole(double v) { return std::abs(v - std::round(v)) < 1e-6; }

// Copies `view` into `dst` (packed rows), mirrored left-right if `flip`.
#if defined(__GNUC__) && defined(__x86_64__)
// One RGB row mirrored, five pixels per step (SSSE3 byte shuffle): source
// pixels x .. x + 4 become destination pixels w - 5 - x .. w - 1 - x, stored
// as 16 bytes that start one byte early; that byte belongs to a destination
// pixel written by a later step. Returns the first source pixel it did not move.
__attribute__((target("ssse3"))) int mirror_row3_ssse3(const uint8_t* s, uint8_t* d, int w) {
  const __m128i reverse = _mm_setr_epi8(-1, 12, 13, 14, 9, 10, 11, 6, 7, 8, 3, 4, 5, 0, 1, 2);
  int x = 0;
  // Reads bytes 3x .. 3x + 15 and writes 3(w - x - 5) - 1 .. 3(w - x) - 1: both inside the row while x + 6 <= w.
  for (; x + 6 <= w; x += 5) {
    const __m128i v = _mm_loadu_si128(reinterpret_cast<const __m128i*>(s + 3 * static_cast<size_t>(x)));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(d + 3 * static_cast<size_t>(w - x - 5) - 1),
                     _mm_shuffle_epi8(v, reverse));
  }
  return x;
}
#endif

void materialize(const ImageView& view, bool flip, Image& dst) {
  const int w = view.width, c = view.channels;
  const size_t row_bytes = static_cast<size_t>(w) * c;
  dst.height = view.height;
  dst.width = w;
  dst.channels = c;
  dst.pixels.resize(row_bytes * view.height);
  for (int y = 0; y < view.height; ++y) {
    const uint8_t* s = view.row(y);
    uint8_t* d = dst.pixels.data() + y * row_bytes;
    if (!flip) {
      std::memcpy(d, s, row_bytes);
    } else if (c == 3) {
      int x = 0;
#if defined(__GNUC__) && defined(__x86_64__)
      static const bool ssse3 = __builtin_cpu_supports("ssse3");
      if (ssse3) x = mirror_row3_ssse3(s, d, w);
#endif
      // Byte moves of a known count: a memcpy call per pixel costs more than the copy.
      for (; x < w; ++x) {
        uint8_t* p = d + static_cast<size_t>(w - 1 - x) * 3;
        const uint8_t* q = s + static_cast<size_t>(x) * 3;
        p[0] = q[0];
        p[1] = q[1];
        p[2] = q[2];
      }
    } else {
      for (int x = 0; x < w; ++x)
        std::memcpy(d + static_cast<size_t>(w - 1 - x) * c, s + static_cast<size_t>(x) * c, c);
    }
  }
}

// Boxes follow one group's placement (a flip included: deferred or
// materialized, the output is mirrored either way).
void move_boxes(std::vector<BoundingBox>* boxes, const SamplePlan& s) {
  if (boxes == nullptr) return;
  const Placement& p = s.placement;
  *boxes = transform_boxes(*boxes, {p.x0, p.y0, p.sx, p.sy, p.flip, s.out.height, s.out.width, p.vflip});
}

// A vertical flip costs nothing: the view's rows in reverse order.
ImageView flipped_vertically(const ImageView& view, bool vflip) {
  if (!vflip || view.height == 0) return view;
  return {view.row(view.height - 1), view.height, view.width, view.channels, -view.stride};
}

}  // namespace

struct ImagePipeline::Plan {
  std::vector<std::unique_ptr<const TransformStep>> steps;  // Every step, in order (owns them).
  std::vector<Group> groups;                                // groups[0] is fused into the decode.
  ImageOutputSpec output;
  ImagePipelineOptions options;
  int64_t max_pixels = kDefaultMaxPixels;
  Size2D size;            // Fixed output size.
  bool variable = false;  // No fixed size: each sample's is its own (apply_variable).

  // The spec of an output of `h` x `w` pixels; -1 for both when variable and unknown.
  SampleSpec spec(int64_t h, int64_t w) const {
    const int64_t c = output.channels;
    SampleSpec s;
    s.shape = output.layout == Layout::kCHW ? std::vector<int64_t>{c, h, w} : std::vector<int64_t>{h, w, c};
    s.dtype = output.dtype;
    return s;
  }
  std::vector<uint8_t> lut_u8;
  std::vector<uint16_t> lut_f16;
  std::vector<uint16_t> lut_bf16;
  std::vector<float> lut_f32;
  // lut_f32 as vector arithmetic (float32 CHW output whose pointwise steps
  // are at most one Normalize), used when no per-sample tables come first.
  std::optional<NormalizeArithmetic> normalize_f32;
  std::vector<const OutputStep*> output_steps;  // kOutput steps, in order (after the tables).
  std::string device_unsupported;               // Why a device cannot run the chain ("" if it can).

  // Runs a group's steps symbolically on an image of `height` x `width`:
  // every crop and resize composes into one affine map from output to
  // source, so the group becomes one source box and one resize. Flips are
  // one bit (a crop after a flip is mirrored instead). The group's output is
  // `out`, or (when empty) the size its steps give, which must be at most
  // max_pixels (an intermediate image: Error{kTooLarge} otherwise).
  SamplePlan place(const Group& group, int height, int width, std::optional<Size2D> out, SampleRng& rng) const {
    SamplePlan s;
    Placement& p = s.placement;
    p.height = height;
    p.width = width;
    for (const PlacementStep* step : group.steps) step->place(p, rng);
    if (out) {
      s.out = *out;
    } else {
      // Clamped before the conversion: a chain of resizes may give any size.
      const auto side = [](double v) { return static_cast<int64_t>(std::clamp(std::round(v), -1.0, 9e18)); };
      const int64_t h = side(p.height), w = side(p.width);
      check_image_size(h, w, max_pixels, "the resizes and crops");
      s.out = {static_cast<int>(h), static_cast<int>(w)};
    }
    const int out_h = s.out.height, out_w = s.out.width;

    // The source pixels the resample may read: the crop made before the
    // resizes, or the whole image.
    s.bound = {0, 0, static_cast<double>(width), static_cast<double>(height)};
    if (p.bound) {
      s.bound = {std::max(p.bound->x0, 0.0), std::max(p.bound->y0, 0.0), std::min(p.bound->x1, s.bound.x1),
                 std::min(p.bound->y1, s.bound.y1)};
    }
    // The source box (fractional after a resize), clipped to those pixels (a
    // crop reaching outside them pads), and the output rectangle it covers.
    s.box = {std::max(p.x0, s.bound.x0), std::max(p.y0, s.bound.y0), std::min(p.x0 + p.sx * out_w, s.bound.x1),
             std::min(p.y0 + p.sy * out_h, s.bound.y1)};
    const BoxF& box = s.box;
    s.dx0 = std::clamp(static_cast<int>(std::lround((box.x0 - p.x0) / p.sx)), 0, out_w);
    const int dx1 = std::clamp(static_cast<int>(std::lround((box.x1 - p.x0) / p.sx)), 0, out_w);
    s.dy0 = std::clamp(static_cast<int>(std::lround((box.y0 - p.y0) / p.sy)), 0, out_h);
    const int dy1 = std::clamp(static_cast<int>(std::lround((box.y1 - p.y0) / p.sy)), 0, out_h);
    s.rect_w = dx1 - s.dx0;
    s.rect_h = dy1 - s.dy0;
    s.covered = s.rect_w > 0 && s.rect_h > 0 && box.x1 > box.x0 && box.y1 > box.y0;
    return s;
  }

  // Whether the group reproduces torch's arithmetic exactly (bicubic,
  // nearest), which places each output from the origin of the pixels it
  // resizes: it reads all of them, decoded at full scale.
  static bool torch_exact(const Group& group) {
    return group.interpolation == Interpolation::kBicubic || group.interpolation == Interpolation::kNearest ||
           group.interpolation == Interpolation::kNearestExact;
  }

  // The leading group's decode request: the region of the source box, and
  // how far it may be DCT-downscaled.
  // The part of a width x height image a covered group reads: the box grown
  // by the resize kernel's reach, so the samples near its edges see their
  // real neighbours, within the bound (a crop made before the resizes: PIL
  // and torchvision crop, then resize; the box itself for a crop resized);
  // all of the bound for a torch-exact group.
  static detail::Region region_of(const SamplePlan& s, const Group& group, int width, int height) {
    const Placement& p = s.placement;
    const BoxF& box = s.box;
    const int bx0 = std::clamp(static_cast<int>(std::floor(s.bound.x0 + 1e-6)), 0, width);
    const int bx1 = std::clamp(static_cast<int>(std::ceil(s.bound.x1 - 1e-6)), bx0, width);
    const int by0 = std::clamp(static_cast<int>(std::floor(s.bound.y0 + 1e-6)), 0, height);
    const int by1 = std::clamp(static_cast<int>(std::ceil(s.bound.y1 - 1e-6)), by0, height);
    if (torch_exact(group)) return {bx0, by0, bx1 - bx0, by1 - by0};
    // The tent reaches 1 source pixel per output pixel's scale.
    const int mx = static_cast<int>(std::ceil(std::max(p.sx, 1.0))) + 1;
    const int my = static_cast<int>(std::ceil(std::max(p.sy, 1.0))) + 1;
    const int rx0 = std::max({static_cast<int>(std::floor(box.x0 + 1e-6)) - mx, bx0, 0});
    const int rx1 = std::min({static_cast<int>(std::ceil(box.x1 - 1e-6)) + mx, bx1, width});
    const int ry0 = std::max({static_cast<int>(std::floor(box.y0 + 1e-6)) - my, by0, 0});
    const int ry1 = std::min({static_cast<int>(std::ceil(box.y1 - 1e-6)) + my, by1, height});
    return {rx0, ry0, rx1 - rx0, ry1 - ry0};
  }

  detail::DecodeRequest decode_request(const SamplePlan& s, const Group& group, const ImageInfo& info) const {
    const BoxF& box = s.box;
    detail::DecodeRequest request;
    request.channels = output.channels;
    request.region = options.crop_decode ? region_of(s, group, info.width, info.height)
                                         : detail::Region{0, 0, info.width, info.height};
    // A DCT-scaled decode has other pixels than the ones torch resizes.
    if (options.dct_scale && !torch_exact(group)) {
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
    return request;
  }

  // Resamples the box of `s` to the group's output size (padding with the
  // group's fill where the box leaves the image). `decoded` holds the image's
  // pixels from (x, y) on, `scale` image pixels per pixel (a DCT-scaled,
  // crop-window decode; (0, 0, 1) for a whole image). The result is in
  // `scratch`, or a view of `decoded` (a plain crop).
  ImageView resample(const ImageView& decoded, double x, double y, double scale, const SamplePlan& s,
                     const Group& group, detail::Scratch& scratch) const {
    const int out_h = s.out.height, out_w = s.out.width, channels = output.channels;
    ImageView image;
    if (s.covered) {
      // The box in the decoded view's pixels (which may be downscaled).
      const double k = 1.0 / scale;
      BoxF in_decoded{(s.box.x0 - x) * k, (s.box.y0 - y) * k, (s.box.x1 - x) * k, (s.box.y1 - y) * k};
      ImageView source = decoded;
      // What the resizes may read (a crop made before them: not the pixels
      // beyond it, whether or not the decoder returned more -- PIL and
      // torchvision crop, then resize).
      const BoxF b{(s.bound.x0 - x) * k, (s.bound.y0 - y) * k, (s.bound.x1 - x) * k, (s.bound.y1 - y) * k};
      const int cx0 = std::clamp(static_cast<int>(std::floor(b.x0 + 1e-6)), 0, decoded.width - 1);
      const int cy0 = std::clamp(static_cast<int>(std::floor(b.y0 + 1e-6)), 0, decoded.height - 1);
      const int cx1 = std::clamp(static_cast<int>(std::ceil(b.x1 - 1e-6)), cx0 + 1, decoded.width);
      const int cy1 = std::clamp(static_cast<int>(std::ceil(b.y1 - 1e-6)), cy0 + 1, decoded.height);
      source = detail::crop_view(decoded, {cx0, cy0, cx1 - cx0, cy1 - cy0});
      in_decoded = {in_decoded.x0 - cx0, in_decoded.y0 - cy0, in_decoded.x1 - cx0, in_decoded.y1 - cy0};
      const bool plain_crop = whole(in_decoded.x0) && whole(in_decoded.y0) &&
                              std::abs(in_decoded.x1 - in_decoded.x0 - s.rect_w) < 1e-6 &&
                              std::abs(in_decoded.y1 - in_decoded.y0 - s.rect_h) < 1e-6;
      if (plain_crop) {
        image = detail::crop_view(source, {static_cast<int>(std::lround(in_decoded.x0)),
                                           static_cast<int>(std::lround(in_decoded.y0)), s.rect_w, s.rect_h});
      } else {
        // Bounded by the output size (checked by the constructor) or by
        // max_pixels (an intermediate image).
        uint8_t* dst = detail::grow_to(scratch.resized, static_cast<size_t>(s.rect_w) * s.rect_h * channels);
        resize_image(source, in_decoded, dst, s.rect_h, s.rect_w, static_cast<ptrdiff_t>(s.rect_w) * channels,
                     {group.interpolation.value_or(Interpolation::kBilinear), group.antialias}, scratch.prefiltered);
        image = {dst, s.rect_h, s.rect_w, channels, static_cast<ptrdiff_t>(s.rect_w) * channels};
      }
    }
    if (!s.covered || s.rect_w != out_w || s.rect_h != out_h) {
      // Padding: the group's fill around the covered rectangle (zeros for
      // torchvision's CenterCrop, the fill of a constant Pad).
      const size_t row_bytes = static_cast<size_t>(out_w) * channels;
      std::vector<uint8_t>& canvas = scratch.padded;
      canvas.resize(row_bytes * out_h);
      const Fill fill = group.fill.value_or(Fill{});
      if (channels == 1 || (fill[0] == fill[1] && fill[1] == fill[2])) {
        std::memset(canvas.data(), fill[0], canvas.size());
      } else {
        for (size_t i = 0; i < canvas.size(); i += 3) std::memcpy(canvas.data() + i, fill.data(), 3);
      }
      if (s.covered) {
        for (int row = 0; row < s.rect_h; ++row) {
          std::memcpy(canvas.data() + (s.dy0 + row) * row_bytes + static_cast<size_t>(s.dx0) * channels, image.row(row),
                      static_cast<size_t>(s.rect_w) * channels);
        }
      }
      image = {canvas.data(), out_h, out_w, channels, static_cast<ptrdiff_t>(row_bytes)};
    }
    return image;
  }

  // The output pass: flip, pointwise steps (tables), dtype and layout, written
  // into the batch slot `out`; then the steps on the written output.
  // `pending`: tables the image's values still go through first (a last
  // image step's pointwise result), composed with the output's.
  void write(const ImageView& image, bool flip, void* out, SampleRng& rng,
             const ChannelTables* pending = nullptr) const {
    switch (output.dtype) {
      case DType::kUInt8:
        // lut_u8 is the identity: without pending tables, rows are copied.
        write_output<uint8_t>(image, flip, output.layout, composed(lut_u8, pending), out, options.stream_output,
                              pending == nullptr);
        break;
      case DType::kFloat16:
        write_output<uint16_t>(image, flip, output.layout, composed(lut_f16, pending), out, options.stream_output);
        break;
      case DType::kBFloat16:
        write_output<uint16_t>(image, flip, output.layout, composed(lut_bf16, pending), out, options.stream_output);
        break;
      case DType::kFloat32:
        if (normalize_f32 && pending == nullptr) {
          normalize_f32->write_chw(image, flip, static_cast<float*>(out), options.stream_output);
        } else {
          write_output<float>(image, flip, output.layout, composed(lut_f32, pending), out, options.stream_output);
        }
        break;
      case DType::kInt64:
        break;
    }
    OutputSample sample{out, output.dtype, output.layout == Layout::kCHW, output.channels, image.height, image.width};
    for (const OutputStep* step : output_steps) step->apply_output(sample, rng);
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
  check_config(is_image_dtype(output.dtype), "ImagePipeline: dtype must be uint8, float16, float32 or bfloat16, got " +
                                                 std::string(dtype_name(output.dtype)));
  check_config(max_pixels > 0, "ImagePipeline: max_pixels must be positive");

  // The chain splits into groups: the leading geometric and mirror steps
  // (fused into the decode), then at each kImage step a new group (the image
  // step, then the geometric and mirror steps after it, which resample its
  // output). A padding step with another fill than its group's starts a new
  // group too. Pointwise steps go to the output pass.
  std::optional<Size2D> input_size;  // Known for raw pixels; from each image's header otherwise.
  if (options.raw_input) {
    detail::check_raw_shape(*options.raw_input);
    input_size = Size2D{options.raw_input->height, options.raw_input->width};
  }
  ChainPlan chain{channels, output.dtype, input_size};
  std::vector<const PointwiseStep*> pointwise;
  plan->groups.emplace_back();
  for (size_t i = 0; i < transforms.size(); ++i) {
    const std::string where = "transform " + std::to_string(i) + " ";
    try {
      std::unique_ptr<const TransformStep> step = make_transform_step(transforms[i]);
      const StepKind kind = step->kind();
      if (kind != StepKind::kOutput && !plan->output_steps.empty()) {
        throw Error(ErrorKind::kConfig, transforms[i].name + " comes after " + transforms[i - 1].name +
                                            ", which works on the written output: put it after every other transform");
      }
      check_config(
          kind != StepKind::kGeometric || pointwise.empty(),
          transforms[i].name + " (a resize or crop) comes after Normalize: put Normalize after every resize and crop");
      check_config(kind != StepKind::kImage || pointwise.empty(),
                   transforms[i].name + " comes after Normalize: put Normalize after every step on the image");
      const StepPlan own = step->plan(chain);
      if (plan->device_unsupported.empty()) {
        const std::string step = where + "(" + transforms[i].name + ")";
        if (kind == StepKind::kImage) {
          plan->device_unsupported = step + " works on the whole decoded image";
        } else if (kind == StepKind::kOutput) {
          plan->device_unsupported = step + " works on the written output";
        } else if (own.interpolation && *own.interpolation != Interpolation::kBilinear) {
          plan->device_unsupported = step + " resizes with another interpolation than bilinear";
        }
      }
      switch (kind) {
        case StepKind::kPointwise:
          pointwise.push_back(&step_as<PointwiseStep>(*step));
          break;
        case StepKind::kOutput:
          plan->output_steps.push_back(&step_as<OutputStep>(*step));
          break;
        case StepKind::kImage:
          plan->groups.push_back(Group{&step_as<ImageStep>(*step)});
          break;
        case StepKind::kGeometric:
        case StepKind::kMirror: {
          // A step padding with another value, or resizing with another
          // interpolation, than its group's starts a new group: each group
          // pads with one value and resamples once.
          const Group& last = plan->groups.back();
          if ((own.fill && last.fill && *own.fill != *last.fill) ||
              (own.interpolation && last.interpolation && *own.interpolation != *last.interpolation)) {
            plan->groups.emplace_back();
          }
          Group& group = plan->groups.back();
          group.steps.push_back(&step_as<PlacementStep>(*step));
          group.antialias = group.antialias && own.antialias;
          if (own.fill) group.fill = own.fill;
          if (own.interpolation) group.interpolation = own.interpolation;
          break;
        }
      }
      plan->steps.push_back(std::move(step));
    } catch (const Error& e) {
      if (e.kind() != ErrorKind::kConfig) throw;
      throw Error(ErrorKind::kConfig, where + e.cause());
    }
  }
  // Without a fixed size, each sample's size is what its steps give
  // (bounded by max_pixels), when the caller takes variable sizes.
  plan->variable = !chain.size.has_value() && options.variable_size;
  check_config(chain.size.has_value() || plan->variable,
               "ImagePipeline: the transforms do not give a fixed output size, so images of different sizes "
               "cannot be batched; end the resizes and crops with a crop or a resize to (h, w)");
  if (!plan->variable) {
    plan->size = *chain.size;
    // Every later product of the output's dimensions is bounded by this one.
    checked_mul(checked_mul(checked_mul(plan->size.height, plan->size.width, "ImagePipeline: the output size"),
                            channels, "ImagePipeline: the output size"),
                static_cast<int64_t>(dtype_size(output.dtype)), "ImagePipeline: the output size in bytes");
  }

  for (int c = 0; c < channels; ++c) {
    for (int v = 0; v < 256; ++v) {
      plan->lut_u8.push_back(static_cast<uint8_t>(v));
      float x = static_cast<float>(v) / 255.0f;
      for (const PointwiseStep* step : pointwise) x = step->map_value(c, x);
      plan->lut_f32.push_back(x);
      plan->lut_f16.push_back(float_to_half(x));
      plan->lut_bf16.push_back(float_to_bfloat16(x));
    }
  }
  if (output.dtype == DType::kFloat32 && output.layout == Layout::kCHW && pointwise.size() <= 1) {
    ChannelNormalization normalize{std::vector<float>(channels, 0.0f), std::vector<float>(channels, 1.0f)};
    if (!pointwise.empty()) normalize = pointwise.front()->normalization().value_or(ChannelNormalization{});
    if (normalize.mean.size() == static_cast<size_t>(channels)) {
      plan->normalize_f32 = NormalizeArithmetic::make(channels, normalize.mean.data(), normalize.std.data());
    }
  }
  if (plan->device_unsupported.empty() && plan->groups.size() > 1) {
    plan->device_unsupported = "a crop pads with another fill than an earlier one";  // The only other second group.
  }
  if (options.raw_input) plan->device_unsupported = "the inputs are raw pixels, not JPEG files";
  if (plan->variable) plan->device_unsupported = "the transforms give no fixed output size";
  if (channels != 3) plan->device_unsupported = "the output is grayscale";
  use_single_threaded_opencv();
  plan_ = std::move(plan);
}

const std::string& ImagePipeline::device_unsupported() const noexcept { return plan_->device_unsupported; }

DeviceSample ImagePipeline::place_on_device(int height, int width, SampleRng& rng) const {
  const Plan& plan = *plan_;
  check_config(plan.device_unsupported.empty(), "ImagePipeline: " + plan.device_unsupported);
  const Group& group = plan.groups[0];
  const SamplePlan s = plan.place(group, height, width, plan.size, rng);
  DeviceSample d{};
  d.box_x0 = s.box.x0;
  d.box_y0 = s.box.y0;
  d.box_x1 = s.box.x1;
  d.box_y1 = s.box.y1;
  // The whole pixels the resample may read, as resample() crops them.
  d.bound_x0 = std::clamp(static_cast<int>(std::floor(s.bound.x0 + 1e-6)), 0, width - 1);
  d.bound_y0 = std::clamp(static_cast<int>(std::floor(s.bound.y0 + 1e-6)), 0, height - 1);
  d.bound_x1 = std::clamp(static_cast<int>(std::ceil(s.bound.x1 - 1e-6)), d.bound_x0 + 1, width);
  d.bound_y1 = std::clamp(static_cast<int>(std::ceil(s.bound.y1 - 1e-6)), d.bound_y0 + 1, height);
  d.dx0 = s.dx0;
  d.dy0 = s.dy0;
  d.rect_w = s.rect_w;
  d.rect_h = s.rect_h;
  d.covered = s.covered ? 1 : 0;
  d.flip = s.placement.flip ? 1 : 0;
  d.vflip = s.placement.vflip ? 1 : 0;
  d.on_device = 1;
  d.antialias = group.antialias ? 1 : 0;
  const Fill fill = group.fill.value_or(Fill{});
  for (int c = 0; c < 3; ++c) d.fill[c] = fill[static_cast<size_t>(c)];
  return d;
}

std::vector<uint8_t> ImagePipeline::output_tables() const {
  const Plan& plan = *plan_;
  const auto bytes = [](const auto& table) {
    std::vector<uint8_t> out(table.size() * sizeof(table[0]));
    std::memcpy(out.data(), table.data(), out.size());
    return out;
  };
  switch (plan.output.dtype) {
    case DType::kUInt8:
      return bytes(plan.lut_u8);
    case DType::kFloat16:
      return bytes(plan.lut_f16);
    case DType::kBFloat16:
      return bytes(plan.lut_bf16);
    case DType::kFloat32:
      return bytes(plan.lut_f32);
    case DType::kInt64:
      break;
  }
  throw Error(ErrorKind::kInternal, "ImagePipeline: no output tables for dtype int64");
}

const ImageOutputSpec& ImagePipeline::output() const noexcept { return plan_->output; }

const ImagePipelineOptions& ImagePipeline::options() const noexcept { return plan_->options; }

int64_t ImagePipeline::max_pixels() const noexcept { return plan_->max_pixels; }

ImagePipeline::~ImagePipeline() = default;

SampleSpec ImagePipeline::output_spec() const {
  const Plan& plan = *plan_;
  return plan.variable ? plan.spec(-1, -1) : plan.spec(plan.size.height, plan.size.width);
}

bool ImagePipeline::fixed_shape() const { return !plan_->variable; }

void ImagePipeline::apply(std::span<const uint8_t> input, SampleRng& rng, void* out) const {
  check_config(!plan_->variable, "ImagePipeline: the output size varies per sample: use apply_variable()");
  run(input, rng, out, nullptr, nullptr);
}

void ImagePipeline::apply_tracked(std::span<const uint8_t> input, SampleRng& rng, void* out,
                                  std::vector<BoundingBox>& boxes) const {
  check_config(!plan_->variable, "ImagePipeline: the output size varies per sample: use apply_variable()");
  run(input, rng, out, &boxes, nullptr);
}

void ImagePipeline::apply_variable(std::span<const uint8_t> input, SampleRng& rng, const SampleAllocator& allocate,
                                   std::vector<BoundingBox>* boxes) const {
  if (!plan_->variable) {
    SampleTransform::apply_variable(input, rng, allocate, boxes);
    return;
  }
  run(input, rng, nullptr, boxes, &allocate);
}

void ImagePipeline::run(std::span<const uint8_t> input, SampleRng& rng, void* fixed_out,
                        std::vector<BoundingBox>* boxes, const SampleAllocator* allocate) const {
  const Plan& plan = *plan_;
  // Where the output of h x w pixels goes: the batch slot, or (variable
  // sizes) memory the caller gives for this sample's spec.
  const auto out = [&](int h, int w) { return allocate == nullptr ? fixed_out : (*allocate)(plan.spec(h, w)); };
  // Per-thread buffers: no allocation per sample once warm. Very large ones
  // are released afterwards so one huge image does not pin memory.
  thread_local detail::Scratch scratch;
  thread_local SampleImage sample;
  struct Trim {
    ~Trim() {
      constexpr size_t kKeep = size_t{64} << 20;
      sample.boxes = nullptr;
      sample.defer_tables = false;
      sample.pending_tables.reset();  // Also after a step that failed.
      for (auto* b : {&scratch.decoded, &scratch.converted, &scratch.oriented, &scratch.prefiltered, &scratch.resized,
                      &scratch.padded, &sample.image.pixels, &sample.spare})
        if (b->capacity() > kKeep) std::vector<uint8_t>().swap(*b);
    }
  } trim;

  // The leading group, fused into the decode: one source box, decoded alone
  // (crop window, DCT scaling) and resampled once.
  auto decoder = plan.options.raw_input ? detail::open_raw(input, *plan.options.raw_input, plan.max_pixels)
                                        : detail::open_image_decoder(input, plan.max_pixels);
  if (!plan.options.exif_orientation) decoder->ignore_exif_orientation();
  const ImageInfo& info = decoder->info();
  const size_t last = plan.groups.size() - 1;
  std::optional<Size2D> out_size;
  if (last == 0 && !plan.variable) out_size = plan.size;
  SamplePlan s = plan.place(plan.groups[0], info.height, info.width, out_size, rng);
  ImageView image;
  if (s.covered) {
    const detail::Decoded region = decoder->decode(plan.decode_request(s, plan.groups[0], info), scratch);
    image = plan.resample(region.view, region.x, region.y, region.scale, s, plan.groups[0], scratch);
  } else {
    image = plan.resample({}, 0, 0, 1, s, plan.groups[0], scratch);
  }
  image = flipped_vertically(image, s.placement.vflip);
  move_boxes(boxes, s);
  if (last == 0) {
    plan.write(image, s.placement.flip, out(image.height, image.width), rng);
    return;
  }
  // Later groups work on the materialized image: an image step, then one
  // resample for the group's crops and resizes (a flip is materialized,
  // except in the last group, whose flip the output pass does).
  materialize(image, s.placement.flip, sample.image);
  sample.max_pixels = plan.max_pixels;
  for (size_t g = 1; g <= last; ++g) {
    const Group& group = plan.groups[g];
    // A warp followed by crops/resizes computes only the window they read.
    const WarpingStep* warping = group.steps.empty() || group.image == nullptr ? nullptr : group.image->warping();
    std::optional<Warp> warp;
    if (warping != nullptr) {
      warp = warping->draw(sample.image.height, sample.image.width, rng);
    } else if (group.image != nullptr) {
      sample.boxes = boxes;
      // Only the output pass reads the last step's pixels: a pointwise result
      // may wait there as tables (pixel_tables.h).
      sample.defer_tables = g == last && group.steps.empty();
      group.image->apply_image(sample, rng);
      sample.defer_tables = false;
      sample.boxes = nullptr;
      const Image& img = sample.image;
      if (img.channels != plan.output.channels || img.height < 1 || img.width < 1 ||
          img.pixels.size() != static_cast<size_t>(img.height) * img.width * img.channels) {
        throw Error(ErrorKind::kInternal, "a transform step returned an image of inconsistent size");
      }
    }
    if (group.steps.empty()) continue;
    out_size.reset();
    if (g == last && !plan.variable) out_size = plan.size;
    if (warp) {
      s = plan.place(group, warp->out_height, warp->out_width, out_size, rng);
      WarpWindow window{0, 0, warp->out_width, warp->out_height};
      if (s.covered) {
        const detail::Region r = Plan::region_of(s, group, warp->out_width, warp->out_height);
        window = {r.x, r.y, r.width, r.height};
      }
      sample.boxes = boxes;
      const std::array<int, 2> origin = warping->apply_drawn(*warp, sample, &window);
      sample.boxes = nullptr;
      image = plan.resample(sample.image.view(), origin[0], origin[1], 1, s, group, scratch);
    } else {
      s = plan.place(group, sample.image.height, sample.image.width, out_size, rng);
      image = plan.resample(sample.image.view(), 0, 0, 1, s, group, scratch);
    }
    image = flipped_vertically(image, s.placement.vflip);
    move_boxes(boxes, s);
    if (g == last) {
      plan.write(image, s.placement.flip, out(image.height, image.width), rng);
      return;
    }
    Image next{0, 0, 0, std::move(sample.spare)};
    materialize(image, s.placement.flip, next);
    sample.spare = std::move(sample.image.pixels);
    sample.image = std::move(next);
  }
  // The chain ends with an image step: its output is the sample's.
  const Image& img = sample.image;
  if (!plan.variable && (img.height != plan.size.height || img.width != plan.size.width)) {
    throw Error(ErrorKind::kInternal, "the last transform step returned a " + std::to_string(img.width) + "x" +
                                          std::to_string(img.height) + " image, planned " +
                                          std::to_string(plan.size.width) + "x" + std::to_string(plan.size.height));
  }
  plan.write(img.view(), false, out(img.height, img.width), rng,
             sample.pending_tables ? &*sample.pending_tables : nullptr);
}

}  // namespace conveyor
