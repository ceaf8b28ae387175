#include "conveyor/ops/transforms/color.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "conveyor/core/error.h"

namespace conveyor {
namespace {

// The expected values below are torchvision 0.29.1's (transforms.v2.functional
// on uint8 tensors), checked by hand against its float32 arithmetic.

Image make_image(int height, int width, int channels, std::vector<uint8_t> pixels) {
  return Image{height, width, channels, std::move(pixels)};
}

std::vector<uint8_t> run(void (*kernel)(Image&, double), Image image, double arg) {
  kernel(image, arg);
  return image.pixels;
}

using Pixels = std::vector<uint8_t>;

TEST(ColorKernelTest, BrightnessMultipliesClampsAndTruncates) {
  EXPECT_EQ(run(adjust_brightness, make_image(1, 1, 3, {100, 200, 3}), 1.5), (Pixels{150, 255, 4}));
  EXPECT_EQ(run(adjust_brightness, make_image(1, 1, 3, {100, 201, 3}), 0.5), (Pixels{50, 100, 1}));
  // A factor beyond float32 (torch: 0 * inf is NaN, which becomes 0).
  EXPECT_EQ(run(adjust_brightness, make_image(1, 1, 3, {0, 1, 200}), 1e300), (Pixels{0, 255, 255}));
}

TEST(ColorKernelTest, ContrastBlendsWithTheMeanOfTheFlooredGrayImage) {
  // One channel: the mean of the values (25).
  EXPECT_EQ(run(adjust_contrast, make_image(1, 4, 1, {10, 20, 30, 40}), 2.0), (Pixels{0, 15, 35, 55}));
  EXPECT_EQ(run(adjust_contrast, make_image(1, 4, 1, {10, 20, 30, 40}), 0.5), (Pixels{17, 22, 27, 32}));
  // Three: gray 100 -> 99.99 -> 99, 200 -> 199; mean 149.
  EXPECT_EQ(run(adjust_contrast, make_image(1, 2, 3, {100, 100, 100, 200, 200, 200}), 0.0), Pixels(6, 149));
}

TEST(ColorKernelTest, SaturationBlendsWithEachPixelsGrayAndSkipsOneChannel) {
  // gray = floor(200 * 0.2989 + 100 * 0.587) = 118.
  EXPECT_EQ(run(adjust_saturation, make_image(1, 1, 3, {200, 100, 0}), 0.0), (Pixels{118, 118, 118}));
  EXPECT_EQ(run(adjust_saturation, make_image(1, 1, 3, {200, 100, 0}), 2.0), (Pixels{255, 82, 0}));
  EXPECT_EQ(run(adjust_saturation, make_image(1, 2, 1, {7, 9}), 0.0), (Pixels{7, 9}));
}

TEST(ColorKernelTest, FactorsBeyondFloat32AreDefined) {
  // float32(1e300) is inf: inf - inf is NaN, which becomes 0 (torch's
  // conversion on x86) rather than an undefined conversion (UBSan checks).
  EXPECT_EQ(run(adjust_saturation, make_image(1, 1, 3, {200, 100, 0}), 1e300), (Pixels{0, 0, 0}));
  EXPECT_EQ(run(adjust_contrast, make_image(1, 2, 1, {10, 20}), 1e300), (Pixels{0, 0}));
  EXPECT_EQ(run(adjust_contrast, make_image(1, 2, 1, {10, 20}), 1e30), (Pixels{0, 255}));
}

TEST(ColorKernelTest, HueRotatesInHsvAndKeepsGrays) {
  const Image image = make_image(1, 3, 3, {255, 0, 0, 0, 0, 255, 128, 128, 128});
  EXPECT_EQ(run(adjust_hue, image, 1.0 / 3), (Pixels{0, 255, 0, 255, 0, 0, 128, 128, 128}));
  EXPECT_EQ(run(adjust_hue, image, 0.5), (Pixels{0, 255, 255, 255, 255, 0, 128, 128, 128}));
  EXPECT_EQ(run(adjust_hue, image, -0.5), (Pixels{0, 255, 255, 255, 255, 0, 128, 128, 128}));
  EXPECT_EQ(run(adjust_hue, make_image(1, 2, 1, {7, 9}), 0.25), (Pixels{7, 9}));
}

// torchvision's adjust_hue on one uint8 pixel, written as its code reads
// (v2 functional: to_dtype_image, _rgb_to_hsv, add + remainder_(1),
// _hsv_to_rgb, to_dtype_image back), in float32 operation by operation.
std::array<uint8_t, 3> torch_hue(uint8_t red, uint8_t green, uint8_t blue, float hue) {
  const float inv255 = static_cast<float>(1.0 / 255);
  const float r = red * inv255, g = green * inv255, b = blue * inv255;
  const float maxc = std::max({r, g, b}), minc = std::min({r, g, b});
  const bool eqc = maxc == minc;
  const float range = maxc - minc;
  const float s = range / (eqc ? 1.0f : maxc);
  const float divisor = eqc ? 1.0f : range;
  const float rc = (maxc - r) / divisor, gc = (maxc - g) / divisor, bc = (maxc - b) / divisor;
  const bool neq_r = maxc != r, eq_g = maxc == g;
  const float hg = ((rc + 2.0f) - bc) * static_cast<float>(eq_g && neq_r);
  const float hr = (bc - gc) * static_cast<float>(!neq_r);
  const float hb = ((gc + 4.0f) - rc) * static_cast<float>(neq_r && !eq_g);
  float h = std::fmod(((hr + hg) + hb) * static_cast<float>(1.0 / 6.0) + 1.0f, 1.0f);
  h = std::fmod(h + hue, 1.0f);  // remainder_(1): fmod, then + 1 when negative.
  if (h < 0) h += 1.0f;
  const float h6 = h * 6.0f;
  const float i = std::floor(h6);
  const float f = h6 - i;
  const int sector = static_cast<int>(i) % 6;
  const float sxf = s * f, one_minus_s = 1.0f - s;
  auto unit = [](float x) { return std::min(std::max(x, 0.0f), 1.0f); };
  const float v = maxc, q = unit((1.0f - sxf) * v), t = unit((sxf + one_minus_s) * v), p = unit(one_minus_s * v);
  const float vpqt[4] = {v, p, q, t};
  static const int select[3][6] = {{0, 2, 1, 1, 3, 0}, {3, 0, 0, 2, 1, 1}, {1, 1, 3, 0, 0, 2}};
  const float to_u8 = static_cast<float>(255 + 1.0 - 1e-3);
  std::array<uint8_t, 3> out;
  for (int c = 0; c < 3; ++c) out[c] = static_cast<uint8_t>(vpqt[select[c][sector]] * to_u8);
  return out;
}

TEST(ColorKernelTest, HueMatchesTorchvisionsFloat32CodeForEveryColour) {
  // Every colour, in rows of 4100 pixels: the AVX2 path where the CPU has
  // it (8 pixels per step) and the scalar loop for each row's last 4.
  constexpr int kWidth = 4100;
  constexpr int kHeight = ((1 << 24) + kWidth - 1) / kWidth;
  for (const double factor : {0.1, -0.5, 0.37}) {
    Image image{kHeight, kWidth, 3, Pixels(size_t{3} * kWidth * kHeight)};
    for (size_t i = 0; i < size_t{kWidth} * kHeight; ++i) {
      const auto colour = static_cast<uint32_t>(i & 0xFFFFFF);
      image.pixels[3 * i] = static_cast<uint8_t>(colour >> 16);
      image.pixels[3 * i + 1] = static_cast<uint8_t>(colour >> 8);
      image.pixels[3 * i + 2] = static_cast<uint8_t>(colour);
    }
    const Pixels rgb = image.pixels;
    adjust_hue(image, factor);
    size_t mismatches = 0;
    for (size_t i = 0; i < rgb.size(); i += 3) {
      const std::array<uint8_t, 3> want = torch_hue(rgb[i], rgb[i + 1], rgb[i + 2], static_cast<float>(factor));
      mismatches += (image.pixels[i] != want[0]) + (image.pixels[i + 1] != want[1]) + (image.pixels[i + 2] != want[2]);
    }
    EXPECT_EQ(mismatches, 0u) << "factor " << factor;
  }
}

TEST(ColorKernelTest, GrayscaleUsesV2WeightsAndTruncates) {
  // White is 254: 255 * (0.2989 + 0.587 + 0.114) = 254.97, truncated (v2 on uint8).
  SampleImage sample{make_image(1, 2, 3, {255, 255, 255, 100, 50, 200}), {}, nullptr};
  rgb_to_grayscale(sample, 1);
  EXPECT_EQ(sample.image.channels, 1);
  EXPECT_EQ(sample.image.pixels, (Pixels{254, 82}));
  rgb_to_grayscale(sample, 3);  // one channel replicated
  EXPECT_EQ(sample.image.channels, 3);
  EXPECT_EQ(sample.image.pixels, (Pixels{254, 254, 254, 82, 82, 82}));
  SampleImage rgb{make_image(1, 1, 3, {100, 50, 200}), {}, nullptr};
  rgb_to_grayscale(rgb, 3);
  EXPECT_EQ(rgb.image.pixels, (Pixels{82, 82, 82}));
}

// Every (r, g, b) once: a 4096 x 4096 image.
Image every_colour() {
  Image image{4096, 4096, 3, Pixels(size_t{3} << 24)};
  for (uint32_t i = 0; i < (1u << 24); ++i) {
    image.pixels[3 * i] = static_cast<uint8_t>(i >> 16);
    image.pixels[3 * i + 1] = static_cast<uint8_t>(i >> 8);
    image.pixels[3 * i + 2] = static_cast<uint8_t>(i);
  }
  return image;
}

// torchvision's float32 gray, written step by step: r * 0.2989, then two
// fused multiply-adds (float products are exact in double).
float torch_gray(uint8_t r, uint8_t g, uint8_t b) {
  float l = static_cast<float>(r) * 0.2989f;
  l = static_cast<float>(static_cast<double>(g) * static_cast<double>(0.587f) + static_cast<double>(l));
  return static_cast<float>(static_cast<double>(b) * static_cast<double>(0.114f) + static_cast<double>(l));
}

TEST(ColorKernelTest, GrayscaleMatchesTheFloat32FormulaForEveryColour) {
  // The kernels compute the floored gray in integers; this pins it to the
  // float32 formula on all 2^24 colours (including the three where float32
  // rounds below the exact sum's integer, e.g. (250, 9, 228) -> 105).
  SampleImage sample{every_colour(), {}, nullptr};
  const Pixels rgb = sample.image.pixels;
  rgb_to_grayscale(sample, 1);
  ASSERT_EQ(sample.image.pixels.size(), size_t{1} << 24);
  size_t mismatches = 0;
  for (size_t i = 0; i < (size_t{1} << 24); ++i) {
    mismatches +=
        sample.image.pixels[i] != static_cast<uint8_t>(torch_gray(rgb[3 * i], rgb[3 * i + 1], rgb[3 * i + 2]));
  }
  EXPECT_EQ(mismatches, 0u);
  EXPECT_EQ(sample.image.pixels[(250 << 16) | (9 << 8) | 228], 105);
}

TEST(ColorKernelTest, SaturationMatchesTheFloat32FormulaForEveryColour) {
  // Every colour (a large image: the AVX2 + FMA path where the CPU has it,
  // and the scalar loop for the last pixels): each value must be
  // torchvision's _blend(image, gray, factor): image * f + gray * (1 - f)
  // (a fused multiply-add, exact in double for these factors), clamped,
  // truncated.
  for (const double factor : {0.0, 0.37, 1.3, 2.0}) {
    Image image = every_colour();
    const Pixels rgb = image.pixels;
    adjust_saturation(image, factor);
    const float ratio = static_cast<float>(factor), alpha = static_cast<float>(1.0 - factor);
    size_t mismatches = 0;
    for (size_t i = 0; i < rgb.size(); i += 3) {
      const float gray = std::floor(torch_gray(rgb[i], rgb[i + 1], rgb[i + 2]));
      for (size_t k = 0; k < 3; ++k) {
        const float x = static_cast<float>(rgb[i + k]) * ratio;
        const auto v = static_cast<float>(static_cast<double>(gray) * static_cast<double>(alpha) + x);
        mismatches += image.pixels[i + k] != static_cast<uint8_t>(std::min(std::max(v, 0.0f), 255.0f));
      }
    }
    EXPECT_EQ(mismatches, 0u) << "factor " << factor;
  }
}

TEST(ColorKernelTest, InvertPosterizeSolarize) {
  Image image = make_image(1, 4, 1, {0, 31, 128, 255});
  invert(image);
  EXPECT_EQ(image.pixels, (Pixels{255, 224, 127, 0}));
  image = make_image(1, 4, 1, {0, 31, 100, 255});
  posterize(image, 3);
  EXPECT_EQ(image.pixels, (Pixels{0, 0, 96, 224}));
  posterize(image, 0);
  EXPECT_EQ(image.pixels, (Pixels{0, 0, 0, 0}));
  image = make_image(1, 4, 1, {0, 31, 100, 255});
  posterize(image, 8);
  EXPECT_EQ(image.pixels, (Pixels{0, 31, 100, 255}));
  EXPECT_EQ(run(solarize, make_image(1, 3, 1, {127, 128, 200}), 128), (Pixels{127, 127, 55}));
  EXPECT_EQ(run(solarize, make_image(1, 3, 1, {127, 128, 200}), 127.5), (Pixels{127, 127, 55}));
  EXPECT_EQ(run(solarize, make_image(1, 2, 1, {0, 255}), -1), (Pixels{255, 0}));
  EXPECT_EQ(run(solarize, make_image(1, 2, 1, {0, 255}), -1.44e17), (Pixels{255, 0}));  // Below int: UB once.
  // The threshold is compared in float32: 127.000001 is 127.
  EXPECT_EQ(run(solarize, make_image(1, 3, 1, {126, 127, 128}), 127.000001), (Pixels{126, 128, 127}));
  EXPECT_EQ(run(solarize, make_image(1, 2, 1, {0, 255}), 255), (Pixels{0, 0}));
}

TEST(ColorJitterTest, DrawsEveryOrderAndFactorsWithinTheirRanges) {
  ColorJitterRanges ranges;
  ranges.brightness = {{0.6, 1.4}};
  ranges.hue = {{-0.1, 0.2}};
  std::map<std::array<int, 4>, int> orders;
  double brightness_sum = 0, hue_sum = 0;
  double brightness_min = 2, brightness_max = 0, hue_min = 1, hue_max = -1;
  constexpr int kDraws = 24000;
  for (int i = 0; i < kDraws; ++i) {
    SampleRng rng(7, 1, static_cast<uint64_t>(i));
    const ColorJitterParams p = sample_color_jitter(ranges, rng);
    ++orders[p.order];
    ASSERT_TRUE(p.brightness && p.hue);
    ASSERT_FALSE(p.contrast || p.saturation);
    brightness_sum += *p.brightness;
    hue_sum += *p.hue;
    brightness_min = std::min(brightness_min, *p.brightness);
    brightness_max = std::max(brightness_max, *p.brightness);
    hue_min = std::min(hue_min, *p.hue);
    hue_max = std::max(hue_max, *p.hue);
  }
  // All 24 orders, each ~1000 times (binomial sd ~31; 6 sd).
  ASSERT_EQ(orders.size(), 24u);
  for (const auto& [order, count] : orders) EXPECT_NEAR(count, kDraws / 24, 190);
  // Uniform: mean at the centre (sd of the mean 0.8 / sqrt(12 * 24000) = 0.0015), extremes near the ends.
  EXPECT_NEAR(brightness_sum / kDraws, 1.0, 0.01);
  EXPECT_NEAR(hue_sum / kDraws, 0.05, 0.005);
  EXPECT_GE(brightness_min, 0.6);
  EXPECT_LT(brightness_min, 0.601);
  EXPECT_LT(brightness_max, 1.4);
  EXPECT_GT(brightness_max, 1.399);
  EXPECT_GE(hue_min, -0.1);
  EXPECT_LT(hue_max, 0.2);
}

TEST(ColorJitterTest, SameStreamSameParameters) {
  ColorJitterRanges ranges;
  ranges.contrast = {{0.5, 1.5}};
  ranges.saturation = {{0, 2}};
  SampleRng a(3, 4, 5), b(3, 4, 5);
  const ColorJitterParams pa = sample_color_jitter(ranges, a), pb = sample_color_jitter(ranges, b);
  EXPECT_EQ(pa.order, pb.order);
  EXPECT_EQ(*pa.contrast, *pb.contrast);
  EXPECT_EQ(*pa.saturation, *pb.saturation);
}

TEST(ColorJitterTest, AppliesTheOpsInTheDrawnOrder) {
  // brightness 2 then contrast 0 gives the mean of the doubled image; the
  // other order doubles the mean.
  ColorJitterParams params;
  params.brightness = 2.0;
  params.contrast = 0.0;
  params.order = {0, 1, 2, 3};
  Image image = make_image(1, 2, 1, {10, 100});
  apply_color_jitter(image, params);
  EXPECT_EQ(image.pixels, (Pixels{110, 110}));
  params.order = {1, 2, 3, 0};
  image = make_image(1, 2, 1, {10, 100});
  apply_color_jitter(image, params);
  EXPECT_EQ(image.pixels, (Pixels{110, 110}));
  params.brightness = 3.0;
  params.order = {3, 0, 2, 1};  // brightness first: mean of {30, 255} = 142.5
  image = make_image(1, 2, 1, {10, 100});
  apply_color_jitter(image, params);
  EXPECT_EQ(image.pixels, (Pixels{142, 142}));
  params.order = {1, 0, 2, 3};  // contrast first: 55 * 3
  image = make_image(1, 2, 1, {10, 100});
  apply_color_jitter(image, params);
  EXPECT_EQ(image.pixels, (Pixels{165, 165}));
}

// The share of 10 000 samples a Random* step changes, with p = 0.3.
double applied_share(const std::string& name, TransformParams params) {
  params["p"] = {0.3};
  const auto step = make_transform_step({name, params});
  EXPECT_EQ(step->kind(), StepKind::kImage);
  int applied = 0;
  for (int i = 0; i < 10000; ++i) {
    SampleImage sample{make_image(1, 3, 3, {10, 20, 200, 30, 60, 90, 250, 130, 0}), {}, nullptr};
    const Pixels before = sample.image.pixels;
    SampleRng rng(11, 0, static_cast<uint64_t>(i));
    step_as<ImageStep>(*step).apply_image(sample, rng);
    applied += sample.image.pixels != before;
  }
  return applied / 10000.0;
}

TEST(ColorStepTest, RandomStepsApplyWithProbabilityP) {
  // Binomial sd sqrt(0.3 * 0.7 / 10000) = 0.0046; 5 sd.
  EXPECT_NEAR(applied_share("random_invert", {}), 0.3, 0.023);
  EXPECT_NEAR(applied_share("random_grayscale", {}), 0.3, 0.023);
  EXPECT_NEAR(applied_share("random_posterize", {{"bits", {2}}}), 0.3, 0.023);
  EXPECT_NEAR(applied_share("random_solarize", {{"threshold", {0}}}), 0.3, 0.023);
}

TEST(ColorStepTest, ProbabilityZeroNeverAppliesAndOneAlways) {
  for (const char* name : {"random_invert", "random_grayscale"}) {
    const auto never = make_transform_step({name, {{"p", {0}}}});
    const auto always = make_transform_step({name, {{"p", {1}}}});
    SampleImage sample{make_image(1, 1, 3, {10, 20, 30}), {}, nullptr};
    SampleRng rng(0, 0, 0);
    step_as<ImageStep>(*never).apply_image(sample, rng);
    EXPECT_EQ(sample.image.pixels, (Pixels{10, 20, 30})) << name;
    step_as<ImageStep>(*always).apply_image(sample, rng);
    EXPECT_NE(sample.image.pixels, (Pixels{10, 20, 30})) << name;
  }
}

void expect_config_error(const TransformSpec& spec, const std::string& message) {
  try {
    make_transform_step(spec);
    ADD_FAILURE() << "no error for " << spec.name;
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kConfig);
    EXPECT_EQ(std::string(e.what()), message);
  }
}

TEST(ColorStepTest, BadArgumentsAreConfigErrorsNamingThem) {
  expect_config_error({"random_invert", {{"p", {1.5}}}}, "RandomInvert: p must be in [0, 1], got 1.5");
  expect_config_error({"random_grayscale", {{"p", {-0.1}}}}, "RandomGrayscale: p must be in [0, 1], got -0.1");
  expect_config_error({"random_posterize", {{"bits", {9}}}},
                      "RandomPosterize: bits must be an integer in [0, 8], got 9");
  expect_config_error({"random_posterize", {{"bits", {2.5}}}},
                      "RandomPosterize: bits must be an integer in [0, 8], got 2.5");
  expect_config_error({"random_solarize", {{"threshold", {256}}}},
                      "RandomSolarize: threshold must be at most 255 (the uint8 maximum), got 256");
  expect_config_error({"color_jitter", {{"hue", {-0.6, 0.1}}}},
                      "ColorJitter: hue must be increasing (min, max) within [-0.5, 0.5], got (-0.6, 0.1)");
  expect_config_error({"color_jitter", {{"brightness", {1.5, 0.5}}}},
                      "ColorJitter: brightness must be increasing (min, max) within [0, inf], got (1.5, 0.5)");
  expect_config_error({"color_jitter", {{"contrast", {1}}}}, "ColorJitter: contrast must have 2 value(s), got [1]");
  expect_config_error({"grayscale", {{"num_output_channels", {2}}}},
                      "Grayscale: num_output_channels must be 1 or 3, got 2");
}

TEST(ColorStepTest, GrayscaleMustGiveThePipelinesChannelCount) {
  const auto step = make_transform_step({"grayscale", {}});
  ChainPlan chain;
  chain.channels = 3;
  try {
    step->plan(chain);
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kConfig);
    EXPECT_EQ(std::string(e.what()),
              "Grayscale: num_output_channels=1 gives 1-channel images but the pipeline outputs 3 channel(s); "
              "pass channels=1 to the loader (or num_output_channels=3)");
  }
  chain.channels = 1;
  step->plan(chain);
  chain.channels = 3;
  make_transform_step({"grayscale", {{"num_output_channels", {3}}}})->plan(chain);
}

TEST(ColorFunctionTest, FunctionsCheckTheirArguments) {
  SampleImage sample{make_image(1, 1, 3, {10, 20, 30}), {}, nullptr};
  apply_image_function({"adjust_brightness", {{"brightness_factor", {2}}}}, sample);
  EXPECT_EQ(sample.image.pixels, (Pixels{20, 40, 60}));
  try {
    apply_image_function({"adjust_hue", {{"hue_factor", {0.7}}}}, sample);
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()), "adjust_hue: hue_factor must be in [-0.5, 0.5], got 0.7");
  }
  try {
    apply_image_function({"adjust_saturation", {{"saturation_factor", {-1}}}}, sample);
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()), "adjust_saturation: saturation_factor must be non-negative, got -1");
  }
  SampleImage two{make_image(1, 1, 2, {10, 20}), {}, nullptr};
  try {
    apply_image_function({"invert", {}}, two);
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()), "invert: image must have 1 or 3 channels, got 2");
  }
}

}  // namespace
}  // namespace conveyor
