#include "conveyor/ops/transforms/color.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include "conveyor/core/error.h"
#include "conveyor/core/number_format.h"
#include "conveyor/ops/transforms/image_step.h"
#include "conveyor/ops/transforms/torch_arithmetic.h"
#include "conveyor/ops/transforms/vector_clones.h"

#if defined(__GNUC__) && defined(__x86_64__)
#include <immintrin.h>
#define CONVEYOR_X86_INTRINSICS 1
#endif

namespace conveyor {

namespace {

using Lut = std::array<uint8_t, 256>;

// clamp_(0, 255) of a float32 value. NaN (a factor beyond float32, e.g.
// 0 * inf) becomes 0, as torch's conversion gives on x86, instead of an
// undefined conversion: std::max(0, NaN) is 0.
inline float clamp_255(float v) { return std::min(std::max(0.0f, v), 255.0f); }

// torchvision's uint8 result of a float32 value: clamp_(0, 255) then .to(uint8),
// which truncates.
inline uint8_t clamp_to_u8(float v) { return static_cast<uint8_t>(static_cast<int32_t>(clamp_255(v))); }

// floor of v2's rgb_to_grayscale on uint8, which computes in float32
// r.mul(0.2989).add_(g, alpha=0.587).add_(b, alpha=0.114) (each add_ a fused
// multiply-add), in integers: the float32 weights in 24-bit fixed point give
// the same floor for every (r, g, b) but three, where the float32 sum rounds
// down to just below the integer the exact sum passes (checked exhaustively
// by color_test's GrayscaleMatchesTheFloat32FormulaForEveryColour). At most
// 255 * 2^24, so uint32 arithmetic, which vectorises.
inline uint32_t gray_floor(uint32_t r, uint32_t g, uint32_t b) {
  const uint32_t v = (r * 5014710u + g * 9848226u + b * 1912603u) >> 24;
  const uint32_t rgb = r << 16 | g << 8 | b;
  return v - static_cast<uint32_t>((rgb == 0xFA09E4u) | (rgb == 0xFA0D92u) | (rgb == 0xFA2FC7u));
}

void apply_lut(Image& image, const Lut& lut) {
  for (uint8_t& v : image.pixels) v = lut[v];
}

// _blend(image1, image2, ratio) = image1.mul(ratio).add_(image2, alpha=1 - ratio),
// clamped and truncated; ratio and 1 - ratio as torch passes them (the latter
// computed in double, then float32).
struct Blend {
  float ratio, alpha;
  explicit Blend(double r) : ratio(static_cast<float>(r)), alpha(static_cast<float>(1.0 - r)) {}
  uint8_t operator()(float x, float other) const { return clamp_to_u8(fused_multiply_add(other, alpha, x * ratio)); }
};

std::string text(double v) { return format_shortest(v); }

}  // namespace

CONVEYOR_VECTOR_CLONES void adjust_brightness(Image& image, double factor) {
  // Arithmetic rather than a table: the same float32 values, and the loop
  // vectorises (factor >= 0, so only the upper clamp can act). Above 256
  // every non-zero value saturates; the cap keeps 0 * factor at 0.
  const float f = static_cast<float>(std::min(factor, 256.0));
  uint8_t* px = image.pixels.data();
  const size_t n = image.pixels.size();
  for (size_t i = 0; i < n; ++i) {
    px[i] = static_cast<uint8_t>(static_cast<int32_t>(std::min(static_cast<float>(px[i]) * f, 255.0f)));
  }
}

namespace {

// float32 x >= 0 (and < 2^31) without its fraction: fmod(x, 1) is x - whole(x)
// exactly, floor(x) is whole(x). An int conversion, so that loops vectorise.
inline float whole(float x) { return static_cast<float>(static_cast<int32_t>(x)); }

// adjust_hue on `n` pixels given as three float32 planes (values 0..255),
// rewritten in place: to_dtype_image (x * float32(1 / 255)), torchvision's
// _rgb_to_hsv and _hsv_to_rgb operation by operation (so the float32
// rounding is the same), and back ((x * 255.999) truncated); written without
// branches so that the compiler vectorises it.
void hue_planes(float* __restrict r_plane, float* __restrict g_plane, float* __restrict b_plane, int n, float hue,
                float inv255, float to_u8) {
  const float sixth = static_cast<float>(1.0 / 6.0);
  for (int i = 0; i < n; ++i) {
    const float r = r_plane[i] * inv255, g = g_plane[i] * inv255, b = b_plane[i] * inv255;
    const float maxc = std::max(std::max(r, g), b);
    const float minc = std::min(std::min(r, g), b);
    const bool eqc = maxc == minc;
    const float range = maxc - minc;
    const float s = range / (eqc ? 1.0f : maxc);
    const float divisor = eqc ? 1.0f : range;
    const float rc = (maxc - r) / divisor, gc = (maxc - g) / divisor, bc = (maxc - b) / divisor;
    const bool max_is_not_r = maxc != r, max_is_g = maxc == g;
    // Every candidate computed, then selected (no conditional arithmetic,
    // which the compiler would not vectorise).
    const float hr_value = bc - gc, hg_value = (rc + 2.0f) - bc, hb_value = (gc + 4.0f) - rc;
    const float hr = max_is_not_r ? 0.0f : hr_value;
    const float hg = (max_is_g & max_is_not_r) ? hg_value : 0.0f;
    const float hb = (max_is_not_r & !max_is_g) ? hb_value : 0.0f;
    // h.mul_(1 / 6).add_(1).fmod_(1): the sum is >= 0 (h >= -1).
    const float shifted = (hr + hg + hb) * sixth + 1.0f;
    float h = shifted - whole(shifted);
    // h.add_(hue_factor).remainder_(1): h + hue is in [-0.5, 1.5).
    const float moved = h + hue;
    const float frac = moved - whole(moved), wrapped = frac + 1.0f;
    h = moved >= 0 ? frac : wrapped;
    const float v = maxc;

    const float h6 = h * 6.0f;
    const float fi = whole(h6);
    const float f = h6 - fi;
    const float fi_wrapped = fi - 6.0f;
    const float sector = fi >= 6.0f ? fi_wrapped : fi;  // h may round up to 1.0
    const float sxf = s * f;
    const float one_minus_s = 1.0f - s;
    const float q = std::min(std::max((1.0f - sxf) * v, 0.0f), 1.0f);
    const float t = std::min(std::max((sxf + one_minus_s) * v, 0.0f), 1.0f);
    const float p = std::min(std::max(one_minus_s * v, 0.0f), 1.0f);
    // torchvision's vpqt table: r = v q p p t v, g = t v v q p p, b = p p t v v q
    // (one select at a time, which the compiler turns into vector blends).
    const bool s0 = sector == 0, s1 = sector == 1, s2 = sector == 2, s3 = sector == 3, s4 = sector == 4;
    float out = t;
    out = (s2 | s3) ? p : out;
    out = s1 ? q : out;
    r_plane[i] = whole(((s0 | !(s1 | s2 | s3 | s4)) ? v : out) * to_u8);
    out = p;
    out = s3 ? q : out;
    out = (s1 | s2) ? v : out;
    g_plane[i] = whole((s0 ? t : out) * to_u8);
    out = q;
    out = (s3 | s4) ? v : out;
    out = s2 ? t : out;
    b_plane[i] = whole(((s0 | s1) ? p : out) * to_u8);
  }
}

#if defined(CONVEYOR_X86_INTRINSICS)
// whole() on 8 floats.
__attribute__((target("avx2"))) inline __m256 whole_avx2(__m256 x) {
  return _mm256_cvtepi32_ps(_mm256_cvttps_epi32(x));
}

// min(max(x, 0), 1) on 8 floats (max_ps gives +0 where std::max keeps -0:
// the same byte once scaled and truncated).
__attribute__((target("avx2"))) inline __m256 clamp_unit_avx2(__m256 x) {
  return _mm256_min_ps(_mm256_max_ps(x, _mm256_setzero_ps()), _mm256_set1_ps(1.0f));
}

// hue_planes on 8 pixels per step with AVX2 (GCC 12 vectorises hue_planes
// for SSE2 only): the same float32 operations in the same order, each
// select a blend, so the same values. Returns the pixels done; hue_planes
// does the rest.
__attribute__((target("avx2"))) int hue_planes_avx2(float* __restrict r_plane, float* __restrict g_plane,
                                                    float* __restrict b_plane, int n, float hue, float inv255,
                                                    float to_u8) {
  const __m256 sixth = _mm256_set1_ps(static_cast<float>(1.0 / 6.0));
  const __m256 scale_in = _mm256_set1_ps(inv255), scale_out = _mm256_set1_ps(to_u8), shift = _mm256_set1_ps(hue);
  const __m256 zero = _mm256_setzero_ps(), one = _mm256_set1_ps(1.0f), two = _mm256_set1_ps(2.0f),
               three = _mm256_set1_ps(3.0f), four = _mm256_set1_ps(4.0f), six = _mm256_set1_ps(6.0f);
  const __m256 all_ones = _mm256_castsi256_ps(_mm256_set1_epi32(-1));
  int i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256 r = _mm256_mul_ps(_mm256_loadu_ps(r_plane + i), scale_in);
    const __m256 g = _mm256_mul_ps(_mm256_loadu_ps(g_plane + i), scale_in);
    const __m256 b = _mm256_mul_ps(_mm256_loadu_ps(b_plane + i), scale_in);
    const __m256 maxc = _mm256_max_ps(_mm256_max_ps(r, g), b);
    const __m256 minc = _mm256_min_ps(_mm256_min_ps(r, g), b);
    const __m256 eqc = _mm256_cmp_ps(maxc, minc, _CMP_EQ_OQ);
    const __m256 range = _mm256_sub_ps(maxc, minc);
    const __m256 s = _mm256_div_ps(range, _mm256_blendv_ps(maxc, one, eqc));
    const __m256 divisor = _mm256_blendv_ps(range, one, eqc);
    const __m256 rc = _mm256_div_ps(_mm256_sub_ps(maxc, r), divisor);
    const __m256 gc = _mm256_div_ps(_mm256_sub_ps(maxc, g), divisor);
    const __m256 bc = _mm256_div_ps(_mm256_sub_ps(maxc, b), divisor);
    const __m256 max_is_not_r = _mm256_cmp_ps(maxc, r, _CMP_NEQ_OQ);
    const __m256 max_is_g = _mm256_cmp_ps(maxc, g, _CMP_EQ_OQ);
    const __m256 hr = _mm256_andnot_ps(max_is_not_r, _mm256_sub_ps(bc, gc));
    const __m256 hg = _mm256_and_ps(_mm256_and_ps(max_is_g, max_is_not_r), _mm256_sub_ps(_mm256_add_ps(rc, two), bc));
    const __m256 hb =
        _mm256_and_ps(_mm256_andnot_ps(max_is_g, max_is_not_r), _mm256_sub_ps(_mm256_add_ps(gc, four), rc));
    const __m256 shifted = _mm256_add_ps(_mm256_mul_ps(_mm256_add_ps(_mm256_add_ps(hr, hg), hb), sixth), one);
    const __m256 h0 = _mm256_sub_ps(shifted, whole_avx2(shifted));
    const __m256 moved = _mm256_add_ps(h0, shift);
    const __m256 frac = _mm256_sub_ps(moved, whole_avx2(moved));
    const __m256 h = _mm256_blendv_ps(_mm256_add_ps(frac, one), frac, _mm256_cmp_ps(moved, zero, _CMP_GE_OQ));
    const __m256 v = maxc;

    const __m256 h6 = _mm256_mul_ps(h, six);
    const __m256 fi = whole_avx2(h6);
    const __m256 f = _mm256_sub_ps(h6, fi);
    const __m256 sector = _mm256_blendv_ps(fi, _mm256_sub_ps(fi, six), _mm256_cmp_ps(fi, six, _CMP_GE_OQ));
    const __m256 sxf = _mm256_mul_ps(s, f);
    const __m256 one_minus_s = _mm256_sub_ps(one, s);
    const __m256 q = clamp_unit_avx2(_mm256_mul_ps(_mm256_sub_ps(one, sxf), v));
    const __m256 t = clamp_unit_avx2(_mm256_mul_ps(_mm256_add_ps(sxf, one_minus_s), v));
    const __m256 p = clamp_unit_avx2(_mm256_mul_ps(one_minus_s, v));
    const __m256 s0 = _mm256_cmp_ps(sector, zero, _CMP_EQ_OQ), s1 = _mm256_cmp_ps(sector, one, _CMP_EQ_OQ),
                 s2 = _mm256_cmp_ps(sector, two, _CMP_EQ_OQ), s3 = _mm256_cmp_ps(sector, three, _CMP_EQ_OQ),
                 s4 = _mm256_cmp_ps(sector, four, _CMP_EQ_OQ);
    // torchvision's vpqt table, as hue_planes selects it.
    __m256 out = _mm256_blendv_ps(t, p, _mm256_or_ps(s2, s3));
    out = _mm256_blendv_ps(out, q, s1);
    const __m256 none_of_1_to_4 = _mm256_andnot_ps(_mm256_or_ps(_mm256_or_ps(s1, s2), _mm256_or_ps(s3, s4)), all_ones);
    _mm256_storeu_ps(r_plane + i,
                     whole_avx2(_mm256_mul_ps(_mm256_blendv_ps(out, v, _mm256_or_ps(s0, none_of_1_to_4)), scale_out)));
    out = _mm256_blendv_ps(p, q, s3);
    out = _mm256_blendv_ps(out, v, _mm256_or_ps(s1, s2));
    _mm256_storeu_ps(g_plane + i, whole_avx2(_mm256_mul_ps(_mm256_blendv_ps(out, t, s0), scale_out)));
    out = _mm256_blendv_ps(q, v, _mm256_or_ps(s3, s4));
    out = _mm256_blendv_ps(out, t, s2);
    _mm256_storeu_ps(b_plane + i, whole_avx2(_mm256_mul_ps(_mm256_blendv_ps(out, p, _mm256_or_ps(s0, s1)), scale_out)));
  }
  return i;
}
#endif

// One row of RGB values as three float32 planes, and back (truncated).
CONVEYOR_VECTOR_CLONES void to_planes(const uint8_t* __restrict row, int w, float* __restrict r, float* __restrict g,
                                      float* __restrict b) {
  for (int x = 0; x < w; ++x) {
    r[x] = row[3 * x];
    g[x] = row[3 * x + 1];
    b[x] = row[3 * x + 2];
  }
}

CONVEYOR_VECTOR_CLONES void from_planes(const float* __restrict r, const float* __restrict g, const float* __restrict b,
                                        int w, uint8_t* __restrict row) {
  for (int x = 0; x < w; ++x) {
    row[3 * x] = static_cast<uint8_t>(static_cast<int32_t>(r[x]));
    row[3 * x + 1] = static_cast<uint8_t>(static_cast<int32_t>(g[x]));
    row[3 * x + 2] = static_cast<uint8_t>(static_cast<int32_t>(b[x]));
  }
}

// adjust_hue on each row of a 3-channel image, as three float32 planes of
// the values (0..255) that hue_planes rewrites with the results in [0, 255].
// Planes rather than interleaved pixels so that the per-pixel arithmetic
// vectorises; thread-local, so no allocation once warm. With AVX2,
// hue_planes_avx2 does 8 pixels per step and hue_planes the rest.
void hue_rows(Image& image, float hue) {
#if defined(CONVEYOR_X86_INTRINSICS)
  static const bool avx2 = __builtin_cpu_supports("avx2");
#endif
  const float inv255 = static_cast<float>(1.0 / 255);
  const float to_u8 = static_cast<float>(255 + 1.0 - 1e-3);
  thread_local std::vector<float> planes;
  const int w = image.width;
  planes.resize(static_cast<size_t>(w) * 3);
  float* r = planes.data();
  float* g = r + w;
  float* b = g + w;
  for (int y = 0; y < image.height; ++y) {
    uint8_t* row = image.pixels.data() + static_cast<size_t>(y) * w * 3;
    to_planes(row, w, r, g, b);
    int done = 0;
#if defined(CONVEYOR_X86_INTRINSICS)
    if (avx2) done = hue_planes_avx2(r, g, b, w, hue, inv255, to_u8);
#endif
    hue_planes(r + done, g + done, b + done, w - done, hue, inv255, to_u8);
    from_planes(r, g, b, w, row);
  }
}

// The sum of the floored grays of `n` RGB pixels (exact: integers).
CONVEYOR_VECTOR_CLONES uint64_t gray_sum(const uint8_t* px, size_t n) {
  uint64_t sum = 0;
  for (size_t i = 0; i < n; ++i) sum += gray_floor(px[3 * i], px[3 * i + 1], px[3 * i + 2]);
  return sum;
}

// The floored grays of `n` RGB pixels, in place, as 1 or 3 (equal) channels:
// front to back, pixel i is written at or before where it is read.
CONVEYOR_VECTOR_CLONES void grays_in_place(uint8_t* px, size_t n, int channels) {
  if (channels == 3) {
    for (size_t i = 0; i < n; ++i) {
      const auto l = static_cast<uint8_t>(gray_floor(px[3 * i], px[3 * i + 1], px[3 * i + 2]));
      px[3 * i] = px[3 * i + 1] = px[3 * i + 2] = l;
    }
  } else {
    for (size_t i = 0; i < n; ++i) px[i] = static_cast<uint8_t>(gray_floor(px[3 * i], px[3 * i + 1], px[3 * i + 2]));
  }
}

// adjust_saturation on `n` RGB pixels: each value blended with its pixel's
// floored gray. One pass; the fused multiply-add is one instruction in the
// FMA clone.
CONVEYOR_FMA_CLONES void saturate(uint8_t* px, size_t n, Blend blend) {
  for (size_t i = 0; i < n; ++i, px += 3) {
    const uint32_t r = px[0], g = px[1], b = px[2];
    const auto gray = static_cast<float>(gray_floor(r, g, b));
    px[0] = blend(static_cast<float>(r), gray);
    px[1] = blend(static_cast<float>(g), gray);
    px[2] = blend(static_cast<float>(b), gray);
  }
}

}  // namespace

