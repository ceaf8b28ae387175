#include "conveyor/ops/transforms/erase.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "conveyor/core/error.h"
#include "conveyor/core/float16.h"
#include "conveyor/ops/image_pipeline.h"

namespace conveyor {
namespace {

// torchvision 0.29's RandomErasing.make_params box, written step by step from
// its source with its own generator (std::mt19937_64 here): what the
// distribution of sample_erasing_box is compared with.
std::optional<ErasingBox> reference_box(int img_h, int img_w, double s0, double s1, double r0, double r1,
                                        std::mt19937_64& gen) {
  std::uniform_real_distribution<float> area_u(static_cast<float>(s0), static_cast<float>(s1));
  std::uniform_real_distribution<float> ratio_u(std::log(static_cast<float>(r0)), std::log(static_cast<float>(r1)));
  for (int attempt = 0; attempt < 10; ++attempt) {
    const double erase_area = static_cast<double>(img_h) * img_w * area_u(gen);
    const double aspect = std::exp(ratio_u(gen));
    const int h = static_cast<int>(std::nearbyint(std::sqrt(erase_area * aspect)));
    const int w = static_cast<int>(std::nearbyint(std::sqrt(erase_area / aspect)));
    if (!(h < img_h && w < img_w)) continue;
    const int i = std::uniform_int_distribution<int>(0, img_h - h)(gen);
    const int j = std::uniform_int_distribution<int>(0, img_w - w)(gen);
    return ErasingBox{i, j, h, w};
  }
  return std::nullopt;
}

struct BoxStats {
  double none = 0, h = 0, w = 0, top = 0, left = 0, h2 = 0, w2 = 0;
  int h_max = 0, w_max = 0;
};

template <typename Draw>
BoxStats stats_of(int n, Draw draw) {
  BoxStats s;
  for (int k = 0; k < n; ++k) {
    const std::optional<ErasingBox> box = draw(k);
    if (!box) {
      s.none += 1.0 / n;
      continue;
    }
    s.h += box->height;
    s.w += box->width;
    s.h2 += static_cast<double>(box->height) * box->height;
    s.w2 += static_cast<double>(box->width) * box->width;
    s.top += box->top;
    s.left += box->left;
    s.h_max = std::max(s.h_max, box->height);
    s.w_max = std::max(s.w_max, box->width);
  }
  const double m = n * (1 - s.none);
  for (double* v : {&s.h, &s.w, &s.h2, &s.w2, &s.top, &s.left}) *v /= m;
  return s;
}

void expect_same_distribution(int img_h, int img_w, double s0, double s1, double r0, double r1) {
  SCOPED_TRACE(std::to_string(img_h) + "x" + std::to_string(img_w));
  constexpr int kDraws = 20000;
  std::mt19937_64 gen(5);
  const BoxStats ref = stats_of(kDraws, [&](int) { return reference_box(img_h, img_w, s0, s1, r0, r1, gen); });
  const BoxStats got = stats_of(kDraws, [&](int k) {
    SampleRng rng(3, 0, static_cast<uint64_t>(k));
    return sample_erasing_box(img_h, img_w, {s0, s1}, {r0, r1}, rng);
  });
  EXPECT_NEAR(got.none, ref.none, 0.015);
  EXPECT_EQ(got.h_max, ref.h_max);
  EXPECT_EQ(got.w_max, ref.w_max);
  // Means within about 5 standard errors (sides' sd is below a third of the side).
  const double tol_h = 5 * img_h / 3.0 / std::sqrt(kDraws), tol_w = 5 * img_w / 3.0 / std::sqrt(kDraws);
  EXPECT_NEAR(got.h, ref.h, tol_h);
  EXPECT_NEAR(got.w, ref.w, tol_w);
  EXPECT_NEAR(std::sqrt(got.h2 - got.h * got.h), std::sqrt(ref.h2 - ref.h * ref.h), tol_h);
  EXPECT_NEAR(std::sqrt(got.w2 - got.w * got.w), std::sqrt(ref.w2 - ref.w * ref.w), tol_w);
  EXPECT_NEAR(got.top, ref.top, tol_h);
  EXPECT_NEAR(got.left, ref.left, tol_w);
}

TEST(RandomErasingTest, BoxFollowsTorchvisionsRule) {
  expect_same_distribution(224, 224, 0.02, 0.33, 0.3, 3.3);
  expect_same_distribution(32, 100, 0.02, 0.33, 0.3, 3.3);
  // Most attempts fail (h >= 4 or w >= 4): the no-erase rate matters.
  expect_same_distribution(4, 4, 0.3, 0.9, 0.3, 3.3);
  // A fixed area and ratio: h = w = round(sqrt(0.25 * 100)) = 5, every time.
  SampleRng rng(1, 0, 0);
  for (int k = 0; k < 100; ++k) {
    const std::optional<ErasingBox> box = sample_erasing_box(10, 10, {0.25, 0.25}, {1, 1}, rng);
    ASSERT_TRUE(box);
    EXPECT_EQ(box->height, 5);
    EXPECT_EQ(box->width, 5);
    EXPECT_LE(box->top, 5);
    EXPECT_LE(box->left, 5);
  }
  // Never smaller than the image: no box fits.
  EXPECT_FALSE(sample_erasing_box(10, 10, {1, 1}, {1, 1}, rng));
}

// A 2 x 3 sample, 2 channels, values 100 + index, the box rows [1, 2) x columns [1, 3).
template <typename T>
std::vector<T> erased(DType dtype, bool chw, std::vector<float> values) {
  std::vector<T> data(12);
  for (size_t k = 0; k < data.size(); ++k) data[k] = static_cast<T>(100 + k);
  OutputSample sample{data.data(), dtype, chw, 2, 2, 3};
  erase(sample, {1, 1, 5, 2}, values);  // The box's height is clipped to the sample.
  return data;
}

TEST(RandomErasingTest, EraseWritesTheValueConvertedAsTorch) {
  // CHW: channel c's rows [1, 2) x columns [1, 3) are positions 6c + 4, 6c + 5.
  EXPECT_EQ(erased<float>(DType::kFloat32, true, {-1.5f, 0.25f}),
            (std::vector<float>{100, 101, 102, 103, -1.5f, -1.5f, 106, 107, 108, 109, 0.25f, 0.25f}));
  // HWC: pixels (1, 1) and (1, 2) are positions 8, 9 and 10, 11.
  EXPECT_EQ(erased<float>(DType::kFloat32, false, {-1.5f, 0.25f}),
            (std::vector<float>{100, 101, 102, 103, 104, 105, 106, 107, -1.5f, 0.25f, -1.5f, 0.25f}));
  // One value for every channel; float16 bits rounded to nearest even
  // (0.1 -> 0x2e66).
  const std::vector<uint16_t> half = erased<uint16_t>(DType::kFloat16, false, {0.1f});
  EXPECT_EQ(half[8], 0x2e66);
  EXPECT_EQ(half[11], 0x2e66);
  EXPECT_EQ(half[7], 107);
  EXPECT_EQ(float_to_half(-1.5f), 0xbe00);
  EXPECT_EQ(erased<uint16_t>(DType::kFloat16, true, {-1.5f, 2})[4], 0xbe00);
  // uint8: truncated through int64 as torch converts (-1.5 -> -1 -> 255, 300.7 -> 300 -> 44).
  EXPECT_EQ(erased<uint8_t>(DType::kUInt8, true, {-1.5f, 300.7f}),
            (std::vector<uint8_t>{100, 101, 102, 103, 255, 255, 106, 107, 108, 109, 44, 44}));
  EXPECT_EQ(erased<uint8_t>(DType::kUInt8, false, {7.9f}),
            (std::vector<uint8_t>{100, 101, 102, 103, 104, 105, 106, 107, 7, 7, 7, 7}));
}

// A raw 6 x 8 RGB image of 200s through [Normalize(0.5, 0.25), RandomErasing].
std::vector<float> pipeline_output(TransformParams erasing, Layout layout, uint64_t index) {
  ImagePipelineOptions options;
  options.raw_input = RawImageShape{6, 8, 3};
  ImagePipeline pipeline(
      {NormalizeSpec{{0.5f, 0.5f, 0.5f}, {0.25f, 0.25f, 0.25f}}, TransformSpec{"random_erasing", std::move(erasing)}},
      {DType::kFloat32, layout, 3}, kDefaultMaxPixels, options);
  const std::vector<uint8_t> pixels(6 * 8 * 3, 200);
  std::vector<float> out(6 * 8 * 3);
  SampleRng rng(9, 0, index);
  pipeline.apply(pixels, rng, out.data());
  return out;
}

TEST(RandomErasingTest, RunsAfterNormalizeInTheOutputPass) {
  const float normalized = (200.0f / 255.0f - 0.5f) / 0.25f;
  for (Layout layout : {Layout::kCHW, Layout::kHWC}) {
    for (uint64_t index = 0; index < 20; ++index) {
      // area 0.25 * 48 = 12, ratio 3: h = 6 (not < 6), fails; ratio 1/3: h = 2, w = 6.
      const std::vector<float> out = pipeline_output(
          {{"p", {1}}, {"scale", {0.25, 0.25}}, {"ratio", {1.0 / 3, 1.0 / 3}}, {"value", {-3, 0, 3}}}, layout, index);
      int erased = 0;
      for (size_t k = 0; k < out.size(); ++k) {
        const int c = layout == Layout::kCHW ? static_cast<int>(k / 48) : static_cast<int>(k % 3);
        if (out[k] == normalized) continue;
        EXPECT_EQ(out[k], -3.0f + 3.0f * c) << k;
        ++erased;
      }
      EXPECT_EQ(erased, 2 * 6 * 3);
      // Same sample, same box.
      EXPECT_EQ(out, pipeline_output(
                         {{"p", {1}}, {"scale", {0.25, 0.25}}, {"ratio", {1.0 / 3, 1.0 / 3}}, {"value", {-3, 0, 3}}},
                         layout, index));
    }
  }
  // p = 0: nothing erased.
  for (float v : pipeline_output({{"p", {0}}}, Layout::kCHW, 0)) EXPECT_EQ(v, normalized);
}

TEST(RandomErasingTest, RandomValuesAreStandardNormal) {
  // The whole 6 x 8 minus nothing: scale 0.5 of 48 = 24, ratio 1.5: h = 6 fails;
  // use (0.5, 0.5) and ratio (2/3, 2/3): h = 4, w = 6.
  double sum = 0, sum2 = 0;
  int n = 0, within_1sd = 0;
  const float normalized = (200.0f / 255.0f - 0.5f) / 0.25f;
  for (uint64_t index = 0; index < 500; ++index) {
    const std::vector<float> out = pipeline_output(
        {{"p", {1}}, {"scale", {0.5, 0.5}}, {"ratio", {2.0 / 3, 2.0 / 3}}, {"random", {1}}}, Layout::kCHW, index);
    int erased = 0;
    for (float v : out) {
      if (v == normalized) continue;
      sum += v;
      sum2 += static_cast<double>(v) * v;
      within_1sd += std::abs(v) < 1;
      ++n;
      ++erased;
    }
    EXPECT_EQ(erased, 4 * 6 * 3);
  }
  const double mean = sum / n, sd = std::sqrt(sum2 / n - mean * mean);
  // 36 000 values: standard error of the mean 0.005, of the sd 0.004.
  EXPECT_NEAR(mean, 0.0, 0.03);
  EXPECT_NEAR(sd, 1.0, 0.03);
  EXPECT_NEAR(within_1sd / static_cast<double>(n), 0.6827, 0.015);
}

std::string config_error(const TransformParams& params, int channels = 3) {
  try {
    ImagePipelineOptions options;
    options.raw_input = RawImageShape{6, 8, channels};
    ImagePipeline pipeline({TransformSpec{"random_erasing", params}}, {DType::kFloat32, Layout::kCHW, channels},
                           kDefaultMaxPixels, options);
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kConfig);
    return e.cause();
  }
  return "no error";
}

TEST(RandomErasingTest, BadArgumentsAreConfigErrorsNamingThem) {
  EXPECT_EQ(config_error({{"p", {1.5}}}), "transform 0 RandomErasing: p must be in [0, 1], got 1.5");
  EXPECT_EQ(config_error({{"scale", {0.5, 0.1}}}),
            "transform 0 RandomErasing: scale must be (min, max) with min <= max, got (0.5, 0.1)");
  EXPECT_EQ(config_error({{"scale", {0.1, 1.5}}}),
            "transform 0 RandomErasing: scale must be within [0, 1], got (0.1, 1.5)");
  EXPECT_EQ(config_error({{"ratio", {0, 1}}}), "transform 0 RandomErasing: ratio must be positive, got (0, 1)");
  EXPECT_EQ(config_error({{"value", {1, 2}}}),
            "transform 0 RandomErasing: value needs 1 or 3 numbers (one per output channel), got 2");
  EXPECT_EQ(config_error({{"value", {1, 2, 3}}}, 1),
            "transform 0 RandomErasing: value needs 1 or 1 numbers (one per output channel), got 3");
  EXPECT_EQ(config_error({{"value", {1}}, {"random", {1}}}),
            "transform 0 RandomErasing: give value or random, not both");
  EXPECT_EQ(config_error({{"value", {1}}}), "no error");
}

TEST(RandomErasingTest, NothingButOutputStepsMayFollowIt) {
  try {
    ImagePipeline pipeline({CenterCropSpec{{4, 4}}, TransformSpec{"random_erasing", {}}, NormalizeSpec{{0.5f}, {0.5f}}},
                           {DType::kFloat32, Layout::kCHW, 1});
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kConfig);
    EXPECT_EQ(e.cause(),
              "transform 2 normalize comes after random_erasing, which works on the written output: put it after "
              "every other transform");
  }
}

TEST(RandomErasingTest, EraseFunctionOnUint8Images) {
  SampleImage sample{Image{2, 2, 3, std::vector<uint8_t>(12, 9)}, {}, nullptr};
  apply_image_function({"erase", {{"i", {1}}, {"j", {0}}, {"h", {7}}, {"w", {1}}, {"v", {1, 2, 3}}}}, sample);
  EXPECT_EQ(sample.image.pixels, (std::vector<uint8_t>{9, 9, 9, 9, 9, 9, 1, 2, 3, 9, 9, 9}));
  try {
    apply_image_function({"erase", {{"i", {-1}}, {"j", {0}}, {"h", {1}}, {"w", {1}}, {"v", {0}}}}, sample);
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.cause(), "erase: i must be an integer >= 0, got -1");
  }
}

}  // namespace
}  // namespace conveyor
