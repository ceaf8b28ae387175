#include "conveyor/ops/resize.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <mutex>
#include <opencv2/core.hpp>
#include <opencv2/imgproc.hpp>

#include "conveyor/ops/image_decoder.h"
#include "conveyor/ops/transforms/vector_clones.h"
#if defined(__SSE2__)
#include <emmintrin.h>
#endif
#if defined(__GNUC__) && defined(__x86_64__)
#include <immintrin.h>
#define CONVEYOR_AVX2_BLEND 1
#endif

namespace conveyor {

namespace {

// Largest shrink the tent filter handles directly; beyond it an integer box
// reduction comes first.
constexpr double kMaxTentScale = 8.0;
// The same for the cubic kernel (4s weights per output pixel): torch's
// results exactly up to this shrink.
constexpr double kMaxCubicScale = 64.0;
// A box wider than this is box-reduced first as well, which bounds the
// prefilter's window (OpenCV's warpAffine, used before bilinear_sample, needed
// sides under SHRT_MAX).
constexpr int kMaxWarpSide = 32000;

cv::Mat as_mat(const ImageView& v) {
  return cv::Mat(v.height, v.width, CV_8UC(v.channels), const_cast<uint8_t*>(v.data), static_cast<size_t>(v.stride));
}

// PIL's bilinear antialiasing kernel for a shrink by `s` > 1: a triangle of
// radius `s` source pixels, here centred on each source pixel (the bilinear
// sampling that follows places it at the exact output position).
cv::Mat tent_kernel(double s) {
  const int r = s > 1.0 ? static_cast<int>(std::ceil(s)) - 1 : 0;
  cv::Mat kernel(2 * r + 1, 1, CV_32F);
  double sum = 0;
  for (int k = -r; k <= r; ++k) {
    const double w = s > 1.0 ? 1.0 - std::abs(k) / s : 1.0;
    kernel.at<float>(k + r) = static_cast<float>(w);
    sum += w;
  }
  kernel /= sum;
  return kernel;
}

// Per-thread buffers of bilinear_sample: no allocation per call once warm.
struct SampleScratch {
  std::vector<int> offsets;       // Per output column: first source sample, in values (x * channels).
  std::vector<uint16_t> weights;  // Per output column: weight of the second sample, of kWeightOne.
  std::vector<int16_t> row;       // One vertically interpolated row (values x 128).
  std::vector<uint32_t> pairs;    // Per output column: (wa | wb << 16) four times (the SSE2 path's operand).
  std::vector<int16_t> wide;      // The vertical pass's row with one more column each side (horizontal tent).
};

// Fixed point: the vertical weight in 1/128 (so a row value times 128 fits a
// signed 16-bit lane: SSE2's multiply-add is signed), the horizontal one in
// 1/kWeightOne; positions are exact to 1/128 pixel vertically and 1/4096
// horizontally (warpAffine: 1/32).
constexpr int kRowBits = 7;
constexpr int kColumnBits = 12;
constexpr uint32_t kWeightOne = 1u << kColumnBits;

constexpr int kShift = kRowBits + kColumnBits;
constexpr int32_t kHalf = 1 << (kShift - 1);

// out[i] = a[i] * (128 - w) + b[i] * w: one row's vertical interpolation
// (vectorized by the compiler).
CONVEYOR_VECTOR_CLONES void blend_rows(const uint8_t* __restrict a, const uint8_t* __restrict b, uint32_t w, size_t n,
                                       int16_t* __restrict out) {
  const auto wa = static_cast<int16_t>((1u << kRowBits) - w), wb = static_cast<int16_t>(w);
  for (size_t i = 0; i < n; ++i) out[i] = static_cast<int16_t>(a[i] * wa + b[i] * wb);
}

#if defined(CONVEYOR_AVX2_BLEND)
// Output pixels x and x + 1 of blend_columns<3> as two 128-bit halves of
// 32-bit (r, g, b, junk) sums: the SSE2 step below, twice.
__attribute__((target("avx2"))) inline __m256i blend_pair_avx2(const int16_t* row, const int* offsets,
                                                               const uint32_t* pairs, int x) {
  const __m256i v = _mm256_loadu2_m128i(reinterpret_cast<const __m128i*>(row + offsets[x + 1]),
                                        reinterpret_cast<const __m128i*>(row + offsets[x]));
  const __m256i lanes = _mm256_unpacklo_epi16(v, _mm256_srli_si256(v, 6));
  const __m256i w = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(pairs + 4 * x));
  return _mm256_srli_epi32(_mm256_add_epi32(_mm256_madd_epi16(lanes, w), _mm256_set1_epi32(kHalf)), kShift);
}

// blend_columns<3>'s loop, four output pixels per step: the same integer
// arithmetic as the SSE2 step (so the same bytes); the four pixels' bytes are
// gathered into one 16-byte store whose last 4 bytes (zeros) the next step
// overwrites. Returns the first pixel it did not write.
__attribute__((target("avx2"))) int blend_columns3_avx2(const int16_t* __restrict row, const int* __restrict offsets,
                                                        const uint32_t* __restrict pairs, int width,
                                                        uint8_t* __restrict out) {
  // After the packs, 32-bit element k holds the bytes of pixel (0, 2, 0, 2 | 1, 3, 1, 3)[k].
  const __m256i order = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);
  const __m128i compact = _mm_setr_epi8(0, 1, 2, 4, 5, 6, 8, 9, 10, 12, 13, 14, -1, -1, -1, -1);
  int x = 0;
  // The store covers bytes 3x .. 3x + 15: inside the row while x + 6 <= width.
  for (; x + 6 <= width; x += 4) {
    __m256i bytes =
        _mm256_packs_epi32(blend_pair_avx2(row, offsets, pairs, x), blend_pair_avx2(row, offsets, pairs, x + 2));
    bytes = _mm256_permutevar8x32_epi32(_mm256_packus_epi16(bytes, bytes), order);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(out + 3 * x), _mm_shuffle_epi8(_mm256_castsi256_si128(bytes), compact));
  }
  return x;
}
#endif

