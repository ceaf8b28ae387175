#include "conveyor/ops/transforms/histogram.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <string>
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
    step->apply_image(sample, rng);
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