namespace {

// adjust_contrast's table (the same on every channel) for `image`.
Lut contrast_lut(const Image& image, double factor) {
  // The mean of the grayscale image (floored per pixel on 3 channels, as
  // torchvision does for integer images); the pixel values are integers, so
  // the sum is exact in int64.
  Lut lut;
  const size_t n = static_cast<size_t>(image.height) * image.width;
  if (n == 0) {
    for (int v = 0; v < 256; ++v) lut[v] = static_cast<uint8_t>(v);
    return lut;
  }
  uint64_t sum = 0;
  const uint8_t* px = image.pixels.data();
  if (image.channels == 3) {
    sum = gray_sum(px, n);
  } else {
    for (size_t i = 0; i < n; ++i) sum += px[i];
  }
  const float mean = static_cast<float>(static_cast<double>(sum) / static_cast<double>(n));
  const Blend blend(factor);
  for (int v = 0; v < 256; ++v) lut[v] = blend(static_cast<float>(v), mean);
  return lut;
}

}  // namespace

void adjust_contrast(Image& image, double factor) { apply_lut(image, contrast_lut(image, factor)); }

ChannelTables contrast_tables(const Image& image, double factor) {
  const Lut lut = contrast_lut(image, factor);
  return {lut, lut, lut};
}

#if defined(CONVEYOR_X86_INTRINSICS)
// Blend's arithmetic on 8 int32 values 0..255 and their grays: the results
// as int32.
__attribute__((target("avx2,fma"))) inline __m256i blend_avx2(__m256i value, __m256 gray, __m256 ratio, __m256 alpha) {
  const __m256 v = _mm256_fmadd_ps(gray, alpha, _mm256_mul_ps(_mm256_cvtepi32_ps(value), ratio));
  // max(v, 0) gives 0 for NaN, as clamp_255.
  return _mm256_cvttps_epi32(_mm256_min_ps(_mm256_max_ps(v, _mm256_setzero_ps()), _mm256_set1_ps(255.0f)));
}

