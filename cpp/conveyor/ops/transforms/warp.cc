#include "conveyor/ops/transforms/warp.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <numbers>
#include <opencv2/core.hpp>
#include <opencv2/imgproc.hpp>
#include <string>
#include <utility>
#include <vector>

#include "conveyor/core/error.h"
#include "conveyor/core/number_format.h"
#include "conveyor/ops/resize.h"
#include "conveyor/ops/transforms/image_step.h"
#include "conveyor/ops/transforms/vector_clones.h"
#if defined(__GNUC__) && defined(__x86_64__)
#include <immintrin.h>
#define CONVEYOR_AVX2_WARP 1
#endif

namespace conveyor {

namespace {

// torchvision builds its grids from float32 tensors: its matrices and
// coefficients are rounded to float32 first.
double f32(double v) { return static_cast<double>(static_cast<float>(v)); }

Matrix3 translation(double tx, double ty) { return {1, 0, tx, 0, 1, ty, 0, 0, 1}; }

double radians(double degrees) { return degrees * std::numbers::pi / 180.0; }

// torchvision's _compute_affine_output_size (the tensor version, float32,
// with its 1e-4 truncation): (width, height) of an expanded rotation.
std::pair<int, int> affine_output_size(const Matrix3& m, int w, int h) {
  const float half_w = 0.5f * static_cast<float>(w), half_h = 0.5f * static_cast<float>(h);
  const float pts[4][2] = {{-half_w, -half_h}, {-half_w, half_h}, {half_w, half_h}, {half_w, -half_h}};
  float min_x = INFINITY, min_y = INFINITY, max_x = -INFINITY, max_y = -INFINITY;
  for (const auto& p : pts) {
    const float x = static_cast<float>(m[0]) * p[0] + static_cast<float>(m[1]) * p[1] + static_cast<float>(m[2]);
    const float y = static_cast<float>(m[3]) * p[0] + static_cast<float>(m[4]) * p[1] + static_cast<float>(m[5]);
    min_x = std::min(min_x, x);
    max_x = std::max(max_x, x);
    min_y = std::min(min_y, y);
    max_y = std::max(max_y, y);
  }
  const auto trunc_tol = [](float v) { return std::trunc(v * 10000.0f) * 1e-4f; };
  const float cmax_x = std::ceil(trunc_tol(max_x + half_w)), cmax_y = std::ceil(trunc_tol(max_y + half_h));
  const float cmin_x = std::floor(trunc_tol(min_x + half_w)), cmin_y = std::floor(trunc_tol(min_y + half_h));
  // A center far from the image makes these float32 sums lose every digit of
  // the size (torchvision too): 0 is refused by SampleImage::check_size, and
  // what does not fit in an int (or is NaN) here.
  const auto side = [](float v) {
    if (!(v < 2147483648.0f)) {
      throw Error(ErrorKind::kTooLarge, "an expanded rotation would have a side of " + format_shortest(v) +
                                            " pixels, more than an int holds");
    }
    return static_cast<int>(v);
  };
  return {side(cmax_x - cmin_x), side(cmax_y - cmin_y)};
}

// The pixel map of torchvision's affine grid: theta (float32, in coordinates
// centred on each image) between images of w x h (source) and ow x oh.
Matrix3 centred_to_pixels(const Matrix3& theta, int w, int h, int ow, int oh) {
  Matrix3 t = theta;
  for (double& v : t) v = f32(v);
  t[6] = 0;
  t[7] = 0;
  t[8] = 1;
  return multiply(multiply(translation((w - 1) * 0.5, (h - 1) * 0.5), t),
                  translation(-(ow - 1) * 0.5, -(oh - 1) * 0.5));
}

Matrix3 rounded(Matrix3 m) {
  for (double& v : m) v = f32(v);
  return m;
}

// Pixel positions of the warped image's output, enclosed and clipped.
void warp_boxes(const Warp& warp, std::vector<BoundingBox>* boxes) {
  if (boxes == nullptr) return;
  const Matrix3& m = warp.boxes_forward;
  const double w = warp.box_canvas[0] > 0 ? warp.box_canvas[0] : warp.out_width;
  const double h = warp.box_canvas[1] > 0 ? warp.box_canvas[1] : warp.out_height;
  std::vector<BoundingBox> out;
  out.reserve(boxes->size());
  for (const BoundingBox& b : *boxes) {
    const double xs[4] = {b.x, b.x + static_cast<double>(b.width), b.x + static_cast<double>(b.width), b.x};
    const double ys[4] = {b.y, b.y, b.y + static_cast<double>(b.height), b.y + static_cast<double>(b.height)};
    double x0 = INFINITY, y0 = INFINITY, x1 = -INFINITY, y1 = -INFINITY;
    for (int i = 0; i < 4; ++i) {
      const double d = m[6] * xs[i] + m[7] * ys[i] + m[8];
      const double x = (m[0] * xs[i] + m[1] * ys[i] + m[2]) / d - warp.box_offset[0];
      const double y = (m[3] * xs[i] + m[4] * ys[i] + m[5]) / d - warp.box_offset[1];
      x0 = std::min(x0, x);
      x1 = std::max(x1, x);
      y0 = std::min(y0, y);
      y1 = std::max(y1, y);
    }
    x0 = std::clamp(x0, 0.0, w);
    x1 = std::clamp(x1, 0.0, w);
    y0 = std::clamp(y0, 0.0, h);
    y1 = std::clamp(y1, 0.0, h);
    if (!(x1 > x0 && y1 > y0)) continue;  // Outside the image (or degenerate): dropped.
    out.push_back({static_cast<float>(x0), static_cast<float>(y0), static_cast<float>(x1 - x0),
                   static_cast<float>(y1 - y0), b.category});
  }
  *boxes = std::move(out);
}

// Nearest-neighbour warp repeating torchvision's float32 grid arithmetic
// (_affine_grid / _perspective_grid, then grid_sample's unnormalization and
// round half to even): OpenCV's INTER_NEAREST rounds halves up, in fixed
// point, which moves whole rows at the ties that rotations by 90 degrees of
// non-square images (and other centre offsets of a half) produce.
// Computes the out_w x out_h window of the output at `origin`.
// Round half to even of a float32, as std::nearbyint in the default rounding
// mode, but branch-free so that the loops calling it vectorise (nearbyint is
// a libm call without SSE4.1): below 2^23, adding and removing 2^23 rounds
// |x| to an integer; from 2^23 on, every float32 is one.
inline float round_half_even(float x) {
  constexpr float kTwo23 = 8388608.0f;
  const float a = std::fabs(x);
  const float r = a < kTwo23 ? (a + kTwo23) - kTwo23 : a;
  return std::copysign(r, x);
}

// What row_sources needs of a warp: the grid's affine rows over their
// normalization (r..), its projective terms (g6, g7), the input's half and
// full sizes.
struct RowGrid {
  float r00, r10, r20, r01, r11, r21, g6, g7;
  float half_w, half_h, fw, fh;
  float x_base;  // Added to the output column: the base coordinate of column 0.
};

// The source pixel of each output pixel x0 .. x0 + n - 1 of the row whose
// base coordinate is `by`, computed branch-free so that the loop vectorises:
// xs[i] = -1 where it falls outside the image. kRowY: the warp is affine
// with no x term in the source row (r01 == 0: translations, shears along x),
// so bx * r01 is a zero and every pixel of the row has the source row ys[0]
// (the arithmetic below, done once); only the columns are computed per pixel.
template <bool kProjective, bool kRowY>
[[gnu::always_inline]] inline void row_sources_of(const RowGrid& k, float by, int x0, int n, int32_t* __restrict xs,
                                                  int32_t* __restrict ys) {
  const RowGrid g = k;  // Locals: no aliasing with the outputs.
  if (n <= 0) return;
  float row_y = 0;
  if constexpr (kRowY) {
    const float bx = static_cast<float>(x0) + g.x_base;
    row_y = round_half_even(((bx * g.r01 + by * g.r11 + g.r21) + 1.0f) * g.half_h - 0.5f);
    if (!(row_y >= 0 && row_y < g.fh)) {
      for (int i = 0; i < n; ++i) xs[i] = -1;
      ys[0] = 0;
      return;
    }
    ys[0] = static_cast<int32_t>(row_y);
  }
  for (int i = 0; i < n; ++i) {
    const float bx = static_cast<float>(x0 + i) + g.x_base;
    float gx = bx * g.r00 + by * g.r10 + g.r20;
    if constexpr (kRowY) {
      const float fx = round_half_even((gx + 1.0f) * g.half_w - 0.5f);
      const bool inside = (fx >= 0) & (fx < g.fw);
      xs[i] = inside ? static_cast<int32_t>(fx) : -1;
    } else {
      float gy = bx * g.r01 + by * g.r11 + g.r21;
      if constexpr (kProjective) {
        const float den = bx * g.g6 + by * g.g7 + 1.0f;
        gx = gx / den - 1.0f;
        gy = gy / den - 1.0f;
      }
      const float fx = round_half_even((gx + 1.0f) * g.half_w - 0.5f);
      const float fy = round_half_even((gy + 1.0f) * g.half_h - 0.5f);
      const bool inside = (fx >= 0) & (fx < g.fw) & (fy >= 0) & (fy < g.fh);
      // Selected before the conversions, which are then of values in range.
      xs[i] = inside ? static_cast<int32_t>(fx) : -1;
      ys[i] = static_cast<int32_t>(inside ? fy : 0.0f);
    }
  }
}

// Which loop of row_sources_of a warp runs.
enum class RowKind { kAffine, kAffineRowY, kProjective };

// One loop per kind, inlined into each clone (AVX2 and baseline).
CONVEYOR_VECTOR_CLONES void row_sources(const RowGrid& k, RowKind kind, float by, int x0, int n, int32_t* xs,
                                        int32_t* ys) {
  switch (kind) {
    case RowKind::kProjective:
      row_sources_of<true, false>(k, by, x0, n, xs, ys);
      return;
    case RowKind::kAffineRowY:
      row_sources_of<false, true>(k, by, x0, n, xs, ys);
      return;
    case RowKind::kAffine:
      row_sources_of<false, false>(k, by, x0, n, xs, ys);
      return;
  }
}

// Copies the pixels of one output row: output pixel i is source pixel
// (xs[i], ys[i]) (ys[0] for every pixel when kRowY), or the fill where
// xs[i] < 0. C is the channel count (0: `c` at run time), so that the usual
// 1 and 3 are plain byte moves; 3-byte pixels move as 4 bytes (the 4th is
// overwritten by the next pixel), except the row's last and the image's last
// pixel (no byte after it). With kRowY, a group of 8 output pixels from 8
// consecutive source pixels (a translation, most of a shear along x) is one
// copy. `fill` has 4 bytes.
template <int C, bool kRowY>
void gather_row(const uint8_t* src, size_t src_bytes, int w, int c, const int32_t* xs, const int32_t* ys, int n,
                const uint8_t* fill, uint8_t* dst) {
  const int channels = C > 0 ? C : c;
  const uint8_t* last = src + src_bytes - static_cast<size_t>(channels);
  const auto y_of = [&](int i) { return kRowY ? ys[0] : ys[i]; };
  const auto pixel = [&](int i) {
    return xs[i] >= 0
               ? src + (static_cast<size_t>(y_of(i)) * static_cast<size_t>(w) + static_cast<size_t>(xs[i])) * channels
               : fill;
  };
  const auto copy = [&](int i) {
    const uint8_t* s = pixel(i);
    uint8_t* d = dst + static_cast<ptrdiff_t>(i) * channels;
    if constexpr (C == 3) {
      if (i + 1 < n && s != last) {
        uint32_t v;
        std::memcpy(&v, s, 4);
        std::memcpy(d, &v, 4);
        return;
      }
    }
    for (int b = 0; b < channels; ++b) d[b] = s[b];
  };
  int i = 0;
  if constexpr (kRowY && C > 0) {
    for (; i + 8 <= n; i += 8) {
      int off = xs[i] < 0;  // 0 when the 8 sources are inside and consecutive.
      for (int k = 1; k < 8; ++k) off |= xs[i + k] - k - xs[i];
      if (off == 0) {
        std::memcpy(dst + static_cast<ptrdiff_t>(i) * C, pixel(i), 8 * C);
      } else {
        for (int k = i; k < i + 8; ++k) copy(k);
      }
    }
  }
  for (; i < n; ++i) copy(i);
}

// gather_row for the channel count c.
template <bool kRowY>
void gather_rows_of(const uint8_t* src, size_t src_bytes, int w, int c, const int32_t* xs, const int32_t* ys, int n,
                    const uint8_t* fill, uint8_t* dst) {
  if (c == 3) {
    gather_row<3, kRowY>(src, src_bytes, w, c, xs, ys, n, fill, dst);
  } else if (c == 1) {
    gather_row<1, kRowY>(src, src_bytes, w, c, xs, ys, n, fill, dst);
  } else {
    gather_row<0, kRowY>(src, src_bytes, w, c, xs, ys, n, fill, dst);
  }
}

#if defined(CONVEYOR_AVX2_WARP)
// One output row of the nearest warp, 8 pixels per step, 1 or 3 channels:
// row_sources_of's arithmetic in the same float32 operations, each rounded
// alone (by * r10 is the same product in every lane; round half to even is
// the instruction's), giving the 8 source offsets (-1: the fill), then the
// pixels copied (nothing past the group). With 3 channels, stops before a
// group that would read past the image's last byte (a 4-byte fetch of its
// last pixel); returns the first pixel it did not write. src_bytes < 2^31.
template <int C, bool kProjective>
__attribute__((target("avx2"))) int warp_row_avx2(const RowGrid& g, float by, int x0, int n, const uint8_t* src,
                                                  size_t src_bytes, int w, const uint8_t* fill, uint8_t* dst) {
  const __m256 r00 = _mm256_set1_ps(g.r00), r01 = _mm256_set1_ps(g.r01), r20 = _mm256_set1_ps(g.r20),
               r21 = _mm256_set1_ps(g.r21), y_term_x = _mm256_set1_ps(by * g.r10),
               y_term_y = _mm256_set1_ps(by * g.r11), g6 = _mm256_set1_ps(g.g6), y_term_den = _mm256_set1_ps(by * g.g7);
  const __m256 one = _mm256_set1_ps(1.0f), half = _mm256_set1_ps(0.5f), zero = _mm256_setzero_ps();
  const __m256 half_w = _mm256_set1_ps(g.half_w), half_h = _mm256_set1_ps(g.half_h), fw = _mm256_set1_ps(g.fw),
               fh = _mm256_set1_ps(g.fh), x_base = _mm256_set1_ps(g.x_base);
  const __m256i lanes = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7), width = _mm256_set1_epi32(w);
  const __m256i last_safe = _mm256_set1_epi32(static_cast<int32_t>(src_bytes) - 4);
  int i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256 bx = _mm256_add_ps(_mm256_cvtepi32_ps(_mm256_add_epi32(_mm256_set1_epi32(x0 + i), lanes)), x_base);
    __m256 gx = _mm256_add_ps(_mm256_add_ps(_mm256_mul_ps(bx, r00), y_term_x), r20);
    __m256 gy = _mm256_add_ps(_mm256_add_ps(_mm256_mul_ps(bx, r01), y_term_y), r21);
    if constexpr (kProjective) {
      const __m256 den = _mm256_add_ps(_mm256_add_ps(_mm256_mul_ps(bx, g6), y_term_den), one);
      gx = _mm256_sub_ps(_mm256_div_ps(gx, den), one);
      gy = _mm256_sub_ps(_mm256_div_ps(gy, den), one);
    }
    constexpr int kNearest = _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC;
    const __m256 fx = _mm256_round_ps(_mm256_sub_ps(_mm256_mul_ps(_mm256_add_ps(gx, one), half_w), half), kNearest);
    const __m256 fy = _mm256_round_ps(_mm256_sub_ps(_mm256_mul_ps(_mm256_add_ps(gy, one), half_h), half), kNearest);
    const __m256 inside =
        _mm256_and_ps(_mm256_and_ps(_mm256_cmp_ps(fx, zero, _CMP_GE_OQ), _mm256_cmp_ps(fx, fw, _CMP_LT_OQ)),
                      _mm256_and_ps(_mm256_cmp_ps(fy, zero, _CMP_GE_OQ), _mm256_cmp_ps(fy, fh, _CMP_LT_OQ)));
    const __m256i mask = _mm256_castps_si256(inside);
    __m256i offset = _mm256_add_epi32(_mm256_mullo_epi32(_mm256_cvttps_epi32(fy), width), _mm256_cvttps_epi32(fx));
    if constexpr (C == 3) offset = _mm256_add_epi32(_mm256_add_epi32(offset, offset), offset);
    // (One channel reads one byte per pixel: never past the image.)
    if (C == 3 && !_mm256_testz_si256(mask, _mm256_cmpgt_epi32(offset, last_safe))) break;
    // Scalar fetches of the 8 pixels: no slower than an AVX2 gather (Zen 3).
    alignas(32) int32_t at[8];
    _mm256_store_si256(reinterpret_cast<__m256i*>(at), _mm256_blendv_epi8(_mm256_set1_epi32(-1), offset, mask));
    uint8_t* d = dst + static_cast<ptrdiff_t>(i) * C;
    for (int k = 0; k < 8; ++k) {
      const uint8_t* p = at[k] >= 0 ? src + at[k] : fill;
      if constexpr (C == 3) {
        // 4 bytes (the 4th overwritten by the next pixel), 3 for the last.
        if (k < 7) {
          std::memcpy(d + 3 * k, p, 4);
        } else {
          std::memcpy(d + 21, p, 3);
        }
      } else {
        d[k] = p[0];
      }
    }
  }
  return i;
}
#endif

