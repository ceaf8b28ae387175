#include "conveyor/ops/transforms/blur.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <opencv2/imgproc.hpp>
#include <string>
#include <utility>
#include <vector>

#include "conveyor/core/error.h"
#include "conveyor/core/number_format.h"
#include "conveyor/ops/resize.h"
#include "conveyor/ops/transforms/image_step.h"
#include "conveyor/ops/transforms/torch_arithmetic.h"
#include "conveyor/ops/transforms/vector_clones.h"
#if defined(__GNUC__) && defined(__x86_64__)
#include <immintrin.h>
#define CONVEYOR_AVX2_SHARPEN 1
#endif

namespace conveyor {

namespace {

// torchvision's _get_gaussian_kernel1d: softmax(-(x / sigma)^2) over
// x = linspace(-lim, lim, k), lim = (k - 1) / (2 sqrt 2); computed in double
// and stored as float32 (torchvision's arithmetic is float32 throughout: the
// two differ by float32 rounding only).
void gaussian_kernel(int size, double sigma, std::vector<float>& out) {
  out.resize(static_cast<size_t>(size));
  const double lim = (size - 1) / (2.0 * std::sqrt(2.0));
  const auto weight = [&](int i) {
    const double x = size == 1 ? -lim : -lim + 2 * lim * i / (size - 1);
    return std::exp(-(x / sigma) * (x / sigma));
  };
  double sum = 0;
  for (int i = 0; i < size; ++i) sum += weight(i);
  for (int i = 0; i < size; ++i) out[i] = static_cast<float>(weight(i) / sum);
}

cv::Mat as_mat(uint8_t* data, const Image& image) {
  return cv::Mat(image.height, image.width, CV_8UC(image.channels), data);
}

std::string text(double v) { return format_shortest(v); }

std::array<int, 2> kernel_size_arg(TransformArgs& args) {
  const std::vector<double> k = args.numbers("kernel_size");
  args.check(k.size() == 1 || k.size() == 2, "kernel_size must be an int or a pair of ints (x, y)");
  for (double v : k) {
    args.check(v == std::floor(v) && v > 0 && v <= std::numeric_limits<int>::max() && std::fmod(v, 2) == 1,
               "kernel_size must be odd and positive, got " + text(v));
  }
  return {static_cast<int>(k.front()), static_cast<int>(k.back())};
}

std::array<double, 2> sigma_pair(TransformArgs& args, const std::vector<double>& s) {
  args.check(s.size() == 1 || s.size() == 2, "sigma must be a number or a pair of numbers");
  for (double v : s) args.check(std::isfinite(v) && v > 0, "sigma must be positive, got " + text(v));
  return {s.front(), s.back()};
}

#if defined(CONVEYOR_AVX2_SHARPEN)
// 16 bytes of one row as 16-bit lanes.
__attribute__((target("avx2,fma"))) inline __m256i widen16(const uint8_t* p) {
  return _mm256_cvtepu8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
}

// 8 signed 16-bit lanes as floats.
__attribute__((target("avx2,fma"))) inline __m256 to_floats(__m128i v) {
  return _mm256_cvtepi32_ps(_mm256_cvtepi16_epi32(v));
}

// sharpen_rows' arithmetic on bytes i .. i + 15 of a row, 16 at a time,
// from i = c while the right neighbours stay in the row; returns the first
// byte it did not write. The sum S fits 16 bits (13 x 255) and the rounded
// S / 13, (2S + 13) / 26, is the high half of (2S + 13) * 20165 shifted by
// 3 (exact for every 2S + 13 <= 6643); the blend is one float32 fma, as
// the scalar loop's.
__attribute__((target("avx2,fma"))) ptrdiff_t sharpen_row_avx2(const uint8_t* above, const uint8_t* row,
                                                               const uint8_t* below, uint8_t* dst, ptrdiff_t stride,
                                                               int c, float alpha) {
  const __m256i thirteen = _mm256_set1_epi16(13), reciprocal = _mm256_set1_epi16(20165);
  const __m256 a = _mm256_set1_ps(alpha), zero = _mm256_setzero_ps(), top = _mm256_set1_ps(255.0f);
  ptrdiff_t i = c;
  for (; i + 16 + c <= stride; i += 16) {
    const __m256i centre = widen16(row + i);
    __m256i sum = _mm256_add_epi16(_mm256_add_epi16(widen16(above + i - c), widen16(above + i)),
                                   _mm256_add_epi16(widen16(above + i + c), widen16(row + i - c)));
    sum = _mm256_add_epi16(sum, _mm256_add_epi16(_mm256_add_epi16(widen16(row + i + c), widen16(below + i - c)),
                                                 _mm256_add_epi16(widen16(below + i), widen16(below + i + c))));
    sum = _mm256_add_epi16(sum, _mm256_add_epi16(_mm256_slli_epi16(centre, 2), centre));
    const __m256i twice = _mm256_add_epi16(_mm256_add_epi16(sum, sum), thirteen);
    const __m256i smooth = _mm256_srli_epi16(_mm256_mulhi_epu16(twice, reciprocal), 3);
    const __m256i diff = _mm256_sub_epi16(smooth, centre);
    __m256i halves[2];
    for (int k = 0; k < 2; ++k) {
      const __m128i d = k == 0 ? _mm256_castsi256_si128(diff) : _mm256_extracti128_si256(diff, 1);
      const __m128i x = k == 0 ? _mm256_castsi256_si128(centre) : _mm256_extracti128_si256(centre, 1);
      // max(v, 0) gives 0 for NaN (0 x inf), as the scalar max(0, v).
      const __m256 v = _mm256_min_ps(_mm256_max_ps(_mm256_fmadd_ps(to_floats(d), a, to_floats(x)), zero), top);
      halves[k] = _mm256_cvttps_epi32(v);
    }
    const __m256i words = _mm256_permute4x64_epi64(_mm256_packus_epi32(halves[0], halves[1]), 0xd8);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(dst + i),
                     _mm_packus_epi16(_mm256_castsi256_si128(words), _mm256_extracti128_si256(words, 1)));
  }
  return i;
}
#endif

// adjust_sharpness's interior rows (see there) from `in` to `out`, rows of
// `stride` bytes, `c` channels: AVX2 where it can, this loop for the rest.
CONVEYOR_FMA_CLONES void sharpen_rows(const uint8_t* in, uint8_t* out, int h, ptrdiff_t stride, int c, float alpha) {
#if defined(CONVEYOR_AVX2_SHARPEN)
  static const bool avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
#endif
  for (int y = 1; y < h - 1; ++y) {
    const uint8_t* above = in + (y - 1) * stride;
    const uint8_t* row = in + y * stride;
    const uint8_t* below = in + (y + 1) * stride;
    uint8_t* dst = out + y * stride;
    ptrdiff_t i = c;
#if defined(CONVEYOR_AVX2_SHARPEN)
    if (avx2) i = sharpen_row_avx2(above, row, below, dst, stride, c, alpha);
#endif
    for (; i < stride - c; ++i) {
      const int s = above[i - c] + above[i] + above[i + c] + row[i - c] + 5 * row[i] + row[i + c] + below[i - c] +
                    below[i] + below[i + c];
      const int smooth = (2 * s + 13) / 26;
      const float v = fused_multiply_add(static_cast<float>(smooth - row[i]), alpha, static_cast<float>(row[i]));
      dst[i] = static_cast<uint8_t>(std::min(std::max(0.0f, v), 255.0f));  // NaN (0 * inf) -> 0
    }
  }
}

}  // namespace

