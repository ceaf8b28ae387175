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

// adjust_sharpness's interior rows (see there) from `in` to `out`, rows of
// `stride` bytes, `c` channels.
CONVEYOR_FMA_CLONES void sharpen_rows(const uint8_t* in, uint8_t* out, int h, ptrdiff_t stride, int c, float alpha) {
  for (int y = 1; y < h - 1; ++y) {
    const uint8_t* above = in + (y - 1) * stride;
    const uint8_t* row = in + y * stride;
    const uint8_t* below = in + (y + 1) * stride;
    uint8_t* dst = out + y * stride;
    for (ptrdiff_t i = c; i < stride - c; ++i) {
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