// Output pixel x blends the row's pixels at offsets[x] and the next one.
template <int C>
void blend_columns(const int16_t* __restrict row, const int* __restrict offsets, const uint16_t* __restrict weights,
                   [[maybe_unused]] const uint32_t* __restrict pairs, int width, int channels,
                   uint8_t* __restrict out) {
  const int c_count = C > 0 ? C : channels;
  int x = 0;
#if defined(__SSE2__)
  if constexpr (C == 3) {
#if defined(CONVEYOR_AVX2_BLEND)
    static const bool avx2 = __builtin_cpu_supports("avx2");
    if (avx2) x = blend_columns3_avx2(row, offsets, pairs, width, out);
#endif
    // One pixel per step: its two neighbours are 6 contiguous lanes, paired
    // (r0 r1 g0 g1 b0 b1) for one multiply-add with (wa wb); the 4-byte store
    // spills into the next pixel, which overwrites it (the last is scalar).
    // Reads 2 lanes past the second neighbour: the row has that margin.
    const __m128i half = _mm_set1_epi32(kHalf);
    for (; x + 1 < width; ++x) {
      const __m128i v = _mm_loadu_si128(reinterpret_cast<const __m128i*>(row + offsets[x]));
      const __m128i lanes = _mm_unpacklo_epi16(v, _mm_srli_si128(v, 6));
      const __m128i w = _mm_loadu_si128(reinterpret_cast<const __m128i*>(pairs + 4 * x));
      __m128i sum = _mm_srli_epi32(_mm_add_epi32(_mm_madd_epi16(lanes, w), half), kShift);
      sum = _mm_packs_epi32(sum, sum);
      const int32_t bytes = _mm_cvtsi128_si32(_mm_packus_epi16(sum, sum));
      std::memcpy(out + 3 * x, &bytes, 4);
    }
  }
#endif
  for (; x < width; ++x) {
    const int16_t* p = row + offsets[x];
    const int32_t wb = weights[x], wa = static_cast<int32_t>(kWeightOne) - wb;
    for (int c = 0; c < c_count; ++c) {
      out[x * c_count + c] = static_cast<uint8_t>((p[c] * wa + p[c + c_count] * wb + kHalf) >> kShift);
    }
  }
}

// 16-bit vertical taps: out[i] = sum_k rows[k][i] * w[k] (w sums to 128;
// vectorized by the compiler).
CONVEYOR_VECTOR_CLONES void blend_rows4(const uint8_t* const* rows, const int16_t* w, size_t n,
                                        int16_t* __restrict out) {
  const uint8_t* __restrict r0 = rows[0];
  const uint8_t* __restrict r1 = rows[1];
  const uint8_t* __restrict r2 = rows[2];
  const uint8_t* __restrict r3 = rows[3];
  const int16_t w0 = w[0], w1 = w[1], w2 = w[2], w3 = w[3];
  for (size_t i = 0; i < n; ++i) out[i] = static_cast<int16_t>(r0[i] * w0 + r1[i] * w1 + r2[i] * w2 + r3[i] * w3);
}