// saturate's arithmetic on 8 pixels per step, in place, with AVX2 and FMA
// (the compiler's own vectorisation of the interleaved loop spills): the
// same integer gray and the same float32 operations, so the same bytes.
// Each step reads 32 bytes and writes 24. Returns the pixels done.
__attribute__((target("avx2,fma"))) size_t saturate_avx2(uint8_t* px, size_t n, Blend blend) {
  // Lane k of the 128-bit halves: the bytes of pixels 4h .. 4h + 3.
  const __m256i spread = _mm256_setr_epi32(0, 1, 2, 2, 3, 4, 5, 5);
  const __m256i take_r = _mm256_setr_epi8(0, -1, -1, -1, 3, -1, -1, -1, 6, -1, -1, -1, 9, -1, -1, -1, 0, -1, -1, -1, 3,
                                          -1, -1, -1, 6, -1, -1, -1, 9, -1, -1, -1);
  const __m256i take_g = _mm256_add_epi32(take_r, _mm256_set1_epi32(1));
  const __m256i take_b = _mm256_add_epi32(take_r, _mm256_set1_epi32(2));
  const __m256i compact = _mm256_setr_epi8(0, 1, 2, 4, 5, 6, 8, 9, 10, 12, 13, 14, -1, -1, -1, -1, 0, 1, 2, 4, 5, 6, 8,
                                           9, 10, 12, 13, 14, -1, -1, -1, -1);
  const __m256i gather = _mm256_setr_epi32(0, 1, 2, 4, 5, 6, 3, 7);
  const __m256i wr = _mm256_set1_epi32(5014710), wg = _mm256_set1_epi32(9848226), wb = _mm256_set1_epi32(1912603);
  const __m256i odd0 = _mm256_set1_epi32(0xFA09E4), odd1 = _mm256_set1_epi32(0xFA0D92),
                odd2 = _mm256_set1_epi32(0xFA2FC7);
  const __m256 ratio = _mm256_set1_ps(blend.ratio), alpha = _mm256_set1_ps(blend.alpha);
  size_t i = 0;
  for (; i + 11 <= n; i += 8) {  // Bytes 3i .. 3i + 31 are inside.
    uint8_t* p = px + 3 * i;
    const __m256i raw = _mm256_permutevar8x32_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)), spread);
    const __m256i r = _mm256_shuffle_epi8(raw, take_r), g = _mm256_shuffle_epi8(raw, take_g),
                  b = _mm256_shuffle_epi8(raw, take_b);
    __m256i gray =
        _mm256_srli_epi32(_mm256_add_epi32(_mm256_add_epi32(_mm256_mullo_epi32(r, wr), _mm256_mullo_epi32(g, wg)),
                                           _mm256_mullo_epi32(b, wb)),
                          24);
    const __m256i rgb = _mm256_or_si256(_mm256_or_si256(_mm256_slli_epi32(r, 16), _mm256_slli_epi32(g, 8)), b);
    gray = _mm256_add_epi32(gray, _mm256_cmpeq_epi32(rgb, odd0));  // -1 where equal: gray_floor's three.
    gray = _mm256_add_epi32(gray, _mm256_cmpeq_epi32(rgb, odd1));
    gray = _mm256_add_epi32(gray, _mm256_cmpeq_epi32(rgb, odd2));
    const __m256 grayf = _mm256_cvtepi32_ps(gray);
    const __m256i out = _mm256_or_si256(
        _mm256_or_si256(blend_avx2(r, grayf, ratio, alpha), _mm256_slli_epi32(blend_avx2(g, grayf, ratio, alpha), 8)),
        _mm256_slli_epi32(blend_avx2(b, grayf, ratio, alpha), 16));
    const __m256i bytes = _mm256_permutevar8x32_epi32(_mm256_shuffle_epi8(out, compact), gather);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(p), _mm256_castsi256_si128(bytes));
    _mm_storel_epi64(reinterpret_cast<__m128i*>(p + 16), _mm256_extracti128_si256(bytes, 1));
  }
  return i;
}
#endif

