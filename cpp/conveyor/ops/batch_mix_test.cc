#include "conveyor/ops/batch_mix.h"

#include <gtest/gtest.h>

#include <cmath>
#include <numeric>
#include <vector>

#include "conveyor/core/error.h"

namespace conveyor {
namespace {

BatchMixSpec spec_of(MixKind kind, bool channels_last = false) {
  BatchMixSpec spec;
  spec.options = {{kind, 1.0}};
  spec.num_classes = 3;
  spec.channels_last = channels_last;
  return spec;
}

TEST(BatchMixTest, BetaDrawsHaveTheDistributionsMoments) {
  for (double alpha : {0.1, 0.5, 1.0, 3.0}) {
    SampleRng rng(1, 2, 3);
    const int n = 50000;
    double sum = 0, sum2 = 0;
    for (int i = 0; i < n; ++i) {
      const double x = sample_beta(alpha, alpha, rng);
      ASSERT_TRUE(x >= 0 && x <= 1) << x;
      sum += x;
      sum2 += x * x;
    }
    const double mean = sum / n, var = sum2 / n - mean * mean;
    EXPECT_NEAR(mean, 0.5, 0.01) << alpha;
    EXPECT_NEAR(var, 1 / (4 * (2 * alpha + 1)), 0.03 * var) << alpha;
  }
}

TEST(BatchMixTest, DrawsDependOnlyOnSeedEpochAndBatch) {
  const BatchMixSpec spec = spec_of(MixKind::kCutMix);
  SampleRng a = batch_mix_rng(5, 1, 9), b = batch_mix_rng(5, 1, 9), c = batch_mix_rng(5, 1, 10);
  const BatchMixParams pa = sample_batch_mix(spec, 20, 30, a), pb = sample_batch_mix(spec, 20, 30, b),
                       pc = sample_batch_mix(spec, 20, 30, c);
  EXPECT_EQ(pa.lambda, pb.lambda);
  EXPECT_EQ(pa.x1, pb.x1);
  EXPECT_NE(pa.lambda, pc.lambda);
}

TEST(BatchMixTest, CutMixPastesThePreviousSamplesBoxInBothLayouts) {
  // 3 samples of 2 channels x 3 rows x 4 columns, every value its sample's index.
  for (bool channels_last : {false, true}) {
    const SampleSpec sample{channels_last ? std::vector<int64_t>{3, 4, 2} : std::vector<int64_t>{2, 3, 4},
                            DType::kUInt8};
    std::vector<uint8_t> images(72);
    for (size_t i = 0; i < images.size(); ++i) images[i] = static_cast<uint8_t>(i / 24);
    BatchMixParams p;
    p.kind = MixKind::kCutMix;
    p.x1 = 1, p.x2 = 3, p.y1 = 0, p.y2 = 2;
    p.label_lambda = 0.5;
    std::vector<float> soft(9);
    apply_batch_mix(p, spec_of(MixKind::kCutMix, channels_last), sample, 3, images.data(), {0, 1, 2}, soft.data());
    for (int s = 0; s < 3; ++s) {
      for (int c = 0; c < 2; ++c) {
        for (int y = 0; y < 3; ++y) {
          for (int x = 0; x < 4; ++x) {
            const size_t at = static_cast<size_t>(s * 24) +
                              static_cast<size_t>(channels_last ? (y * 4 + x) * 2 + c : (c * 3 + y) * 4 + x);
            const bool in_box = x >= 1 && x < 3 && y < 2;
            EXPECT_EQ(images[at], in_box ? (s + 2) % 3 : s) << s << c << y << x << channels_last;
          }
        }
      }
    }
    EXPECT_EQ(soft, (std::vector<float>{0.5f, 0, 0.5f, 0.5f, 0.5f, 0, 0, 0.5f, 0.5f}));
  }
}

TEST(BatchMixTest, MixUpOfOneSampleMixesItWithItself) {
  std::vector<float> image{0.25f, 1.0f};
  BatchMixParams p;
  p.lambda = p.label_lambda = 0.3;
  std::vector<float> soft(3);
  apply_batch_mix(p, spec_of(MixKind::kMixUp), {{1, 1, 2}, DType::kFloat32}, 1, image.data(), {2}, soft.data());
  EXPECT_EQ(image[0], 0.25f * static_cast<float>(1 - 0.3) + 0.25f * static_cast<float>(0.3));
  EXPECT_EQ(soft[2], static_cast<float>(1 - 0.3) + static_cast<float>(0.3));
}

TEST(BatchMixTest, ChecksNameTheProblem) {
  const SampleSpec u8{{3, 4, 4}, DType::kUInt8};
  EXPECT_THROW(check_batch_mix(spec_of(MixKind::kMixUp), u8), Error);
  EXPECT_NO_THROW(check_batch_mix(spec_of(MixKind::kCutMix), u8));
  BatchMixSpec bad = spec_of(MixKind::kCutMix);
  bad.options[0].alpha = 0;
  try {
    check_batch_mix(bad, u8);
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.cause(), "CutMix: alpha must be a finite number > 0, got 0");
  }
  EXPECT_THROW(check_batch_mix(spec_of(MixKind::kCutMix), {{16}, DType::kUInt8}), Error);
  EXPECT_EQ(first_label_outside({0, 2, 3}, 3), 2);
  EXPECT_EQ(first_label_outside({0, 2, -1}, 3), 2);
  EXPECT_EQ(first_label_outside({0, 2}, 3), -1);
}

TEST(BatchMixTest, HugeProbabilitiesAreWeightsLikeAnyOthers) {
  // p = [1e308, 1e308] once summed to infinity and was called "all 0".
  BatchMixSpec spec{{{MixKind::kMixUp, 1.0}, {MixKind::kCutMix, 1.0}}, {1e308, 1e308}, 3, false};
  const SampleSpec f32{{3, 4, 4}, DType::kFloat32};
  EXPECT_NO_THROW(check_batch_mix(spec, f32));
  BatchMixSpec halves = spec;
  halves.p = {0.5, 0.5};
  int cutmix = 0;
  for (uint64_t batch = 0; batch < 400; ++batch) {
    SampleRng a = batch_mix_rng(1, 0, batch), b = batch_mix_rng(1, 0, batch);
    const MixKind kind = sample_batch_mix(spec, 4, 4, a).kind;
    EXPECT_EQ(kind, sample_batch_mix(halves, 4, 4, b).kind) << batch;  // The same draws, scaled exactly.
    cutmix += kind == MixKind::kCutMix;
  }
  EXPECT_GT(cutmix, 150);
  EXPECT_LT(cutmix, 250);
  spec.p = {0, 0};
  try {
    check_batch_mix(spec, f32);
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.cause(), "RandomChoice: p must not be all 0, got [0, 0]");
  }
}

}  // namespace
}  // namespace conveyor