// The horizontal tent {a, 1, a} / (1 + 2a) on a 16-bit row (values x 128):
// out[j] = m + side * (l - m) + side * (r - m) for the pixel m = in[j + c] and
// its neighbours l, r; side = a / (1 + 2a) < 1/3 in 1/65536, each product
// taken as a 16-bit high half (SSE2's pmulhw once vectorized; the floor costs
// at most 2/128 of a level).
CONVEYOR_VECTOR_CLONES void tent_row(const int16_t* __restrict in, int c, int16_t side, size_t n,
                                     int16_t* __restrict out) {
  const int16_t* __restrict left = in;
  const int16_t* __restrict mid = in + c;
  const int16_t* __restrict right = in + 2 * c;
  for (size_t i = 0; i < n; ++i) {
    const int16_t m = mid[i];
    const auto l = static_cast<int16_t>(left[i] - m), r = static_cast<int16_t>(right[i] - m);
    out[i] = static_cast<int16_t>(m + static_cast<int16_t>((l * side) >> 16) + static_cast<int16_t>((r * side) >> 16));
  }
}

// Resamples `src` (edges replicated) to dst: output pixel (x, y) <- source
// position (ox + (x + 0.5) * sx - 0.5, oy + (y + 0.5) * sy - 0.5), bilinear,
// after PIL's tent {a, 1, a} / (1 + 2a) on each axis with a > 0 (tx, ty: the
// antialiasing of a shrink by s <= 2, a = 1 - 1/s; 0 for none). Both are
// linear and separable, so each output row is: the vertical tent and
// interpolation as one 4-tap (or 2-tap) filter of the source rows over the
// columns the row reads (16-bit, values x 128), the horizontal tent on that
// row, then each output pixel blends its two columns. No rounding to 8 bits in
// between, and no smoothing of source rows or columns no sample reads:
// cheaper than OpenCV's GaussianBlur followed by cv::resize (INTER_LINEAR,
// whole-pixel boxes) or cv::warpAffine (fractional boxes; which also quantized
// positions to 1/32 pixel).
void bilinear_sample(const ImageView& src, double ox, double oy, double sx, double sy, double tx, double ty,
                     uint8_t* dst, int dst_height, int dst_width, ptrdiff_t dst_stride) {
  thread_local SampleScratch scratch;
  const int channels = src.channels;
  // Columns: the first of the two samples (clamped) and the second's weight.
  // A position clamped at an edge reads the edge pixel twice.
  scratch.offsets.resize(static_cast<size_t>(dst_width));
  scratch.weights.resize(static_cast<size_t>(dst_width));
  int lo = src.width - 1, hi = 0;
  for (int x = 0; x < dst_width; ++x) {
    const double fx = ox + (x + 0.5) * sx - 0.5;
    int x0 = static_cast<int>(std::floor(fx));
    auto w = static_cast<uint32_t>(std::lround((fx - x0) * kWeightOne));
    if (w == kWeightOne) ++x0, w = 0;
    if (x0 < 0) {
      x0 = 0, w = 0;
    } else if (x0 >= src.width - 1) {
      x0 = src.width - 1, w = 0;
    }
    lo = std::min(lo, x0);
    hi = std::max(hi, w != 0 ? x0 + 1 : x0);
    scratch.offsets[x] = x0;
    scratch.weights[x] = static_cast<uint16_t>(w);
  }
  // The row holds columns lo..hi, then zeros: a sample with weight 0 at hi
  // reads the next pixel, and the SSE2 path 2 lanes beyond it.
  const int span = hi - lo + 1;
  for (int x = 0; x < dst_width; ++x) scratch.offsets[x] = (scratch.offsets[x] - lo) * channels;
  scratch.pairs.resize(static_cast<size_t>(dst_width) * 4);
  for (int x = 0; x < dst_width; ++x) {
    const uint32_t wb = scratch.weights[x];
    std::fill_n(scratch.pairs.begin() + 4 * x, 4, (kWeightOne - wb) | (wb << 16));
  }
  const size_t values = static_cast<size_t>(span) * channels;
  scratch.row.resize(values + static_cast<size_t>(channels) + 2);
  std::fill(scratch.row.begin() + static_cast<ptrdiff_t>(values), scratch.row.end(), int16_t{0});
  // With a horizontal tent, the vertical pass also covers one column on each
  // side (lo - 1 and hi + 1, replicated at the image's edges) into `wide`.
  const bool tent_x = tx > 0;
  const int wlo = std::max(lo - 1, 0), whi = std::min(hi + 1, src.width - 1);
  const size_t wide_at = static_cast<size_t>(wlo - (lo - 1)) * channels;  // Where column wlo goes.
  const size_t wide_values = static_cast<size_t>(whi - wlo + 1) * channels;
  int16_t side = 0;
  if (tent_x) {
    scratch.wide.resize(values + 2 * static_cast<size_t>(channels));
    side = static_cast<int16_t>(std::lround(tx / (1 + 2 * tx) * 65536));
  }
  const uint8_t* rows[4];
  int16_t taps[4];
  for (int y = 0; y < dst_height; ++y) {
    const double fy = std::clamp(oy + (y + 0.5) * sy - 0.5, 0.0, src.height - 1.0);
    const int y0 = std::min(static_cast<int>(fy), src.height - 1);
    const double f = fy - y0;
    const int col0 = tent_x ? wlo : lo;
    const auto row_at = [&](int r) {
      return src.row(std::clamp(r, 0, src.height - 1)) + static_cast<ptrdiff_t>(col0) * channels;
    };
    int16_t* vertical = tent_x ? scratch.wide.data() + wide_at : scratch.row.data();
    const size_t n = tent_x ? wide_values : values;
    if (ty > 0) {
      // The tent at rows y0 - 1 .. y0 + 2, then the interpolation between
      // y0 and y0 + 1: four taps summing to 128 (rounded; the largest takes
      // the remainder).
      const double k = 1 / (1 + 2 * ty);
      const double w[4] = {(1 - f) * ty * k, ((1 - f) + f * ty) * k, ((1 - f) * ty + f) * k, f * ty * k};
      int sum = 0, largest = 0;
      for (int i = 0; i < 4; ++i) {
        taps[i] = static_cast<int16_t>(std::lround(w[i] * (1 << kRowBits)));
        sum += taps[i];
        if (w[i] > w[largest]) largest = i;
        rows[i] = row_at(y0 - 1 + i);
      }
      taps[largest] = static_cast<int16_t>(taps[largest] + (1 << kRowBits) - sum);
      blend_rows4(rows, taps, n, vertical);
    } else {
      auto w = static_cast<uint32_t>(std::lround(f * (1u << kRowBits)));
      int r0 = y0;
      if (w == (1u << kRowBits)) ++r0, w = 0;
      blend_rows(row_at(r0), row_at(w != 0 ? r0 + 1 : r0), w, n, vertical);
    }
    if (tent_x) {
      int16_t* wide = scratch.wide.data();
      const size_t c = static_cast<size_t>(channels);
      if (lo == 0) std::copy_n(wide + c, c, wide);                                // Column -1 = column 0.
      if (hi == src.width - 1) std::copy_n(wide + values, c, wide + values + c);  // Column W = column W - 1.
      tent_row(wide, channels, side, values, scratch.row.data());
    }
    uint8_t* out = dst + static_cast<ptrdiff_t>(y) * dst_stride;
    if (channels == 3) {
      blend_columns<3>(scratch.row.data(), scratch.offsets.data(), scratch.weights.data(), scratch.pairs.data(),
                       dst_width, 3, out);
    } else if (channels == 1) {
      blend_columns<1>(scratch.row.data(), scratch.offsets.data(), scratch.weights.data(), scratch.pairs.data(),
                       dst_width, 1, out);
    } else {
      blend_columns<0>(scratch.row.data(), scratch.offsets.data(), scratch.weights.data(), scratch.pairs.data(),
                       dst_width, channels, out);
    }
  }
}