void adjust_saturation(Image& image, double factor) {
  if (image.channels != 3) return;  // torchvision: "Match PIL behaviour".
  const Blend blend(factor);
  const size_t n = static_cast<size_t>(image.height) * image.width;
  uint8_t* px = image.pixels.data();
  size_t done = 0;
#if defined(CONVEYOR_X86_INTRINSICS)
  static const bool avx2_fma = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  if (avx2_fma) done = saturate_avx2(px, n, blend);
#endif
  saturate(px + 3 * done, n - done, blend);
}

void adjust_hue(Image& image, double hue_factor) {
  if (image.channels != 3) return;  // torchvision: "Match PIL behaviour".
  hue_rows(image, static_cast<float>(hue_factor));
}

void rgb_to_grayscale(SampleImage& sample, int num_output_channels) {
  Image& image = sample.image;
  const size_t n = static_cast<size_t>(image.height) * image.width;
  if (image.channels == 3) {
    grays_in_place(image.pixels.data(), n, num_output_channels);
    if (num_output_channels == 1) {
      image.pixels.resize(n);
      image.channels = 1;
    }
  } else if (num_output_channels == 3) {
    sample.spare.resize(n * 3);
    for (size_t i = 0; i < n; ++i) {
      sample.spare[3 * i] = sample.spare[3 * i + 1] = sample.spare[3 * i + 2] = image.pixels[i];
    }
    std::swap(image.pixels, sample.spare);
    image.channels = 3;
  }
}