template <bool kProjective>
void warp_nearest_rows(const Image& src, const Warp& warp, std::array<int, 2> origin, int out_w, int out_h,
                       const uint8_t* fill, uint8_t* dst) {
  const int w = src.width, h = src.height, c = src.channels, ow = warp.out_width, oh = warp.out_height;
  const std::array<float, 8>& g = warp.grid;
  const float half_w = 0.5f * static_cast<float>(w), half_h = 0.5f * static_cast<float>(h);
  // The grid's normalization: by the input's size (affine), the output's (perspective).
  const float norm_w = kProjective ? 0.5f * static_cast<float>(ow) : half_w;
  const float norm_h = kProjective ? 0.5f * static_cast<float>(oh) : half_h;
  const RowGrid grid{g[0] / norm_w,
                     g[1] / norm_w,
                     g[2] / norm_w,
                     g[3] / norm_h,
                     g[4] / norm_h,
                     g[5] / norm_h,
                     g[6],
                     g[7],
                     half_w,
                     half_h,
                     static_cast<float>(w),
                     static_cast<float>(h),
                     kProjective ? 0.5f : -(ow - 1) * 0.5f};
  const RowKind kind = kProjective ? RowKind::kProjective : (grid.r01 == 0 ? RowKind::kAffineRowY : RowKind::kAffine);
  // The source pixels of a row (thread-local: no allocation once warm).
  thread_local std::vector<int32_t> index;
  index.resize(2 * static_cast<size_t>(out_w));
  int32_t* xs = index.data();
  int32_t* ys = xs + out_w;
  const size_t src_bytes = src.pixels.size();
#if defined(CONVEYOR_AVX2_WARP)
  static const bool avx2 = __builtin_cpu_supports("avx2");
  // Rows of one source row copy runs instead (faster than this kernel).
  const bool vector_rows =
      avx2 && kind != RowKind::kAffineRowY && (c == 1 || c == 3) && src_bytes >= 4 && src_bytes < (size_t{1} << 31);
#endif
  for (int wy = 0; wy < out_h; ++wy) {
    const int y = wy + origin[1];
    const float by = kProjective ? static_cast<float>(y) + 0.5f : static_cast<float>(y) - (oh - 1) * 0.5f;
    uint8_t* d = dst + static_cast<size_t>(wy) * out_w * c;
    int done = 0;
#if defined(CONVEYOR_AVX2_WARP)
    if (vector_rows) {
      done = c == 3
                 ? warp_row_avx2<3, kProjective>(grid, by, origin[0], out_w, src.pixels.data(), src_bytes, w, fill, d)
                 : warp_row_avx2<1, kProjective>(grid, by, origin[0], out_w, src.pixels.data(), src_bytes, w, fill, d);
      if (done == out_w) continue;
    }
#endif
    const int n = out_w - done;
    d += static_cast<ptrdiff_t>(done) * c;
    row_sources(grid, kind, by, origin[0] + done, n, xs, ys);
    if (kind == RowKind::kAffineRowY) {
      gather_rows_of<true>(src.pixels.data(), src_bytes, w, c, xs, ys, n, fill, d);
    } else {
      gather_rows_of<false>(src.pixels.data(), src_bytes, w, c, xs, ys, n, fill, d);
    }
  }
}