// --- bicubic and nearest: torch's arithmetic ---------------------------------

// torch's cubic convolution kernel with parameter a.
double cubic_kernel(double x, double a) {
  x = std::abs(x);
  if (x < 1) return ((a + 2) * x - (a + 3)) * x * x + 1;
  if (x < 2) return (((x - 5) * x + 8) * x - 4) * a;
  return 0;
}

// One axis of a bicubic resample as torch computes it for uint8 images: per
// output index, the first source index and the taps, in fixed point with
// `precision` bits (aten's int16 weights).
struct AxisTaps {
  std::vector<int> first;
  std::vector<int> count;
  std::vector<int16_t> weights;  // `stride` per output index.
  int stride = 0;
  int precision = 0;
};

// Where a box's outputs sit on its axis: `out` outputs over [lo, hi), each
// `scale` source pixels. A box that starts a whole number of outputs into
// the axis (a crop of a resize) has its outputs placed as torch places that
// resize's outputs, from the axis' origin: output i is the resize's output
// `skip + i`.
struct AxisFrame {
  double lo, scale;
  bool whole_outputs;
  int64_t skip;

  AxisFrame(double lo_, double hi, int out) : lo(lo_), scale((hi - lo_) / out) {
    const double skipped = lo / scale;
    whole_outputs = std::abs(skipped - std::round(skipped)) < 1e-6;
    skip = static_cast<int64_t>(std::llround(skipped));
  }
  /// The source position of output i's centre.
  double centre(int64_t i) const {
    return whole_outputs ? scale * (static_cast<double>(skip + i) + 0.5) : lo + scale * (static_cast<double>(i) + 0.5);
  }
};