void invert(Image& image) {
  for (uint8_t& v : image.pixels) v = static_cast<uint8_t>(255 - v);
}

void posterize(Image& image, int bits) {
  if (bits >= 8) return;
  const auto mask = static_cast<uint8_t>(((1 << bits) - 1) << (8 - bits));
  for (uint8_t& v : image.pixels) v &= mask;
}

void solarize(Image& image, double threshold) {
  // `image >= threshold` compares in float32 (the uint8 image promoted): for
  // an integer v that is v >= ceil(float32(threshold)), an integer compare
  // that vectorises.
  const float t = std::ceil(static_cast<float>(threshold));
  if (t > 255) return;
  // Compared before the conversion: a float below int's range has no int (UB).
  const int cut = t <= 0 ? 0 : static_cast<int>(t);
  uint8_t* px = image.pixels.data();
  const size_t n = image.pixels.size();
  for (size_t i = 0; i < n; ++i) px[i] = px[i] >= cut ? static_cast<uint8_t>(255 - px[i]) : px[i];
}

ColorJitterParams sample_color_jitter(const ColorJitterRanges& ranges, SampleRng& rng) {
  ColorJitterParams params;
  // torch.randperm(4): any uniform permutation (Fisher-Yates).
  for (int i = 3; i > 0; --i) std::swap(params.order[i], params.order[rng.below(static_cast<uint64_t>(i) + 1)]);
  const auto draw = [&rng](const std::optional<std::array<double, 2>>& range) -> std::optional<double> {
    if (!range) return std::nullopt;
    return rng.uniform((*range)[0], (*range)[1]);
  };
  params.brightness = draw(ranges.brightness);
  params.contrast = draw(ranges.contrast);
  params.saturation = draw(ranges.saturation);
  params.hue = draw(ranges.hue);
  return params;
}