void warp_nearest(const Image& src, const Warp& warp, std::array<int, 2> origin, int out_w, int out_h,
                  const uint8_t* fill, uint8_t* dst) {
  if (warp.projective) {
    warp_nearest_rows<true>(src, warp, origin, out_w, out_h, fill, dst);
  } else {
    warp_nearest_rows<false>(src, warp, origin, out_w, out_h, fill, dst);
  }
}

// Arguments shared by the warps.
Interpolation read_interpolation(TransformArgs& args, Interpolation fallback) {
  const double v = args.number("interpolation", static_cast<double>(fallback));
  args.check(v == 0 || v == 1, "interpolation must be 0 (nearest) or 1 (bilinear), got " + args.given("interpolation"));
  return static_cast<Interpolation>(static_cast<int>(v));
}

std::optional<std::array<double, 2>> read_center(TransformArgs& args) {
  if (!args.has("center")) return std::nullopt;
  const std::vector<double> c = args.numbers("center", 2);
  for (const double v : c) args.check(std::isfinite(v), "center must be finite, got " + args.given("center"));
  return std::array<double, 2>{c[0], c[1]};
}

// A range (lo, hi) with lo <= hi, finite.
std::array<double, 2> read_range(TransformArgs& args, std::string_view arg, size_t count = 2) {
  const std::vector<double> v = args.numbers(arg, count);
  for (const double x : v) args.check(std::isfinite(x), std::string(arg) + " must be finite, got " + args.given(arg));
  for (size_t i = 0; i + 1 < v.size(); i += 2) {
    args.check(v[i] <= v[i + 1], std::string(arg) + " must be (min, max) with min <= max, got " + args.given(arg));
  }
  return {v[0], v[1]};
}