// The weights of one output centred at `center` on an axis of `size`
// pixels, into `w` (`stride` of them, zeros after the taps); sets `first`
// and `count` and returns the largest weight. Antialiased: PIL's kernel (a =
// -0.5) widened by the shrink, cut at the image's edges and renormalised.
// Else: a = -0.75 on the four pixels around the centre, those beyond an
// edge read as the edge pixel (their weights added to it).
double cubic_weights(double center, double scale, int size, bool antialias, int stride, double* w, int& first,
                     int& count) {
  std::fill_n(w, stride, 0.0);
  double largest = 0;
  if (!antialias) {
    const double c = center - 0.5;
    const auto x0 = static_cast<int64_t>(std::floor(c));
    const double f = c - static_cast<double>(x0);
    const auto at = [&](int64_t x) { return std::clamp<int64_t>(x, 0, size - 1); };
    const int64_t from = at(x0 - 1);
    const double taps[4] = {cubic_kernel(1 + f, -0.75), cubic_kernel(f, -0.75), cubic_kernel(1 - f, -0.75),
                            cubic_kernel(2 - f, -0.75)};
    for (int k = 0; k < 4; ++k) w[at(x0 - 1 + k) - from] += taps[k];
    first = static_cast<int>(from);
    count = static_cast<int>(at(x0 + 2) - from + 1);
    for (int k = 0; k < count; ++k) largest = std::max(largest, w[k]);
    return largest;
  }
  const bool widen = scale >= 1.0;
  const double support = widen ? 2.0 * scale : 2.0, invscale = widen ? 1.0 / scale : 1.0;
  // Truncations toward zero, as torch's casts.
  const int64_t xmin = std::max<int64_t>(static_cast<int64_t>(center - support + 0.5), 0);
  const int64_t xsize =
      std::clamp<int64_t>(std::min<int64_t>(static_cast<int64_t>(center + support + 0.5), size) - xmin, 0, stride);
  double total = 0;
  for (int64_t j = 0; j < xsize; ++j) {
    w[j] = cubic_kernel((static_cast<double>(j + xmin) - center + 0.5) * invscale, -0.5);
    total += w[j];
  }
  if (total != 0) {
    for (int64_t j = 0; j < xsize; ++j) {
      w[j] /= total;
      largest = std::max(largest, w[j]);
    }
  }
  first = static_cast<int>(std::min<int64_t>(xmin, size));
  count = static_cast<int>(xsize);
  return largest;
}

// The taps of the box's `out` outputs (AxisFrame) on an axis of `size`
// pixels. torch takes the fixed point's precision from the largest weight
// of the whole resized axis: for a box a whole number of outputs into an
// axis resized to a whole number of outputs (at most kMaxAxisOutputs), the
// largest is taken over all of them.
constexpr int64_t kMaxAxisOutputs = int64_t{1} << 20;
AxisTaps cubic_taps(double lo, double hi, int size, int out, bool antialias) {
  const AxisFrame frame(lo, hi, out);
  const double scale = frame.scale;
  const int stride = antialias ? static_cast<int>(std::ceil(scale >= 1.0 ? 2.0 * scale : 2.0)) * 2 + 1 : 4;
  AxisTaps t;
  t.stride = stride;
  t.first.resize(static_cast<size_t>(out));
  t.count.resize(static_cast<size_t>(out));
  std::vector<double> w(static_cast<size_t>(out) * stride);
  double largest = 0;
  for (int i = 0; i < out; ++i) {
    largest = std::max(largest, cubic_weights(frame.centre(i), scale, size, antialias, stride,
                                              w.data() + static_cast<size_t>(i) * stride, t.first[i], t.count[i]));
  }
  const double total = size / scale;  // Outputs of the whole resized axis.
  const auto all = static_cast<int64_t>(std::llround(total));
  if (frame.whole_outputs && std::abs(total - static_cast<double>(all)) < 1e-6 && frame.skip >= 0 &&
      frame.skip + out <= all && all <= kMaxAxisOutputs) {
    std::vector<double> other(static_cast<size_t>(stride));
    int first = 0, count = 0;
    for (int64_t i = -frame.skip; i < all - frame.skip; ++i) {
      if (i < 0 || i >= out) {
        largest = std::max(largest,
                           cubic_weights(frame.centre(i), scale, size, antialias, stride, other.data(), first, count));
      }
    }
  }
  // The most bits that keep the largest weight (doubled) under 2^15.
  for (t.precision = 0; t.precision < 22; ++t.precision) {
    if (static_cast<int>(0.5 + largest * (1 << (t.precision + 1))) >= (1 << 15)) break;
  }
  t.weights.resize(w.size());
  for (size_t k = 0; k < w.size(); ++k) {
    const double v = w[k] * (1 << t.precision);
    t.weights[k] = static_cast<int16_t>(v < 0 ? static_cast<int>(-0.5 + v) : static_cast<int>(0.5 + v));
  }
  return t;
}