void apply_color_jitter(Image& image, const ColorJitterParams& params) {
  for (int op : params.order) {
    if (op == 0 && params.brightness) adjust_brightness(image, *params.brightness);
    if (op == 1 && params.contrast) adjust_contrast(image, *params.contrast);
    if (op == 2 && params.saturation) adjust_saturation(image, *params.saturation);
    if (op == 3 && params.hue) adjust_hue(image, *params.hue);
  }
}

namespace {

// ColorJitter's range: absent, or (lo, hi) within `bound` and increasing; a
// range that is exactly (center, center) is absent (torchvision's _check_input).
std::optional<std::array<double, 2>> jitter_range(TransformArgs& args, std::string_view arg, double center,
                                                  double lo_bound, double hi_bound) {
  if (!args.has(arg)) return std::nullopt;
  const std::vector<double> v = args.numbers(arg, 2);
  args.check(std::isfinite(v[0]) && std::isfinite(v[1]) && lo_bound <= v[0] && v[0] <= v[1] && v[1] <= hi_bound,
             std::string(arg) + " must be increasing (min, max) within [" + text(lo_bound) + ", " +
                 (std::isinf(hi_bound) ? std::string("inf") : text(hi_bound)) + "], got (" + text(v[0]) + ", " +
                 text(v[1]) + ")");
  if (v[0] == center && v[1] == center) return std::nullopt;
  return std::array<double, 2>{v[0], v[1]};
}

double non_negative_factor(TransformArgs& args, std::string_view arg) {
  const double f = args.number(arg);
  args.check(f >= 0, std::string(arg) + " must be non-negative, got " + text(f));
  return f;
}

int bits_arg(TransformArgs& args) {
  const double bits = args.number("bits");
  args.check(bits == std::floor(bits) && bits >= 0 && bits <= 8,
             "bits must be an integer in [0, 8], got " + text(bits));
  return static_cast<int>(bits);
}

double threshold_arg(TransformArgs& args) {
  const double threshold = args.number("threshold");
  args.check(threshold <= 255, "threshold must be at most 255 (the uint8 maximum), got " + text(threshold));
  return threshold;
}

int output_channels_arg(TransformArgs& args) {
  const double n = args.number("num_output_channels", 1);
  args.check(n == 1 || n == 3, "num_output_channels must be 1 or 3, got " + text(n));
  return static_cast<int>(n);
}

// The brightness / contrast / saturation functions differ only in their names and kernel.
void factor_function(std::string_view op, std::string_view arg, void (*adjust)(Image&, double),
                     const TransformParams& params, SampleImage& sample) {
  TransformArgs args(std::string(op), params);
  const double factor = non_negative_factor(args, arg);
  args.finish();
  check_color_channels(op, sample.image);
  adjust(sample.image, factor);
}

}  // namespace