// A step on the image that draws one warp per sample.
class WarpStep : public WarpingStep {
 public:
  WarpStep(Interpolation interpolation, FillArg fill, std::string name)
      : interpolation_(interpolation), fill_(std::move(fill)), name_(std::move(name)) {}

  StepPlan plan(ChainPlan& chain) const override {
    fill_.check_channels(name_, chain.channels);
    return {};
  }
  void apply_image(SampleImage& sample, SampleRng& rng) const override {
    const std::optional<Warp> warp = draw(sample.image.height, sample.image.width, rng);
    if (warp) apply_warp(*warp, interpolation_, fill_, sample, name_);
  }

  std::array<int, 2> apply_drawn(const Warp& warp, SampleImage& sample, const WarpWindow* window) const override {
    return apply_warp(warp, interpolation_, fill_, sample, name_, window);
  }

 private:
  Interpolation interpolation_;
  FillArg fill_;
  std::string name_;
};

class RandomRotationStep final : public WarpStep {
 public:
  RandomRotationStep(std::array<double, 2> degrees, Interpolation interpolation, bool expand,
                     std::optional<std::array<double, 2>> center, FillArg fill)
      : WarpStep(interpolation, std::move(fill), "RandomRotation"),
        degrees_(degrees),
        expand_(expand),
        center_(center) {}