// One output value: the rounded fixed-point sum, clamped to 8 bits.
inline uint8_t clamp8(int32_t sum, int precision) { return static_cast<uint8_t>(std::clamp(sum >> precision, 0, 255)); }

// Whether an axis needs no resampling: a whole-pixel origin and one output
// per box pixel (torch skips that pass).
bool identity_axis(double lo, double hi, int out) {
  return std::abs(lo - std::round(lo)) < 1e-9 && std::abs(hi - lo - out) < 1e-9;
}

// One row's horizontal pass: each output pixel's taps over `C` channels
// (C = 0: `channels` at run time).
template <int C>
void cubic_row(const uint8_t* __restrict in, const AxisTaps& t, int width, int channels, uint8_t* __restrict out) {
  const int c = C > 0 ? C : channels;
  const int32_t half = 1 << (t.precision - 1);
  for (int x = 0; x < width; ++x) {
    const int16_t* w = t.weights.data() + static_cast<size_t>(x) * t.stride;
    const uint8_t* p = in + static_cast<ptrdiff_t>(t.first[x]) * c;
    const int n = t.count[x];
    if constexpr (C == 3) {
      int32_t s0 = half, s1 = half, s2 = half;
      for (int k = 0; k < n; ++k, p += 3) {
        s0 += p[0] * w[k];
        s1 += p[1] * w[k];
        s2 += p[2] * w[k];
      }
      out[3 * x] = clamp8(s0, t.precision);
      out[3 * x + 1] = clamp8(s1, t.precision);
      out[3 * x + 2] = clamp8(s2, t.precision);
    } else {
      for (int ch = 0; ch < c; ++ch) {
        int32_t sum = half;
        for (int k = 0; k < n; ++k) sum += p[k * c + ch] * w[k];
        out[x * c + ch] = clamp8(sum, t.precision);
      }
    }
  }
}

// out[i] = clamp8(half + sum_k rows[k][i] * w[k]): one output row of the
// vertical pass, the taps outer so the inner loop vectorizes.
CONVEYOR_VECTOR_CLONES void cubic_column(const uint8_t* rows, size_t row_values, const int16_t* w, int taps,
                                         int precision, int32_t* __restrict sums, uint8_t* __restrict out) {
  std::fill_n(sums, row_values, 1 << (precision - 1));
  for (int k = 0; k < taps; ++k) {
    const uint8_t* __restrict row = rows + static_cast<size_t>(k) * row_values;
    const int32_t wk = w[k];
    for (size_t i = 0; i < row_values; ++i) sums[i] += row[i] * wk;
  }
  for (size_t i = 0; i < row_values; ++i) out[i] = clamp8(sums[i], precision);
}

void cubic_resample(const ImageView& src, const BoxF& box, uint8_t* dst, int dst_height, int dst_width,
                    ptrdiff_t dst_stride, bool antialias, std::vector<uint8_t>& scratch) {
  const int c = src.channels;
  const bool copy_x = identity_axis(box.x0, box.x1, dst_width) && box.x0 >= 0 && box.x1 <= src.width;
  const bool copy_y = identity_axis(box.y0, box.y1, dst_height) && box.y0 >= 0 && box.y1 <= src.height;
  const int x0 = static_cast<int>(std::lround(box.x0)), y0 = static_cast<int>(std::lround(box.y0));
  AxisTaps tx, ty;
  if (!copy_x) tx = cubic_taps(box.x0, box.x1, src.width, dst_width, antialias);
  if (!copy_y) ty = cubic_taps(box.y0, box.y1, src.height, dst_height, antialias);
  // The source rows the vertical pass reads, each resampled horizontally
  // into `scratch` first (8 bits, as torch's intermediate image).
  int r0 = y0, r1 = y0 + dst_height;
  if (!copy_y) {
    r0 = ty.first.front();
    r1 = r0;
    for (int y = 0; y < dst_height; ++y) {
      r0 = std::min(r0, ty.first[y]);
      r1 = std::max(r1, ty.first[y] + ty.count[y]);
    }
    r0 = std::clamp(r0, 0, src.height);
    r1 = std::clamp(r1, r0, src.height);
  }
  const size_t row_values = static_cast<size_t>(dst_width) * c;
  uint8_t* rows = detail::grow_to(scratch, row_values * static_cast<size_t>(std::max(r1 - r0, 1)));
  for (int r = r0; r < r1; ++r) {
    const uint8_t* in = src.row(r);
    uint8_t* out = rows + static_cast<size_t>(r - r0) * row_values;
    if (copy_x) {
      std::memcpy(out, in + static_cast<ptrdiff_t>(x0) * c, row_values);
    } else if (c == 3) {
      cubic_row<3>(in, tx, dst_width, c, out);
    } else {
      cubic_row<0>(in, tx, dst_width, c, out);
    }
  }
  thread_local std::vector<int32_t> sums;
  sums.resize(row_values);
  for (int y = 0; y < dst_height; ++y) {
    uint8_t* out = dst + static_cast<ptrdiff_t>(y) * dst_stride;
    if (copy_y) {
      std::memcpy(out, rows + static_cast<size_t>(y) * row_values, row_values);
    } else {
      cubic_column(rows + static_cast<size_t>(ty.first[y] - r0) * row_values, row_values,
                   ty.weights.data() + static_cast<size_t>(y) * ty.stride, ty.count[y], ty.precision, sums.data(), out);
    }
  }
}