void gaussian_blur(SampleImage& sample, std::array<int, 2> kernel_size, std::array<double, 2> sigma) {
  Image& image = sample.image;
  if (image.pixels.empty()) return;
  use_single_threaded_opencv();
  thread_local std::vector<float> kx, ky;
  gaussian_kernel(kernel_size[0], sigma[0], kx);
  gaussian_kernel(kernel_size[1], sigma[1], ky);
  sample.spare.resize(image.pixels.size());
  // sepFilter2D on 8-bit input with float kernels keeps float intermediates
  // and rounds to nearest even on output (saturate_cast): torchvision's
  // conv2d in float32, then round_(). BORDER_REFLECT_101 is torch's "reflect".
  const cv::Mat src = as_mat(image.pixels.data(), image);
  cv::Mat dst = as_mat(sample.spare.data(), image);
  cv::sepFilter2D(src, dst, CV_8U, cv::Mat(1, kernel_size[0], CV_32F, kx.data()),
                  cv::Mat(1, kernel_size[1], CV_32F, ky.data()), cv::Point(-1, -1), 0, cv::BORDER_REFLECT_101);
  if (dst.data != sample.spare.data())
    throw Error(ErrorKind::kInternal, "gaussian_blur: OpenCV reallocated the output");
  std::swap(image.pixels, sample.spare);
}