std::unique_ptr<const TransformStep> make_color_jitter_step(const TransformParams& params) {
  TransformArgs args("ColorJitter", params);
  constexpr double kInf = std::numeric_limits<double>::infinity();
  ColorJitterRanges ranges;
  ranges.brightness = jitter_range(args, "brightness", 1, 0, kInf);
  ranges.contrast = jitter_range(args, "contrast", 1, 0, kInf);
  ranges.saturation = jitter_range(args, "saturation", 1, 0, kInf);
  ranges.hue = jitter_range(args, "hue", 0, -0.5, 0.5);
  args.finish();
  return make_image_step(std::nullopt, [ranges](SampleImage& sample, SampleRng& rng) {
    apply_color_jitter(sample.image, sample_color_jitter(ranges, rng));
  });
}

std::unique_ptr<const TransformStep> make_grayscale_step(const TransformParams& params) {
  TransformArgs args("Grayscale", params);
  const int channels = output_channels_arg(args);
  args.finish();
  // The pipeline's output channel count is fixed (channels=), so the output
  // of Grayscale must have it: no silent difference from torchvision's shape.
  return make_image_step(
      std::nullopt, [channels](SampleImage& sample, SampleRng& /*rng*/) { rgb_to_grayscale(sample, channels); },
      [channels](const ChainPlan& chain) {
        check_config(chain.channels == channels,
                     "Grayscale: num_output_channels=" + std::to_string(channels) + " gives " +
                         std::to_string(channels) + "-channel images but the pipeline outputs " +
                         std::to_string(chain.channels) + " channel(s); pass channels=" + std::to_string(channels) +
                         " to the loader (or num_output_channels=" + std::to_string(chain.channels) + ")");
      });
}