// The source index of each output on an axis (AxisFrame), as torch
// computes it: nearest floor(i * scale), nearest-exact floor((i + 0.5) *
// scale), in float, clamped to the last pixel; a box not a whole number of
// outputs into its axis (a DCT-scaled decode's) at lo + (i [+ 0.5]) * scale.
std::vector<int> nearest_indices(double lo, double hi, int size, int out, bool exact) {
  const AxisFrame frame(lo, hi, out);
  const auto scale_f = static_cast<float>(frame.scale);
  std::vector<int> index(static_cast<size_t>(out));
  for (int i = 0; i < out; ++i) {
    const int64_t k = frame.skip + i;  // The output's index in the whole resized axis.
    double j = 0;
    if (!frame.whole_outputs) {
      j = std::floor(lo + (i + (exact ? 0.5 : 0.0)) * frame.scale);
    } else if (exact) {
      j = std::floor(static_cast<float>((static_cast<double>(k) + 0.5) * static_cast<double>(scale_f)));
    } else {
      j = std::floor(static_cast<float>(k) * scale_f);
    }
    index[i] = static_cast<int>(std::clamp(j, 0.0, static_cast<double>(size - 1)));
  }
  return index;
}

void nearest_resample(const ImageView& src, const BoxF& box, uint8_t* dst, int dst_height, int dst_width,
                      ptrdiff_t dst_stride, bool exact) {
  const int c = src.channels;
  const std::vector<int> xs = nearest_indices(box.x0, box.x1, src.width, dst_width, exact);
  const std::vector<int> ys = nearest_indices(box.y0, box.y1, src.height, dst_height, exact);
  for (int y = 0; y < dst_height; ++y) {
    const uint8_t* in = src.row(ys[y]);
    uint8_t* out = dst + static_cast<ptrdiff_t>(y) * dst_stride;
    for (int x = 0; x < dst_width; ++x) std::memcpy(out + x * c, in + static_cast<ptrdiff_t>(xs[x]) * c, c);
  }
}

}  // namespace

void use_single_threaded_opencv() {
  static std::once_flag once;
  std::call_once(once, [] { cv::setNumThreads(0); });
}