  StepPlan plan(ChainPlan& chain) const override {
    const StepPlan own = WarpStep::plan(chain);
    if (expand_) chain.size.reset();  // The size depends on the angle.
    return own;
  }

  std::optional<Warp> draw(int height, int width, SampleRng& rng) const override {
    const double angle = rng.uniform(degrees_[0], degrees_[1]);
    return rotation_warp(height, width, angle, expand_, center_);
  }

 private:
  std::array<double, 2> degrees_;
  bool expand_;
  std::optional<std::array<double, 2>> center_;
};

class RandomAffineStep final : public WarpStep {
 public:
  struct Ranges {
    std::array<double, 2> degrees{};
    std::optional<std::array<double, 2>> translate;
    std::optional<std::array<double, 2>> scale;
    std::vector<double> shear;  // Empty, (x0, x1) or (x0, x1, y0, y1).
    std::optional<std::array<double, 2>> center;
  };

  RandomAffineStep(Ranges ranges, Interpolation interpolation, FillArg fill)
      : WarpStep(interpolation, std::move(fill), "RandomAffine"), r_(std::move(ranges)) {}

  // torchvision's make_params: angle, translation (rounded, half to even),
  // scale, shear x, shear y, each drawn only when asked for.
  std::optional<Warp> draw(int height, int width, SampleRng& rng) const override {
    const double angle = rng.uniform(r_.degrees[0], r_.degrees[1]);
    std::array<double, 2> translate{0, 0};
    if (r_.translate) {
      const double max_dx = (*r_.translate)[0] * width, max_dy = (*r_.translate)[1] * height;
      translate[0] = std::nearbyint(rng.uniform(-max_dx, max_dx));
      translate[1] = std::nearbyint(rng.uniform(-max_dy, max_dy));
    }
    const double scale = r_.scale ? rng.uniform((*r_.scale)[0], (*r_.scale)[1]) : 1.0;
    std::array<double, 2> shear{0, 0};
    if (!r_.shear.empty()) {
      shear[0] = rng.uniform(r_.shear[0], r_.shear[1]);
      if (r_.shear.size() == 4) shear[1] = rng.uniform(r_.shear[2], r_.shear[3]);
    }
    return affine_warp(height, width, angle, translate, scale, shear, r_.center);
  }

 private:
  Ranges r_;
};

class RandomPerspectiveStep final : public WarpStep {
 public:
  RandomPerspectiveStep(double distortion_scale, double p, Interpolation interpolation, FillArg fill)
      : WarpStep(interpolation, std::move(fill), "RandomPerspective"), distortion_(distortion_scale), p_(p) {}

  // torchvision: the p draw, then each corner's x and y within its bound.
  std::optional<Warp> draw(int height, int width, SampleRng& rng) const override {
    if (rng.uniform() >= p_) return std::nullopt;
    const int bound_h = static_cast<int>(distortion_ * (height / 2)) + 1;
    const int bound_w = static_cast<int>(distortion_ * (width / 2)) + 1;
    const auto randint = [&rng](int lo, int hi) {
      return static_cast<double>(lo + static_cast<int64_t>(rng.below(static_cast<uint64_t>(hi - lo))));
    };
    std::array<std::array<double, 2>, 4> end{};
    end[0] = {randint(0, bound_w), randint(0, bound_h)};
    end[1] = {randint(width - bound_w, width), randint(0, bound_h)};
    end[2] = {randint(width - bound_w, width), randint(height - bound_h, height)};
    end[3] = {randint(0, bound_w), randint(height - bound_h, height)};
    const double w1 = width - 1, h1 = height - 1;
    const std::array<std::array<double, 2>, 4> start{{{0, 0}, {w1, 0}, {w1, h1}, {0, h1}}};
    return perspective_warp(height, width, perspective_coefficients(start, end));
  }

 private:
  double distortion_;
  double p_;
};

std::array<std::array<double, 2>, 4> read_points(TransformArgs& args, std::string_view arg) {
  const std::vector<double> v = args.numbers(arg, 8);
  std::array<std::array<double, 2>, 4> points{};
  for (size_t i = 0; i < 4; ++i) {
    args.check(std::isfinite(v[2 * i]) && std::isfinite(v[2 * i + 1]), std::string(arg) + " must be finite");
    points[i] = {v[2 * i], v[2 * i + 1]};
  }
  return points;
}

}  // namespace