std::unique_ptr<const TransformStep> make_random_grayscale_step(const TransformParams& params) {
  TransformArgs args("RandomGrayscale", params);
  const double p = probability_arg(args, 0.1);
  args.finish();
  // The output keeps the input's channel count (torchvision).
  return make_image_step(
      p, [](SampleImage& sample, SampleRng& /*rng*/) { rgb_to_grayscale(sample, sample.image.channels); });
}

std::unique_ptr<const TransformStep> make_random_invert_step(const TransformParams& params) {
  TransformArgs args("RandomInvert", params);
  const double p = probability_arg(args, 0.5);
  args.finish();
  return make_image_step(p, [](SampleImage& sample, SampleRng& /*rng*/) { invert(sample.image); });
}

std::unique_ptr<const TransformStep> make_random_posterize_step(const TransformParams& params) {
  TransformArgs args("RandomPosterize", params);
  const int bits = bits_arg(args);
  const double p = probability_arg(args, 0.5);
  args.finish();
  return make_image_step(p, [bits](SampleImage& sample, SampleRng& /*rng*/) { posterize(sample.image, bits); });
}

std::unique_ptr<const TransformStep> make_random_solarize_step(const TransformParams& params) {
  TransformArgs args("RandomSolarize", params);
  const double threshold = threshold_arg(args);
  const double p = probability_arg(args, 0.5);
  args.finish();
  return make_image_step(p,
                         [threshold](SampleImage& sample, SampleRng& /*rng*/) { solarize(sample.image, threshold); });
}

void adjust_brightness_function(const TransformParams& params, SampleImage& sample) {
  factor_function("adjust_brightness", "brightness_factor", adjust_brightness, params, sample);
}

void adjust_contrast_function(const TransformParams& params, SampleImage& sample) {
  factor_function("adjust_contrast", "contrast_factor", adjust_contrast, params, sample);
}

void adjust_saturation_function(const TransformParams& params, SampleImage& sample) {
  factor_function("adjust_saturation", "saturation_factor", adjust_saturation, params, sample);
}

void adjust_hue_function(const TransformParams& params, SampleImage& sample) {
  TransformArgs args("adjust_hue", params);
  const double hue = args.number("hue_factor");
  args.check(hue >= -0.5 && hue <= 0.5, "hue_factor must be in [-0.5, 0.5], got " + text(hue));
  args.finish();
  check_color_channels("adjust_hue", sample.image);
  adjust_hue(sample.image, hue);
}

void rgb_to_grayscale_function(const TransformParams& params, SampleImage& sample) {
  TransformArgs args("rgb_to_grayscale", params);
  const int channels = output_channels_arg(args);
  args.finish();
  check_color_channels("rgb_to_grayscale", sample.image);
  rgb_to_grayscale(sample, channels);
}

void invert_function(const TransformParams& params, SampleImage& sample) {
  TransformArgs args("invert", params);
  args.finish();
  check_color_channels("invert", sample.image);
  invert(sample.image);
}

void posterize_function(const TransformParams& params, SampleImage& sample) {
  TransformArgs args("posterize", params);
  const int bits = bits_arg(args);
  args.finish();
  check_color_channels("posterize", sample.image);
  posterize(sample.image, bits);
}

void solarize_function(const TransformParams& params, SampleImage& sample) {
  TransformArgs args("solarize", params);
  const double threshold = threshold_arg(args);
  args.finish();
  check_color_channels("solarize", sample.image);
  solarize(sample.image, threshold);
}

}  // namespace conveyor
