#include "conveyor/ops/transforms/histogram.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "conveyor/core/error.h"

namespace conveyor {
namespace {

// Expected values: torchvision 0.29.1's transforms.v2.functional on uint8 tensors.

using Pixels = std::vector<uint8_t>;

TEST(AutocontrastTest, StretchesEachChannelInFloat32) {
  // (x - 50) / (100 * float32(1 / 255)): 127.49999.., truncated; 150 -> 254.
  Image image{1, 3, 1, {50, 100, 150}};
  autocontrast(image);
  EXPECT_EQ(image.pixels, (Pixels{0, 127, 254}));
  // Channels apart; a constant channel is unchanged.
  Image rgb{1, 2, 3, {0, 7, 10, 255, 7, 20}};
  autocontrast(rgb);
  EXPECT_EQ(rgb.pixels, (Pixels{0, 7, 0, 255, 7, 254}));
}

TEST(AutocontrastTest, FindsEachChannelsRangeAnywhereInALargeImage) {
  // 37 x 29 pixels: whole 48-byte blocks and a tail. Channel k spans
  // [20 + k, 200 + k]; its minimum and maximum are planted at two of: a pixel
  // of the first block, one of a middle block, the last pixel (in the tail),
  // in turn. The expected value is torchvision's float32 arithmetic with that
  // range.
  const size_t pixels = 37 * 29, first = 3, middle = pixels / 2, last = pixels - 1;
  const std::pair<size_t, size_t> places[] = {{first, middle}, {middle, last}, {last, first}};
  for (int channels : {1, 3}) {
    for (const auto& [at_min, at_max] : places) {
      Image image{37, 29, channels, Pixels(pixels * channels)};
      uint32_t state = 7;
      for (size_t i = 0; i < image.pixels.size(); ++i) {
        state = state * 1664525u + 1013904223u;
        image.pixels[i] = static_cast<uint8_t>(40 + (state >> 24) % 140 + i % channels);
      }
      const size_t n = image.pixels.size();
      ASSERT_NE(n % 48, 0u);
      for (int k = 0; k < channels; ++k) {
        image.pixels[at_min * channels + k] = static_cast<uint8_t>(20 + k);
        image.pixels[at_max * channels + k] = static_cast<uint8_t>(200 + k);
      }
      const Image before = image;
      autocontrast(image);
      for (size_t i = 0; i < n; ++i) {
        const int k = static_cast<int>(i % channels);
        const float scale = static_cast<float>(180) * static_cast<float>(1.0 / 255);
        const float v = (static_cast<float>(before.pixels[i]) - static_cast<float>(20 + k)) / scale;
        ASSERT_EQ(image.pixels[i], static_cast<uint8_t>(std::min(std::max(v, 0.0f), 255.0f)))
            << channels << " channels, minimum at pixel " << at_min << ", maximum at " << at_max << ", value " << i;
      }
    }
  }
}

TEST(EqualizeTest, CountsEveryPixelOfALargeImage) {
  // An odd number of RGB pixels (the counters take pixels in pairs) with
  // skewed values: the tables are PIL's rule on histograms counted here.
  Image image{31, 17, 3, Pixels(static_cast<size_t>(31) * 17 * 3)};
  uint32_t state = 3;
  for (auto& v : image.pixels) {
    state = state * 1664525u + 1013904223u;
    const uint32_t r = state >> 24;
    v = static_cast<uint8_t>(r * r / 255);
  }
  const Image before = image;
  equalize(image);
  const int64_t count = 31 * 17;
  for (int k = 0; k < 3; ++k) {
    int64_t hist[256] = {};
    for (size_t i = static_cast<size_t>(k); i < before.pixels.size(); i += 3) ++hist[before.pixels[i]];
    int last = 255;
    while (hist[last] == 0) --last;
    const int64_t step = (count - hist[last]) / 255;
    ASSERT_GT(step, 0);
    int64_t lut[256], cumulative = 0;
    lut[0] = 0;
    for (int v = 1; v < 256; ++v) {
      cumulative += hist[v - 1];
      lut[v] = std::min<int64_t>((cumulative + step / 2) / step, 255);
    }
    for (size_t i = static_cast<size_t>(k); i < before.pixels.size(); i += 3) {
      ASSERT_EQ(image.pixels[i], lut[before.pixels[i]]) << "channel " << k << ", value " << i;
    }
  }
}

TEST(EqualizeTest, PilsRuleAsV2ComputesIt) {
  // 255 zeros, 255 x 100, one 200: step = (511 - 1) / 255 = 2; 100 -> (255 + 1) / 2,
  // 200 -> (510 + 1) / 2.
  Pixels values(255, 0);
  values.insert(values.end(), 255, 100);
  values.push_back(200);
  Image image{1, 511, 1, values};
  equalize(image);
  EXPECT_EQ(image.pixels[0], 0);
  EXPECT_EQ(image.pixels[255], 128);
  EXPECT_EQ(image.pixels[510], 255);
  // step 0 (fewer than 255 pixels off the top value): unchanged.
  Image small{1, 3, 3, {1, 2, 3, 4, 5, 6, 7, 8, 9}};
  equalize(small);
  EXPECT_EQ(small.pixels, (Pixels{1, 2, 3, 4, 5, 6, 7, 8, 9}));
}

TEST(HistogramStepTest, StepsAreRandomApply) {
  const auto step = make_transform_step({"random_autocontrast", {{"p", {0.25}}}});
  EXPECT_EQ(step->kind(), StepKind::kImage);
  int applied = 0;
  for (int i = 0; i < 10000; ++i) {
    SampleImage sample{Image{1, 3, 1, {50, 100, 150}}, {}, nullptr};
    SampleRng rng(2, 0, static_cast<uint64_t>(i));
    step_as<ImageStep>(*step).apply_image(sample, rng);
    applied += sample.image.pixels[2] == 254;
  }
  EXPECT_NEAR(applied, 2500, 220);  // binomial sd 43
  try {
    make_transform_step({"random_equalize", {{"p", {-1}}}});
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()), "RandomEqualize: p must be in [0, 1], got -1");
  }
}

}  // namespace
}  // namespace conveyor
