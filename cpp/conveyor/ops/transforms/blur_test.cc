#include "conveyor/ops/transforms/blur.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "conveyor/core/error.h"

namespace conveyor {
namespace {

// Expected values: torchvision 0.29.1's transforms.v2.functional on uint8 tensors.

using Pixels = std::vector<uint8_t>;

SampleImage impulse(int size, int at_y, int at_x, uint8_t value) {
  SampleImage sample{Image{size, size, 1, Pixels(static_cast<size_t>(size) * size, 0)}, {}, nullptr};
  sample.image.pixels[static_cast<size_t>(at_y) * size + at_x] = value;
  return sample;
}

TEST(GaussianBlurTest, TorchvisionsKernelAndRounding) {
  // k = 3, sigma = 1: weights (0.2741, 0.4519, 0.2741); 255 * 0.4519^2 = 52.07,
  // 255 * 0.4519 * 0.2741 = 31.58, 255 * 0.2741^2 = 19.15.
  SampleImage sample = impulse(5, 2, 2, 255);
  gaussian_blur(sample, {3, 3}, {1.0, 1.0});
  EXPECT_EQ(sample.image.pixels, (Pixels{0, 0,  0,  0,  0,  //
                                         0, 19, 32, 19, 0,  //
                                         0, 32, 52, 32, 0,  //
                                         0, 19, 32, 19, 0,  //
                                         0, 0,  0,  0,  0}));
}

TEST(GaussianBlurTest, ReflectsAtTheBorderAndTakesXThenY) {
  // Reflect (not edge) padding: the corner's mirror neighbours are the zeros
  // at distance 1, so the corner keeps 52 as in the middle.
  SampleImage sample = impulse(5, 0, 0, 255);
  gaussian_blur(sample, {3, 1}, {1.0, 1.0});  // x only: kernel_size is (x, y)
  EXPECT_EQ(sample.image.pixels[0], 115);     // 255 * 0.4519
  EXPECT_EQ(sample.image.pixels[1], 70);      // 255 * 0.2741, right
  EXPECT_EQ(sample.image.pixels[5], 0);       // below: untouched by an x-only blur
  sample = impulse(5, 0, 0, 255);
  gaussian_blur(sample, {3, 3}, {1.0, 1.0});
  EXPECT_EQ(sample.image.pixels[0], 52);
}

TEST(GaussianBlurTest, ConstantImagesStayAndSmallImagesAreReflectedRepeatedly) {
  SampleImage sample{Image{4, 3, 3, Pixels(36, 77)}, {}, nullptr};
  gaussian_blur(sample, {5, 9}, {2.0, 0.5});
  EXPECT_EQ(sample.image.pixels, Pixels(36, 77));
  SampleImage tiny{Image{2, 2, 1, {0, 255, 255, 0}}, {}, nullptr};
  gaussian_blur(tiny, {7, 7}, {50.0, 50.0});  // nearly a box filter over the reflected pattern
  EXPECT_EQ(tiny.image.pixels.size(), 4u);
}

TEST(GaussianBlurTest, SigmaIsDrawnUniformlyInItsRange) {
  double sum = 0, lo = 10, hi = 0;
  for (int i = 0; i < 10000; ++i) {
    SampleRng rng(5, 0, static_cast<uint64_t>(i));
    const double s = sample_gaussian_blur_sigma({0.1, 2.0}, rng);
    sum += s;
    lo = std::min(lo, s);
    hi = std::max(hi, s);
  }
  // sd of the mean: 1.9 / sqrt(12 * 10000) = 0.0055.
  EXPECT_NEAR(sum / 10000, 1.05, 0.03);
  EXPECT_GE(lo, 0.1);
  EXPECT_LT(lo, 0.102);
  EXPECT_LT(hi, 2.0);
  EXPECT_GT(hi, 1.998);
}

TEST(SharpnessTest, BlendsWithTheSmoothedImageAndKeepsTheBorder) {
  // Smoothed centre: 5 * 130 / 13 = 50.
  SampleImage sample = impulse(3, 1, 1, 130);
  adjust_sharpness(sample, 0.0);
  EXPECT_EQ(sample.image.pixels, (Pixels{0, 0, 0, 0, 50, 0, 0, 0, 0}));
  sample = impulse(3, 1, 1, 130);
  adjust_sharpness(sample, 2.0);  // 130 - (50 - 130)
  EXPECT_EQ(sample.image.pixels, (Pixels{0, 0, 0, 0, 210, 0, 0, 0, 0}));
  sample = impulse(3, 1, 1, 200);
  adjust_sharpness(sample, 3.0);  // 200 - 2 * (77 - 200) = 446, clamped
  EXPECT_EQ(sample.image.pixels[4], 255);
  sample = impulse(3, 1, 1, 130);
  adjust_sharpness(sample, 1e300);  // alpha is -inf: 130 + inf
  EXPECT_EQ(sample.image.pixels, (Pixels{0, 0, 0, 0, 255, 0, 0, 0, 0}));
  SampleImage flat{Image{3, 3, 1, Pixels(9, 50)}, {}, nullptr};
  adjust_sharpness(flat, 1e300);  // 50 + 0 * -inf is NaN: made 0 (not an undefined conversion)
  EXPECT_EQ(flat.image.pixels, (Pixels{50, 50, 50, 50, 0, 50, 50, 50, 50}));
  SampleImage narrow{Image{2, 5, 1, {1, 2, 3, 4, 5, 6, 7, 8, 9, 10}}, {}, nullptr};
  adjust_sharpness(narrow, 0.0);
  EXPECT_EQ(narrow.image.pixels, (Pixels{1, 2, 3, 4, 5, 6, 7, 8, 9, 10}));
}

TEST(SharpnessTest, WideImagesMatchTorchvisionsArithmeticEverywhere) {
  // Rows wide enough for the 16-byte vector steps and a scalar remainder;
  // noise with flat patches (where factor 1e300 gives 0 * -inf); the
  // reference is torchvision's: the 3 x 3 kernel (1 1 1 / 1 5 1 / 1 1 1) / 13
  // in float32, rounded, blended as x + (1 - factor) * (smooth - x) with one
  // rounding, clamped and truncated; the border rows and columns kept.
  for (int channels : {1, 3}) {
    const int h = 9, w = 41;
    std::mt19937 gen(static_cast<uint32_t>(channels));
    Pixels pixels(static_cast<size_t>(h) * w * channels);
    for (size_t i = 0; i < pixels.size(); ++i) pixels[i] = (i / 40) % 3 == 0 ? 90 : static_cast<uint8_t>(gen());
    for (double factor : {0.0, 0.3, 2.0, 1e300}) {
      SampleImage sample{Image{h, w, channels, pixels}, {}, nullptr};
      adjust_sharpness(sample, factor);
      const float alpha = static_cast<float>(1.0 - factor);
      const auto at = [&](int y, int x, int c) { return pixels[(static_cast<size_t>(y) * w + x) * channels + c]; };
      for (int y = 0; y < h; ++y) {
        for (int x = 0; x < w; ++x) {
          for (int c = 0; c < channels; ++c) {
            int want = at(y, x, c);
            if (y > 0 && y < h - 1 && x > 0 && x < w - 1) {
              int sum = 4 * at(y, x, c);
              for (int dy = -1; dy <= 1; ++dy)
                for (int dx = -1; dx <= 1; ++dx) sum += at(y + dy, x + dx, c);
              const float smooth = std::nearbyint(static_cast<float>(sum) / 13.0f);
              const float v = std::fma(smooth - static_cast<float>(want), alpha, static_cast<float>(want));
              want = std::isnan(v) ? 0 : static_cast<int>(std::clamp(v, 0.0f, 255.0f));
            }
            ASSERT_EQ(sample.image.pixels[(static_cast<size_t>(y) * w + x) * channels + c], want)
                << channels << " channels, factor " << factor << ", pixel (" << x << ", " << y << ")";
          }
        }
      }
    }
  }
}

TEST(SharpnessTest, ThreeChannelsAreSmoothedSeparately) {
  SampleImage sample{Image{3, 3, 3, Pixels(27, 0)}, {}, nullptr};
  sample.image.pixels[12] = 130;  // centre, red
  sample.image.pixels[14] = 26;   // centre, blue: 10 smoothed
  adjust_sharpness(sample, 0.0);
  Pixels expected(27, 0);
  expected[12] = 50;
  expected[14] = 10;
  EXPECT_EQ(sample.image.pixels, expected);
}

void expect_error(const TransformSpec& spec, const std::string& message) {
  try {
    make_transform_step(spec);
    ADD_FAILURE() << "no error for " << spec.name;
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kConfig);
    EXPECT_EQ(std::string(e.what()), message);
  }
}

TEST(BlurStepTest, BadArgumentsAreConfigErrorsNamingThem) {
  expect_error({"gaussian_blur", {{"kernel_size", {4}}}}, "GaussianBlur: kernel_size must be odd and positive, got 4");
  expect_error({"gaussian_blur", {{"kernel_size", {3, -1}}}},
               "GaussianBlur: kernel_size must be odd and positive, got -1");
  expect_error({"gaussian_blur", {{"kernel_size", {3}}, {"sigma", {-1, 2}}}},
               "GaussianBlur: sigma must be positive, got -1");
  expect_error({"gaussian_blur", {{"kernel_size", {3}}, {"sigma", {2, 1}}}},
               "GaussianBlur: sigma must be (min, max) with min <= max, got (2, 1)");
  expect_error({"random_adjust_sharpness", {{"sharpness_factor", {-0.5}}}},
               "RandomAdjustSharpness: sharpness_factor must be non-negative, got -0.5");
  expect_error({"random_adjust_sharpness", {{"sharpness_factor", {2}}, {"p", {2}}}},
               "RandomAdjustSharpness: p must be in [0, 1], got 2");
}

TEST(BlurStepTest, GaussianBlurDrawsSigmaPerSample) {
  const auto step = make_transform_step({"gaussian_blur", {{"kernel_size", {5}}, {"sigma", {0.1, 3.0}}}});
  EXPECT_EQ(step->kind(), StepKind::kImage);
  Pixels first;
  bool differs = false;
  for (uint64_t i = 0; i < 8; ++i) {
    SampleImage sample = impulse(7, 3, 3, 255);
    SampleRng rng(1, 0, i);
    step_as<ImageStep>(*step).apply_image(sample, rng);
    if (i == 0) first = sample.image.pixels;
    differs = differs || sample.image.pixels != first;
    SampleImage again = impulse(7, 3, 3, 255);
    SampleRng same(1, 0, i);
    step_as<ImageStep>(*step).apply_image(again, same);
    EXPECT_EQ(again.image.pixels, sample.image.pixels);
  }
  EXPECT_TRUE(differs);
}

}  // namespace
}  // namespace conveyor