Matrix3 multiply(const Matrix3& a, const Matrix3& b) {
  Matrix3 c{};
  for (int i = 0; i < 3; ++i)
    for (int j = 0; j < 3; ++j)
      for (int k = 0; k < 3; ++k) c[i * 3 + j] += a[i * 3 + k] * b[k * 3 + j];
  return c;
}

Matrix3 affine_matrix(std::array<double, 2> center, double angle, std::array<double, 2> translate, double scale,
                      std::array<double, 2> shear, bool inverted) {
  // torchvision's _get_inverse_affine_matrix, operation for operation.
  const double rot = radians(angle), sx = radians(shear[0]), sy = radians(shear[1]);
  const double cx = center[0], cy = center[1], tx = translate[0], ty = translate[1];
  const double cos_sy = std::cos(sy), tan_sx = std::tan(sx), rot_minus_sy = rot - sy;
  const double cx_plus_tx = cx + tx, cy_plus_ty = cy + ty;
  const double a = std::cos(rot_minus_sy) / cos_sy;
  const double b = -(a * tan_sx + std::sin(rot));
  const double c = std::sin(rot_minus_sy) / cos_sy;
  const double d = std::cos(rot) - c * tan_sx;
  Matrix3 m{0, 0, 0, 0, 0, 0, 0, 0, 1};
  if (inverted) {
    m[0] = d / scale;
    m[1] = -b / scale;
    m[3] = -c / scale;
    m[4] = a / scale;
    m[2] = cx - m[0] * cx_plus_tx - m[1] * cy_plus_ty;
    m[5] = cy - m[3] * cx_plus_tx - m[4] * cy_plus_ty;
  } else {
    m[0] = a * scale;
    m[1] = b * scale;
    m[3] = c * scale;
    m[4] = d * scale;
    m[2] = cx_plus_tx - m[0] * cx - m[1] * cy;
    m[5] = cy_plus_ty - m[3] * cx - m[4] * cy;
  }
  return m;
}

std::array<double, 8> perspective_coefficients(const std::array<std::array<double, 2>, 4>& startpoints,
                                               const std::array<std::array<double, 2>, 4>& endpoints) {
  // The 8 x 8 system torchvision solves by least squares (exactly determined:
  // its solution), by Gaussian elimination with partial pivoting in double.
  double a[8][9] = {};
  for (int i = 0; i < 4; ++i) {
    const double ex = endpoints[i][0], ey = endpoints[i][1], sx = startpoints[i][0], sy = startpoints[i][1];
    const double r0[9] = {ex, ey, 1, 0, 0, 0, -sx * ex, -sx * ey, sx};
    const double r1[9] = {0, 0, 0, ex, ey, 1, -sy * ex, -sy * ey, sy};
    std::copy(r0, r0 + 9, a[2 * i]);
    std::copy(r1, r1 + 9, a[2 * i + 1]);
  }
  for (int col = 0; col < 8; ++col) {
    int pivot = col;
    for (int r = col + 1; r < 8; ++r)
      if (std::abs(a[r][col]) > std::abs(a[pivot][col])) pivot = r;
    if (!(std::abs(a[pivot][col]) > 1e-12)) {
      throw Error(ErrorKind::kConfig, "perspective: the start and end points do not define a perspective transform");
    }
    std::swap(a[pivot], a[col]);
    for (int r = 0; r < 8; ++r) {
      if (r == col) continue;
      const double f = a[r][col] / a[col][col];
      for (int k = col; k < 9; ++k) a[r][k] -= f * a[col][k];
    }
  }
  std::array<double, 8> coefficients{};
  for (int i = 0; i < 8; ++i) coefficients[i] = f32(a[i][8] / a[i][i]);
  return coefficients;
}

Warp rotation_warp(int height, int width, double angle, bool expand, std::optional<std::array<double, 2>> center) {
  Warp warp;
  // torchvision: angle % 360 (Python's modulo: in [0, 360)); multiples of 90
  // without a center are exact rot90s (90 and 270 only when expanding or square).
  double a = std::fmod(angle, 360.0);
  if (a < 0) a += 360.0;
  if (!center) {
    if (a == 0) warp.rot90 = 0;
    if (a == 180) warp.rot90 = 2;
    if ((expand || height == width) && (a == 90 || a == 270)) warp.rot90 = a == 90 ? 1 : 3;
  }
  std::array<double, 2> center_f{0, 0};
  if (center) center_f = {(*center)[0] - width * 0.5, (*center)[1] - height * 0.5};
  const Matrix3 theta = affine_matrix(center_f, -a, {0, 0}, 1.0, {0, 0}, true);
  int ow = width, oh = height;
  if (warp.rot90 == 1 || warp.rot90 == 3) std::swap(ow, oh);
  if (expand && warp.rot90 < 0) std::tie(ow, oh) = affine_output_size(rounded(theta), width, height);
  warp.out_width = ow;
  warp.out_height = oh;
  warp.src_from_dst = centred_to_pixels(theta, width, height, ow, oh);
  for (int i = 0; i < 6; ++i) warp.grid[i] = static_cast<float>(theta[i]);

  // Boxes as torchvision's rotate_bounding_boxes: the forward matrix about
  // the center in pixel-edge coordinates, shifted by the expanded frame's
  // corner, clipped to its own expanded canvas.
  const std::array<double, 2> box_center = center ? *center : std::array<double, 2>{width * 0.5, height * 0.5};
  warp.boxes_forward = rounded(affine_matrix(box_center, -angle, {0, 0}, 1.0, {0, 0}, false));
  if (expand) {
    const Matrix3& f = warp.boxes_forward;
    const double corners[4][2] = {
        {0, 0}, {0, static_cast<double>(height)}, {1.0 * width, 1.0 * height}, {1.0 * width, 0}};
    double min_x = INFINITY, min_y = INFINITY;
    for (const auto& c : corners) {
      min_x = std::min(min_x, f32(f[0] * c[0] + f[1] * c[1] + f[2]));
      min_y = std::min(min_y, f32(f[3] * c[0] + f[4] * c[1] + f[5]));
    }
    warp.box_offset = {min_x, min_y};
    const auto [bw, bh] =
        affine_output_size(rounded(affine_matrix(box_center, -angle, {0, 0}, 1.0, {0, 0}, true)), width, height);
    // Boxes are clipped to the canvas torchvision computes for them, which
    // equals the image's but for rounding at a whole pixel.
    warp.box_canvas = {bw, bh};
  }
  return warp;
}