void adjust_sharpness(SampleImage& sample, double factor) {
  Image& image = sample.image;
  const int h = image.height, w = image.width, c = image.channels;
  if (h <= 2 || w <= 2) return;
  // The smoothed value S / 13 (S = the 8 neighbours + 5 x the centre) is
  // never within 1/26 of a half, so rounding it in integers is exactly
  // torchvision's round_() of its float32 convolution. The blend is
  // x + (1 - factor) * (smooth - x) in float32, clamped, truncated.
  const float alpha = static_cast<float>(1.0 - factor);
  sample.spare = image.pixels;  // same size: no allocation once warm; keeps the border.
  const ptrdiff_t stride = static_cast<ptrdiff_t>(w) * c;
  sharpen_rows(image.pixels.data(), sample.spare.data(), h, stride, c, alpha);
  std::swap(image.pixels, sample.spare);
}

double sample_gaussian_blur_sigma(const std::array<double, 2>& sigma, SampleRng& rng) {
  return rng.uniform(sigma[0], sigma[1]);
}

std::unique_ptr<const TransformStep> make_gaussian_blur_step(const TransformParams& params) {
  TransformArgs args("GaussianBlur", params);
  const std::array<int, 2> kernel_size = kernel_size_arg(args);
  const std::array<double, 2> sigma = sigma_pair(args, args.numbers("sigma", 0, std::vector<double>{0.1, 2.0}));
  args.check(sigma[0] <= sigma[1],
             "sigma must be (min, max) with min <= max, got (" + text(sigma[0]) + ", " + text(sigma[1]) + ")");
  args.finish();
  return make_image_step(std::nullopt, [kernel_size, sigma](SampleImage& sample, SampleRng& rng) {
    const double s = sample_gaussian_blur_sigma(sigma, rng);
    gaussian_blur(sample, kernel_size, {s, s});
  });
}

std::unique_ptr<const TransformStep> make_random_adjust_sharpness_step(const TransformParams& params) {
  TransformArgs args("RandomAdjustSharpness", params);
  const double factor = args.number("sharpness_factor");
  args.check(factor >= 0, "sharpness_factor must be non-negative, got " + text(factor));
  const double p = probability_arg(args, 0.5);
  args.finish();
  return make_image_step(p, [factor](SampleImage& sample, SampleRng& /*rng*/) { adjust_sharpness(sample, factor); });
}

void gaussian_blur_function(const TransformParams& params, SampleImage& sample) {
  TransformArgs args("gaussian_blur", params);
  const std::array<int, 2> kernel_size = kernel_size_arg(args);
  // torchvision's default sigma: 0.15 * k + 0.35 per axis.
  std::array<double, 2> sigma{kernel_size[0] * 0.15 + 0.35, kernel_size[1] * 0.15 + 0.35};
  if (args.has("sigma")) sigma = sigma_pair(args, args.numbers("sigma"));
  args.finish();
  check_color_channels("gaussian_blur", sample.image);
  gaussian_blur(sample, kernel_size, sigma);
}

void adjust_sharpness_function(const TransformParams& params, SampleImage& sample) {
  TransformArgs args("adjust_sharpness", params);
  const double factor = args.number("sharpness_factor");
  args.check(factor >= 0, "sharpness_factor must be non-negative, got " + text(factor));
  args.finish();
  check_color_channels("adjust_sharpness", sample.image);
  adjust_sharpness(sample, factor);
}

}  // namespace conveyor