void resize_image(const ImageView& src, const BoxF& box, uint8_t* dst, int dst_height, int dst_width,
                  ptrdiff_t dst_stride, Resampling resampling, std::vector<uint8_t>& scratch) {
  const Interpolation interpolation = resampling.interpolation;
  if (interpolation == Interpolation::kNearest || interpolation == Interpolation::kNearestExact) {
    nearest_resample(src, box, dst, dst_height, dst_width, dst_stride, interpolation == Interpolation::kNearestExact);
    return;
  }
  const bool cubic = interpolation == Interpolation::kBicubic;
  const bool antialias = resampling.antialias;
  use_single_threaded_opencv();
  const double sx = (box.x1 - box.x0) / dst_width, sy = (box.y1 - box.y0) / dst_height;
  // Cells to average per axis first: strong antialiased shrinks, and very
  // wide boxes (bilinear).
  const auto cells = [&](double scale, double extent) {
    const double max_scale = cubic ? kMaxCubicScale : kMaxTentScale;
    int k = antialias && scale > max_scale ? static_cast<int>(scale / (max_scale / 2)) : 1;
    return cubic ? k : std::max(k, static_cast<int>(std::ceil((extent + 8) / kMaxWarpSide)));
  };
  const int kx = cells(sx, box.x1 - box.x0), ky = cells(sy, box.y1 - box.y0);
  if (kx > 1 || ky > 1) {
    // The tent costs ~2s taps per source pixel and axis: a strong shrink (a
    // 10000 x 1 strip to 1 x 1, a large PNG to 64 px) would take seconds (and
    // the cubic kernel's 4s weights per output pixel, memory). An exact box
    // average by an integer factor first (INTER_AREA, one pass) leaves a
    // shrink of 4-8 for the tent (32-64 for the cubic kernel); the result
    // stays within the PIL parity tolerance (docs/design/resize.md).
    // Whole kx x ky cells covering the box and a margin of two cells.
    int x0 = std::max(static_cast<int>(std::floor(box.x0)) - 2 * kx, 0);
    int y0 = std::max(static_cast<int>(std::floor(box.y0)) - 2 * ky, 0);
    int x1 = std::min(static_cast<int>(std::ceil(box.x1)) + 2 * kx, src.width);
    int y1 = std::min(static_cast<int>(std::ceil(box.y1)) + 2 * ky, src.height);
    x0 = std::max(x0 - (kx - (x1 - x0) % kx) % kx, 0);
    y0 = std::max(y0 - (ky - (y1 - y0) % ky) % ky, 0);
    x1 = x0 + std::max((x1 - x0) / kx, 1) * kx;
    y1 = y0 + std::max((y1 - y0) / ky, 1) * ky;
    if (x1 <= src.width && y1 <= src.height) {
      cv::Mat reduced;
      cv::resize(as_mat(src)(cv::Rect(x0, y0, x1 - x0, y1 - y0)), reduced, cv::Size((x1 - x0) / kx, (y1 - y0) / ky), 0,
                 0, cv::INTER_AREA);
      const ImageView view{reduced.data, reduced.rows, reduced.cols, src.channels,
                           static_cast<ptrdiff_t>(reduced.step)};
      const BoxF in_reduced{(box.x0 - x0) / kx, (box.y0 - y0) / ky, (box.x1 - x0) / kx, (box.y1 - y0) / ky};
      resize_image(view, in_reduced, dst, dst_height, dst_width, dst_stride, resampling, scratch);
      return;
    }
  }
  if (cubic) {
    cubic_resample(src, box, dst, dst_height, dst_width, dst_stride, antialias, scratch);
    return;
  }
  cv::Mat in = as_mat(src);
  double ox = box.x0, oy = box.y0;  // Box origin in `in`.
  double tx = 0, ty = 0;            // The tent's side weights, when bilinear_sample applies it.
  if (antialias && (sx > 1.0 || sy > 1.0) && sx <= 2.0 && sy <= 2.0) {
    // Three taps {a, 1, a} at most: bilinear_sample applies them on the way.
    tx = sx > 1.0 ? 1.0 - 1.0 / sx : 0.0;
    ty = sy > 1.0 ? 1.0 - 1.0 / sy : 0.0;
  } else if (antialias && (sx > 1.0 || sy > 1.0)) {
    // Smooth only the source rows and columns the samples read (box plus the
    // kernel radius and one interpolation pixel); neighbours outside that
    // window but inside `src` are used, beyond `src` edges are replicated.
    const int rx = static_cast<int>(std::ceil(std::max(sx, 1.0))), ry = static_cast<int>(std::ceil(std::max(sy, 1.0)));
    const int x0 = std::clamp(static_cast<int>(std::floor(box.x0)) - rx - 1, 0, src.width - 1);
    const int x1 = std::clamp(static_cast<int>(std::ceil(box.x1)) + rx + 1, x0 + 1, src.width);
    const int y0 = std::clamp(static_cast<int>(std::floor(box.y0)) - ry - 1, 0, src.height - 1);
    const int y1 = std::clamp(static_cast<int>(std::ceil(box.y1)) + ry + 1, y0 + 1, src.height);
    const cv::Mat window = in(cv::Rect(x0, y0, x1 - x0, y1 - y0));
    cv::Mat smooth(y1 - y0, x1 - x0, CV_8UC(src.channels),
                   detail::grow_to(scratch, static_cast<size_t>(x1 - x0) * (y1 - y0) * src.channels));
    cv::sepFilter2D(window, smooth, -1, tent_kernel(sx), tent_kernel(sy), cv::Point(-1, -1), 0, cv::BORDER_REPLICATE);
    in = smooth;
    ox -= x0;
    oy -= y0;
  }
  // Output pixel centre x + 0.5 maps to source centre ox + (x + 0.5) * sx (minus
  // 0.5 for pixel-index coordinates), as in PIL and torchvision; the box's
  // edge pixels see their neighbours in `src` (a crop then a resize passes
  // the crop as `src`).
  const ImageView sampled{in.data, in.rows, in.cols, src.channels, static_cast<ptrdiff_t>(in.step)};
  bilinear_sample(sampled, ox, oy, sx, sy, tx, ty, dst, dst_height, dst_width, dst_stride);
}

}  // namespace conveyor