Warp affine_warp(int height, int width, double angle, std::array<double, 2> translate, double scale,
                 std::array<double, 2> shear, std::optional<std::array<double, 2>> center) {
  Warp warp;
  std::array<double, 2> center_f{0, 0};
  if (center) center_f = {(*center)[0] - width * 0.5, (*center)[1] - height * 0.5};
  const Matrix3 theta = affine_matrix(center_f, angle, translate, scale, shear, true);
  warp.out_width = width;
  warp.out_height = height;
  warp.src_from_dst = centred_to_pixels(theta, width, height, width, height);
  for (int i = 0; i < 6; ++i) warp.grid[i] = static_cast<float>(theta[i]);
  const std::array<double, 2> box_center = center ? *center : std::array<double, 2>{width * 0.5, height * 0.5};
  warp.boxes_forward = rounded(affine_matrix(box_center, angle, translate, scale, shear, false));
  return warp;
}

Warp perspective_warp(int height, int width, const std::array<double, 8>& c) {
  Warp warp;
  warp.out_width = width;
  warp.out_height = height;
  // torchvision samples at pixel centres (x + 0.5) in pixel-edge
  // coordinates, then maps back to pixel indices (- 0.5).
  const Matrix3 h{f32(c[0]), f32(c[1]), f32(c[2]), f32(c[3]), f32(c[4]), f32(c[5]), f32(c[6]), f32(c[7]), 1};
  warp.src_from_dst = multiply(multiply(translation(-0.5, -0.5), h), translation(0.5, 0.5));
  for (int i = 0; i < 8; ++i) warp.grid[i] = static_cast<float>(c[i]);
  warp.projective = true;
  // Boxes: torchvision's inverse coefficients (_compute_perspective_thetas).
  const double denom = c[0] * c[4] - c[1] * c[3];
  if (denom == 0) {
    throw Error(ErrorKind::kConfig, "perspective: the coefficients cannot be inverted to move bounding boxes");
  }
  warp.boxes_forward =
      rounded({(c[4] - c[5] * c[7]) / denom, (-c[1] + c[2] * c[7]) / denom, (c[1] * c[5] - c[2] * c[4]) / denom,
               (-c[3] + c[5] * c[6]) / denom, (c[0] - c[2] * c[6]) / denom, (-c[0] * c[5] + c[2] * c[3]) / denom,
               (-c[4] * c[6] + c[3] * c[7]) / denom, (-c[0] * c[7] + c[1] * c[6]) / denom, 1});
  return warp;
}

std::array<int, 2> apply_warp(const Warp& warp, Interpolation interpolation, const FillArg& fill, SampleImage& sample,
                              std::string_view what, const WarpWindow* window) {
  Image& img = sample.image;
  const int c = img.channels;
  int oh = warp.out_height, ow = warp.out_width;
  std::array<int, 2> origin{0, 0};
  if (window != nullptr && warp.rot90 < 0) {
    origin = {window->x, window->y};
    ow = window->width;
    oh = window->height;
  }
  sample.check_size(oh, ow, what);
  sample.spare.resize(static_cast<size_t>(oh) * static_cast<size_t>(ow) * static_cast<size_t>(c));
  const cv::Mat src(img.height, img.width, CV_8UC(c), img.pixels.data());
  cv::Mat dst(oh, ow, CV_8UC(c), sample.spare.data());
  if (warp.rot90 == 0) {
    src.copyTo(dst);
  } else if (warp.rot90 > 0) {
    // torch.rot90(k) turns anticlockwise.
    const int code =
        warp.rot90 == 1 ? cv::ROTATE_90_COUNTERCLOCKWISE : (warp.rot90 == 2 ? cv::ROTATE_180 : cv::ROTATE_90_CLOCKWISE);
    cv::rotate(src, dst, code);
  } else if (interpolation == Interpolation::kNearest) {
    // torch rounds the fill (a float blended into a float image) to the uint8 image.
    const uint8_t pixel_fill[4] = {static_cast<uint8_t>(std::nearbyint(fill.at(0))),
                                   static_cast<uint8_t>(std::nearbyint(fill.at(c == 1 ? 0 : 1))),
                                   static_cast<uint8_t>(std::nearbyint(fill.at(c == 1 ? 0 : 2))), 0};
    warp_nearest(img, warp, origin, ow, oh, pixel_fill, sample.spare.data());
  } else {
    const Matrix3 m = multiply(warp.src_from_dst, translation(origin[0], origin[1]));
    const int flags = cv::INTER_LINEAR | cv::WARP_INVERSE_MAP;
    const cv::Scalar border(fill.at(0), fill.at(c == 1 ? 0 : 1), fill.at(c == 1 ? 0 : 2));
    if (m[6] == 0 && m[7] == 0 && m[8] == 1) {
      const cv::Matx23d affine(m[0], m[1], m[2], m[3], m[4], m[5]);
      cv::warpAffine(src, dst, affine, dst.size(), flags, cv::BORDER_CONSTANT, border);
    } else {
      const cv::Matx33d projective(m.data());
      cv::warpPerspective(src, dst, projective, dst.size(), flags, cv::BORDER_CONSTANT, border);
    }
  }
  std::swap(img.pixels, sample.spare);
  img.height = oh;
  img.width = ow;
  warp_boxes(warp, sample.boxes);
  return origin;
}

std::unique_ptr<const TransformStep> make_random_rotation_step(const TransformParams& params) {
  TransformArgs args("RandomRotation", params);
  const std::array<double, 2> degrees = read_range(args, "degrees");
  const Interpolation interpolation = read_interpolation(args, Interpolation::kNearest);
  const bool expand = args.flag("expand", false);
  const auto center = read_center(args);
  FillArg fill = FillArg::read(args);
  args.finish();
  return std::make_unique<RandomRotationStep>(degrees, interpolation, expand, center, std::move(fill));
}

std::unique_ptr<const TransformStep> make_random_affine_step(const TransformParams& params) {
  TransformArgs args("RandomAffine", params);
  RandomAffineStep::Ranges r;
  r.degrees = read_range(args, "degrees");
  if (args.has("translate")) {
    const std::vector<double> t = args.numbers("translate", 2);
    for (const double v : t)
      args.check(v >= 0 && v <= 1, "translate values must be in [0, 1], got " + args.given("translate"));
    r.translate = std::array<double, 2>{t[0], t[1]};
  }
  if (args.has("scale")) {
    const std::array<double, 2> s = read_range(args, "scale");
    args.check(s[0] > 0, "scale values must be positive, got " + args.given("scale"));
    r.scale = s;
  }
  if (args.has("shear")) {
    r.shear = args.numbers("shear");
    args.check(r.shear.size() == 2 || r.shear.size() == 4, "shear must have 2 or 4 values, got " + args.given("shear"));
    read_range(args, "shear", r.shear.size());
  }
  const Interpolation interpolation = read_interpolation(args, Interpolation::kNearest);
  FillArg fill = FillArg::read(args);
  r.center = read_center(args);
  args.finish();
  return std::make_unique<RandomAffineStep>(std::move(r), interpolation, std::move(fill));
}

std::unique_ptr<const TransformStep> make_random_perspective_step(const TransformParams& params) {
  TransformArgs args("RandomPerspective", params);
  const double distortion = args.number("distortion_scale", 0.5);
  args.check(distortion >= 0 && distortion <= 1,
             "distortion_scale must be in [0, 1], got " + args.given("distortion_scale"));
  const double p = probability_arg(args, 0.5);
  const Interpolation interpolation = read_interpolation(args, Interpolation::kBilinear);
  FillArg fill = FillArg::read(args);
  args.finish();
  return std::make_unique<RandomPerspectiveStep>(distortion, p, interpolation, std::move(fill));
}

std::optional<Warp> draw_warp(const TransformStep& step, int height, int width, SampleRng& rng) {
  const WarpingStep* warp = step.kind() == StepKind::kImage ? step_as<ImageStep>(step).warping() : nullptr;
  if (warp == nullptr) return std::nullopt;
  return warp->draw(height, width, rng);
}

void rotate_function(const TransformParams& params, SampleImage& sample) {
  TransformArgs args("rotate", params);
  const double angle = args.number("angle");
  const Interpolation interpolation = read_interpolation(args, Interpolation::kNearest);
  const bool expand = args.flag("expand", false);
  const auto center = read_center(args);
  const FillArg fill = FillArg::read(args);
  args.finish();
  fill.check_channels("rotate", sample.image.channels);
  use_single_threaded_opencv();
  apply_warp(rotation_warp(sample.image.height, sample.image.width, angle, expand, center), interpolation, fill, sample,
             "rotate");
}

void affine_function(const TransformParams& params, SampleImage& sample) {
  TransformArgs args("affine", params);
  const double angle = args.number("angle");
  const std::vector<double> translate = args.numbers("translate", 2);
  const double scale = args.number("scale");
  args.check(scale > 0, "scale must be positive, got " + args.given("scale"));
  const std::vector<double> shear = args.numbers("shear", 2);
  for (const double v : translate) args.check(std::isfinite(v), "translate must be finite");
  for (const double v : shear) args.check(std::isfinite(v), "shear must be finite");
  const Interpolation interpolation = read_interpolation(args, Interpolation::kNearest);
  const FillArg fill = FillArg::read(args);
  const auto center = read_center(args);
  args.finish();
  fill.check_channels("affine", sample.image.channels);
  use_single_threaded_opencv();
  apply_warp(affine_warp(sample.image.height, sample.image.width, angle, {translate[0], translate[1]}, scale,
                         {shear[0], shear[1]}, center),
             interpolation, fill, sample, "affine");
}

void perspective_function(const TransformParams& params, SampleImage& sample) {
  TransformArgs args("perspective", params);
  std::array<double, 8> coefficients{};
  if (args.has("coefficients")) {
    args.check(!args.has("startpoints") && !args.has("endpoints"),
               "give either startpoints and endpoints or coefficients, not both");
    const std::vector<double> c = args.numbers("coefficients", 8);
    for (size_t i = 0; i < 8; ++i) {
      args.check(std::isfinite(c[i]), "coefficients must be finite");
      coefficients[i] = c[i];
    }
  } else {
    args.check(args.has("startpoints") && args.has("endpoints"),
               "give startpoints and endpoints (four points each) or coefficients");
    const auto start = read_points(args, "startpoints");
    const auto end = read_points(args, "endpoints");
    coefficients = perspective_coefficients(start, end);
  }
  const Interpolation interpolation = read_interpolation(args, Interpolation::kBilinear);
  const FillArg fill = FillArg::read(args);
  args.finish();
  fill.check_channels("perspective", sample.image.channels);
  use_single_threaded_opencv();
  apply_warp(perspective_warp(sample.image.height, sample.image.width, coefficients), interpolation, fill, sample,
             "perspective");
}

}  // namespace conveyor
