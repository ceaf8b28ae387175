#include "conveyor/ops/transforms/policies.h"

#include <gtest/gtest.h>

#include <array>
#include <cmath>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "conveyor/core/error.h"

namespace conveyor {
namespace {

// Expected magnitudes: torchvision 0.29.1's _AUGMENTATION_SPACE formulas by
// hand, in float32 as torch.linspace computes them: step = end / (bins - 1)
// (float32), value start + step * i below bins / 2, else end - step * (bins - 1 - i).

using Pixels = std::vector<uint8_t>;
using S = AugmentSpace;
using O = AugmentOp;

double magnitude(S space, O op, int bins, int bin, int h = 224, int w = 224) {
  const auto m = augment_magnitude(space, op, bins, bin, h, w);
  EXPECT_TRUE(m.has_value()) << augment_op_name(op);
  return m.value_or(-1);
}

TEST(PolicyTablesTest, LinspaceIsTorchsFloat32Kernel) {
  EXPECT_EQ(linspace_float32(0.0f, 0.99f, 31, 0), 0.0f);
  EXPECT_EQ(linspace_float32(0.0f, 0.99f, 31, 30), 0.99f);
  EXPECT_EQ(linspace_float32(0.0f, 0.99f, 31, 1), 0.99f / 30);
  // Second half counts down from the end: 0.99 - 0.033 * 14 in float32.
  EXPECT_EQ(static_cast<double>(linspace_float32(0.0f, 0.99f, 31, 16)), 0.527999997138977);
  // One rounding (a fused multiply-add, as torch's kernel): 16 / 15 * 15
  // rounds below 16 (two roundings would give 16.0), so TrivialAugmentWide's
  // TranslateX at bin 15 moves int(15.999999) = 15 pixels in torchvision.
  EXPECT_EQ(static_cast<double>(linspace_float32(0.0f, 32.0f, 31, 15)), 15.999999046325684);
  EXPECT_EQ(static_cast<double>(linspace_float32(0.0f, 32.0f, 10, 5)), 17.77777862548828);
}

TEST(PolicyTablesTest, TrivialAugmentWideMagnitudes) {
  // Bins 1, 15, 30 of 31: linspace(0, 0.99), (0, 32), (0, 135), (1, 0).
  for (const O op : {O::kShearX, O::kShearY, O::kBrightness, O::kColor, O::kContrast, O::kSharpness}) {
    EXPECT_EQ(magnitude(S::kTrivialAugmentWide, op, 31, 0), 0.0);
    EXPECT_EQ(magnitude(S::kTrivialAugmentWide, op, 31, 1), 0.032999999821186066);
    EXPECT_EQ(magnitude(S::kTrivialAugmentWide, op, 31, 15), 0.4950000047683716);
    EXPECT_EQ(magnitude(S::kTrivialAugmentWide, op, 31, 30), 0.9900000095367432);
  }
  for (const O op : {O::kTranslateX, O::kTranslateY}) {
    EXPECT_EQ(magnitude(S::kTrivialAugmentWide, op, 31, 1, 500, 300), 1.0666667222976685);  // Not the size.
    EXPECT_EQ(magnitude(S::kTrivialAugmentWide, op, 31, 16), 17.066665649414062);
    EXPECT_EQ(magnitude(S::kTrivialAugmentWide, op, 31, 30), 32.0);
  }
  EXPECT_EQ(magnitude(S::kTrivialAugmentWide, O::kRotate, 31, 1), 4.5);
  EXPECT_EQ(magnitude(S::kTrivialAugmentWide, O::kRotate, 31, 30), 135.0);
  EXPECT_EQ(magnitude(S::kTrivialAugmentWide, O::kSolarize, 31, 0), 1.0);
  EXPECT_EQ(magnitude(S::kTrivialAugmentWide, O::kSolarize, 31, 9), 0.699999988079071);
  EXPECT_EQ(magnitude(S::kTrivialAugmentWide, O::kSolarize, 31, 30), 0.0);
  // Posterize: round(8 - i / (30 / 6)), half to even.
  const std::vector<int> bits = {8, 8, 8, 7, 7, 7, 7, 7, 6, 6, 6, 6, 6, 5, 5, 5,
                                 5, 5, 4, 4, 4, 4, 4, 3, 3, 3, 3, 3, 2, 2, 2};
  for (int i = 0; i < 31; ++i) EXPECT_EQ(magnitude(S::kTrivialAugmentWide, O::kPosterize, 31, i), bits[i]) << i;
  for (const O op : {O::kIdentity, O::kAutoContrast, O::kEqualize}) {
    EXPECT_FALSE(augment_magnitude(S::kTrivialAugmentWide, op, 31, 5, 224, 224).has_value());
  }
}

TEST(PolicyTablesTest, RandAugmentMagnitudes) {
  for (const O op : {O::kShearX, O::kShearY}) {
    EXPECT_EQ(magnitude(S::kRandAugment, op, 31, 1), 0.010000000707805157);
    EXPECT_EQ(magnitude(S::kRandAugment, op, 31, 30), 0.30000001192092896);
  }
  // 150 / 331 * width: the image's size matters.
  EXPECT_EQ(magnitude(S::kRandAugment, O::kTranslateX, 31, 30, 100, 224), 101.51057434082031);
  EXPECT_EQ(magnitude(S::kRandAugment, O::kTranslateY, 31, 30, 224, 100), 101.51057434082031);
  EXPECT_EQ(magnitude(S::kRandAugment, O::kTranslateX, 31, 9, 100, 224), 30.45317268371582);
  EXPECT_EQ(magnitude(S::kRandAugment, O::kRotate, 31, 9), 9.0);
  for (const O op : {O::kBrightness, O::kColor, O::kContrast, O::kSharpness}) {
    EXPECT_EQ(magnitude(S::kRandAugment, op, 31, 9), 0.26999998092651367);
    EXPECT_EQ(magnitude(S::kRandAugment, op, 31, 30), 0.8999999761581421);
  }
  // round(8 - i / (30 / 4)).
  const std::vector<int> bits = {8, 8, 8, 8, 7, 7, 7, 7, 7, 7, 7, 7, 6, 6, 6, 6,
                                 6, 6, 6, 5, 5, 5, 5, 5, 5, 5, 5, 4, 4, 4, 4};
  for (int i = 0; i < 31; ++i) EXPECT_EQ(magnitude(S::kRandAugment, O::kPosterize, 31, i), bits[i]) << i;
  // AutoAugment's bins of 10: round(8 - i / 2.25); linspace steps of 1/9.
  const std::vector<int> bits10 = {8, 8, 7, 7, 6, 6, 5, 5, 4, 4};
  for (int i = 0; i < 10; ++i) EXPECT_EQ(magnitude(S::kRandAugment, O::kPosterize, 10, i), bits10[i]) << i;
  EXPECT_EQ(magnitude(S::kRandAugment, O::kSolarize, 10, 5), 0.4444444477558136);
  EXPECT_EQ(magnitude(S::kRandAugment, O::kRotate, 10, 5), 16.666667938232422);
  EXPECT_EQ(magnitude(S::kRandAugment, O::kBrightness, 10, 5), 0.5);
  EXPECT_FALSE(augment_magnitude(S::kRandAugment, O::kInvert, 10, 5, 224, 224).has_value());
}

TEST(PolicyTablesTest, SignedOpsAndNames) {
  for (int i = 0; i <= static_cast<int>(O::kInvert); ++i) {
    const auto op = static_cast<O>(i);
    EXPECT_EQ(augment_op_signed(op), i >= 1 && i <= 9) << augment_op_name(op);
  }
  EXPECT_EQ(augment_op_name(O::kIdentity), "Identity");
  EXPECT_EQ(augment_op_name(O::kEqualize), "Equalize");
  EXPECT_EQ(augment_op_name(O::kInvert), "Invert");
}

TEST(PolicyTablesTest, AutoAugmentPoliciesAsTorchvisionLists) {
  const auto& imagenet = auto_augment_policy(AutoAugmentPolicy::kImageNet);
  EXPECT_EQ(imagenet[0][0].op, O::kPosterize);
  EXPECT_EQ(imagenet[0][0].probability, 0.4);
  EXPECT_EQ(imagenet[0][0].bin, 8);
  EXPECT_EQ(imagenet[24][1].op, O::kEqualize);
  EXPECT_EQ(imagenet[24][1].probability, 0.6);
  const auto& cifar = auto_augment_policy(AutoAugmentPolicy::kCifar10);
  EXPECT_EQ(cifar[1][1].op, O::kTranslateX);
  EXPECT_EQ(cifar[24][0].op, O::kTranslateY);
  const auto& svhn = auto_augment_policy(AutoAugmentPolicy::kSvhn);
  EXPECT_EQ(svhn[0][0].op, O::kShearX);
  EXPECT_EQ(svhn[24][1].op, O::kInvert);
  EXPECT_EQ(svhn[24][1].probability, 0.1);
  // Ops without magnitudes carry no bin, the others one of 10.
  for (const auto* policy : {&imagenet, &cifar, &svhn}) {
    for (const auto& sub : *policy) {
      for (const auto& e : sub) {
        const bool has = augment_magnitude(S::kRandAugment, e.op, 10, 0, 10, 10).has_value();
        EXPECT_EQ(e.bin >= 0, has) << augment_op_name(e.op);
        EXPECT_LT(e.bin, 10);
      }
    }
  }
}

// Over n draws, a count expected `expected` times stays within 6 standard deviations.
void expect_near_count(int count, double expected, double p, const std::string& what) {
  EXPECT_NEAR(count, expected, 6 * std::sqrt(expected * (1 - p)) + 1) << what;
}

TEST(PolicyDrawTest, TrivialAugmentWideChoiceBinsAndSigns) {
  constexpr int kDraws = 28000;
  std::array<int, kAugmentChoiceCount> ops{};
  std::map<double, int> rotate_magnitudes;
  int negative = 0, signed_ops = 0;
  for (int i = 0; i < kDraws; ++i) {
    SampleRng rng(7, 0, static_cast<uint64_t>(i));
    const AugmentDraw d = draw_trivial_augment(31, 64, 48, rng);
    ++ops[static_cast<size_t>(d.op)];
    if (d.op == O::kRotate) ++rotate_magnitudes[std::abs(d.magnitude)];
    if (augment_op_signed(d.op)) {
      ++signed_ops;
      negative += d.magnitude < 0;
    }
    if (!augment_magnitude(S::kTrivialAugmentWide, d.op, 31, 0, 64, 48)) {
      EXPECT_EQ(d.magnitude, 0.0);
    }
  }
  for (int k = 0; k < kAugmentChoiceCount; ++k) {
    expect_near_count(ops[k], kDraws / 14.0, 1.0 / 14, std::string(augment_op_name(static_cast<O>(k))));
  }
  // Rotate's magnitude: one of the 31 bins (4.5 degrees apart), uniformly.
  EXPECT_EQ(rotate_magnitudes.size(), 31u);
  for (const auto& [m, count] : rotate_magnitudes) {
    EXPECT_EQ(std::fmod(m, 4.5), 0.0) << m;
    expect_near_count(count, ops[static_cast<size_t>(O::kRotate)] / 31.0, 1.0 / 31, "rotate bin");
  }
  // Bin 0 is 0 (-0.0 when negated) and counts as not negative; the rest is half.
  expect_near_count(negative, signed_ops * 0.5 * 30 / 31, 0.5, "negative");
}

TEST(PolicyDrawTest, RandAugmentChoiceAndFixedMagnitude) {
  constexpr int kDraws = 14000;
  std::array<int, kAugmentChoiceCount> ops{};
  int negative = 0, signed_ops = 0;
  for (int i = 0; i < kDraws; ++i) {
    SampleRng rng(3, 1, static_cast<uint64_t>(i));
    const AugmentDraw d = draw_rand_augment_op(31, 9, 224, 224, rng);
    ++ops[static_cast<size_t>(d.op)];
    if (const auto m = augment_magnitude(S::kRandAugment, d.op, 31, 9, 224, 224)) {
      EXPECT_EQ(std::abs(d.magnitude), *m);
    }
    if (augment_op_signed(d.op)) {
      ++signed_ops;
      negative += d.magnitude < 0;
    }
  }
  for (int k = 0; k < kAugmentChoiceCount; ++k) {
    expect_near_count(ops[k], kDraws / 14.0, 1.0 / 14, std::string(augment_op_name(static_cast<O>(k))));
  }
  expect_near_count(negative, signed_ops * 0.5, 0.5, "negative");
}

TEST(PolicyDrawTest, AutoAugmentSubPolicyAndProbabilities) {
  // ImageNet's sub-policy 0 is (Posterize 0.4 bin 8, Rotate 0.6 bin 9): over
  // the draws that pick it, Posterize 4 bits applies 40 % of the time.
  constexpr int kDraws = 50000;
  int posterize = 0, rotate = 0, first_picked = 0;
  std::array<int, 15> op_counts{};
  for (int i = 0; i < kDraws; ++i) {
    SampleRng rng(11, 0, static_cast<uint64_t>(i));
    SampleRng copy = rng;
    const auto& chosen = auto_augment_policy(AutoAugmentPolicy::kImageNet)[copy.below(25)];
    const auto draws = draw_auto_augment(AutoAugmentPolicy::kImageNet, 224, 224, rng);
    for (const AugmentDraw& d : draws) ++op_counts[static_cast<size_t>(d.op)];
    if (&chosen != &auto_augment_policy(AutoAugmentPolicy::kImageNet)[0]) continue;
    ++first_picked;
    for (const AugmentDraw& d : draws) {
      if (d.op == O::kPosterize) {
        ++posterize;
        EXPECT_EQ(d.magnitude, 4.0);
      } else {
        ++rotate;
        EXPECT_EQ(std::abs(d.magnitude), 30.0);
      }
    }
  }
  expect_near_count(first_picked, kDraws / 25.0, 1.0 / 25, "sub-policy 0");
  expect_near_count(posterize, first_picked * 0.4, 0.4, "posterize");
  expect_near_count(rotate, first_picked * 0.6, 0.6, "rotate");
  // ImageNet's policy has no shear Y, translations, brightness, identity.
  for (const O op : {O::kShearY, O::kTranslateX, O::kTranslateY, O::kBrightness, O::kIdentity}) {
    EXPECT_EQ(op_counts[static_cast<size_t>(op)], 0) << augment_op_name(op);
  }
  EXPECT_GT(op_counts[static_cast<size_t>(O::kEqualize)], 0);
}

TEST(PolicyOpsTest, OpsRunTheKernelsWithTorchvisionsArguments) {
  const Pixels row = {10, 20, 30, 40, 50, 60, 70, 200};
  const auto run = [&](O op, double m) {
    SampleImage s{Image{1, 8, 1, row}, {}, nullptr};
    apply_augment_op(s, op, m, Interpolation::kNearest, FillArg{{7}});
    return s.image.pixels;
  };
  EXPECT_EQ(run(O::kIdentity, 5), row);
  // int(2.9) = 2 pixels right, int(-1.9) = 1 left; fill 7.
  EXPECT_EQ(run(O::kTranslateX, 2.9), (Pixels{7, 7, 10, 20, 30, 40, 50, 60}));
  EXPECT_EQ(run(O::kTranslateX, -1.9), (Pixels{20, 30, 40, 50, 60, 70, 200, 7}));
  // Posterize int(3.0) = 3 bits; Solarize at 255 * 0.2 = 51.
  EXPECT_EQ(run(O::kPosterize, 3.0), (Pixels{0, 0, 0, 32, 32, 32, 64, 192}));
  EXPECT_EQ(run(O::kSolarize, 0.2), (Pixels{10, 20, 30, 40, 50, 195, 185, 55}));
  EXPECT_EQ(run(O::kInvert, 0), (Pixels{245, 235, 225, 215, 205, 195, 185, 55}));
  // Brightness 1 + (-0.5): x * 0.5 truncated.
  EXPECT_EQ(run(O::kBrightness, -0.5), (Pixels{5, 10, 15, 20, 25, 30, 35, 100}));
  EXPECT_EQ(run(O::kAutoContrast, 0), (Pixels{0, 13, 26, 40, 53, 67, 80, 255}));
}

TEST(PolicyStepTest, StepsApplyTheirDraws) {
  Pixels pixels(24 * 20 * 3);
  for (size_t i = 0; i < pixels.size(); ++i) pixels[i] = static_cast<uint8_t>((i * 37) % 251);
  const auto step = make_transform_step({"trivial_augment_wide", {}});
  EXPECT_EQ(step->kind(), StepKind::kImage);
  const auto rand = make_transform_step({"rand_augment", {{"num_ops", {3}}, {"magnitude", {5}}}});
  const auto autoaug = make_transform_step({"auto_augment", {{"policy", {1}}, {"fill", {1, 2, 3}}}});
  for (uint64_t i = 0; i < 64; ++i) {
    SampleImage got{Image{20, 24, 3, pixels}, {}, nullptr};
    SampleImage want{Image{20, 24, 3, pixels}, {}, nullptr};
    SampleRng rng(5, 0, i), ref(5, 0, i);
    step_as<ImageStep>(*step).apply_image(got, rng);
    const AugmentDraw d = draw_trivial_augment(31, 20, 24, ref);
    apply_augment_op(want, d.op, d.magnitude, Interpolation::kNearest, FillArg{});
    EXPECT_EQ(got.image.pixels, want.image.pixels) << i;

    SampleImage got_ra{Image{20, 24, 3, pixels}, {}, nullptr};
    SampleImage want_ra{Image{20, 24, 3, pixels}, {}, nullptr};
    SampleRng rng_ra(5, 0, i), ref_ra(5, 0, i);
    step_as<ImageStep>(*rand).apply_image(got_ra, rng_ra);
    for (int k = 0; k < 3; ++k) {
      const AugmentDraw dk = draw_rand_augment_op(31, 5, 20, 24, ref_ra);
      apply_augment_op(want_ra, dk.op, dk.magnitude, Interpolation::kNearest, FillArg{});
    }
    EXPECT_EQ(got_ra.image.pixels, want_ra.image.pixels) << i;

    SampleImage got_aa{Image{20, 24, 3, pixels}, {}, nullptr};
    SampleImage want_aa{Image{20, 24, 3, pixels}, {}, nullptr};
    SampleRng rng_aa(5, 0, i), ref_aa(5, 0, i);
    step_as<ImageStep>(*autoaug).apply_image(got_aa, rng_aa);
    for (const AugmentDraw& dk : draw_auto_augment(AutoAugmentPolicy::kCifar10, 20, 24, ref_aa)) {
      apply_augment_op(want_aa, dk.op, dk.magnitude, Interpolation::kNearest, FillArg{{1, 2, 3}});
    }
    EXPECT_EQ(got_aa.image.pixels, want_aa.image.pixels) << i;
  }
}

TEST(PolicyTablesTest, AugMixMagnitudes) {
  // Bins of 10; translations by up to a third of the size; posterize round(4 - i / 2.25).
  EXPECT_EQ(magnitude(S::kAugMix, O::kTranslateX, 10, 9, 100, 300), 100.0);
  EXPECT_EQ(magnitude(S::kAugMix, O::kTranslateY, 10, 9, 90, 300), 30.0);
  EXPECT_EQ(magnitude(S::kAugMix, O::kRotate, 10, 5), 16.666667938232422);
  EXPECT_EQ(magnitude(S::kAugMix, O::kShearX, 10, 9), 0.30000001192092896);
  const std::vector<int> bits = {4, 4, 3, 3, 2, 2, 1, 1, 0, 0};
  for (int i = 0; i < 10; ++i) EXPECT_EQ(magnitude(S::kAugMix, O::kPosterize, 10, i), bits[i]) << i;
}

TEST(PolicyDrawTest, DirichletWeightsSumToOneWithMeanOneOverN) {
  constexpr int kDraws = 20000;
  for (const double alpha : {1.0, 0.3, 4.0}) {
    std::array<double, 3> sum{}, sum_sq{};
    for (int i = 0; i < kDraws; ++i) {
      SampleRng rng(1, 0, static_cast<uint64_t>(i));
      const std::vector<float> w = sample_dirichlet(alpha, 3, rng);
      ASSERT_EQ(w.size(), 3u);
      EXPECT_NEAR(w[0] + w[1] + w[2], 1.0f, 1e-6f);
      for (size_t k = 0; k < 3; ++k) {
        EXPECT_GE(w[k], 0.0f);
        sum[k] += w[k];
        sum_sq[k] += static_cast<double>(w[k]) * w[k];
      }
    }
    // Dirichlet(a, a, a): mean 1/3, variance (1/3)(2/3) / (3a + 1).
    const double variance = (1.0 / 3) * (2.0 / 3) / (3 * alpha + 1);
    for (size_t k = 0; k < 3; ++k) {
      EXPECT_NEAR(sum[k] / kDraws, 1.0 / 3, 6 * std::sqrt(variance / kDraws)) << alpha;
      EXPECT_NEAR(sum_sq[k] / kDraws - (sum[k] / kDraws) * (sum[k] / kDraws), variance, 0.1 * variance) << alpha;
    }
  }
}

TEST(PolicyDrawTest, AugMixOpChoice) {
  constexpr int kDraws = 26000;
  for (const bool all_ops : {true, false}) {
    AugMixParams params;
    params.all_ops = all_ops;
    params.severity = 2;
    std::array<int, 15> ops{};
    for (int i = 0; i < kDraws; ++i) {
      SampleRng rng(2, 0, static_cast<uint64_t>(i));
      const AugmentDraw d = draw_aug_mix_op(params, 90, 300, rng);
      ++ops[static_cast<size_t>(d.op)];
      if (d.op == O::kTranslateX) {
        // Bins 0 and 1 of severity 2: 0 or 100 / 9 pixels.
        EXPECT_TRUE(d.magnitude == 0.0 ||
                    std::abs(d.magnitude) == magnitude(S::kAugMix, O::kTranslateX, 10, 1, 90, 300));
      }
    }
    const int n = all_ops ? 13 : 9;
    EXPECT_EQ(ops[static_cast<size_t>(O::kIdentity)] + ops[static_cast<size_t>(O::kInvert)], 0);
    for (const O op : {O::kBrightness, O::kColor, O::kContrast, O::kSharpness, O::kShearX, O::kEqualize}) {
      const bool drawn = all_ops || op == O::kShearX || op == O::kEqualize;
      if (!drawn) {
        EXPECT_EQ(ops[static_cast<size_t>(op)], 0) << augment_op_name(op);
      } else {
        expect_near_count(ops[static_cast<size_t>(op)], kDraws / static_cast<double>(n), 1.0 / n,
                          std::string(augment_op_name(op)));
      }
    }
  }
}

TEST(PolicyStepTest, AugMixMixesTheChainsInFloat32) {
  Pixels pixels(16 * 12 * 3);
  for (size_t i = 0; i < pixels.size(); ++i) pixels[i] = static_cast<uint8_t>((i * 53) % 256);
  const auto step = make_transform_step({"aug_mix", {{"severity", {5}}, {"chain_depth", {2}}}});
  for (uint64_t s = 0; s < 16; ++s) {
    SampleImage got{Image{12, 16, 3, pixels}, {}, nullptr};
    SampleRng rng(9, 0, s), ref(9, 0, s);
    step_as<ImageStep>(*step).apply_image(got, rng);
    // By hand: the draws in torchvision's order, torch's float32 roundings.
    AugMixParams params;
    params.severity = 5;
    params.chain_depth = 2;
    const std::vector<float> m = sample_dirichlet(1.0, 2, ref);
    const std::vector<float> w = sample_dirichlet(1.0, 3, ref);
    std::vector<float> mix(pixels.size());
    for (size_t i = 0; i < pixels.size(); ++i) mix[i] = m[0] * static_cast<float>(pixels[i]);
    for (int k = 0; k < 3; ++k) {
      SampleImage chain{Image{12, 16, 3, pixels}, {}, nullptr};
      for (int d = 0; d < 2; ++d) {
        const AugmentDraw draw = draw_aug_mix_op(params, 12, 16, ref);
        apply_augment_op(chain, draw.op, draw.magnitude, Interpolation::kBilinear, FillArg{});
      }
      const float weight = w[static_cast<size_t>(k)] * m[1];
      for (size_t i = 0; i < pixels.size(); ++i) mix[i] += weight * static_cast<float>(chain.image.pixels[i]);
    }
    for (size_t i = 0; i < pixels.size(); ++i) ASSERT_EQ(got.image.pixels[i], static_cast<uint8_t>(mix[i])) << i;
  }
}

std::string config_error(const TransformSpec& spec) {
  try {
    make_transform_step(spec);
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kConfig);
    return e.what();
  }
  return "no error";
}

TEST(PolicyStepTest, BadArgumentsAreConfigErrors) {
  EXPECT_EQ(config_error({"rand_augment", {{"num_ops", {-1}}}}),
            "RandAugment: num_ops must be an integer in [0, 1000], got -1");
  EXPECT_EQ(config_error({"rand_augment", {{"magnitude", {31}}}}),
            "RandAugment: magnitude must be an integer in [0, num_magnitude_bins - 1 = 30], got 31");
  EXPECT_EQ(config_error({"rand_augment", {{"magnitude", {2}}, {"num_magnitude_bins", {2}}}}),
            "RandAugment: magnitude must be an integer in [0, num_magnitude_bins - 1 = 1], got 2");
  EXPECT_EQ(config_error({"trivial_augment_wide", {{"num_magnitude_bins", {1}}}}),
            "TrivialAugmentWide: num_magnitude_bins must be an integer in [2, 1000000], got 1");
  EXPECT_EQ(config_error({"auto_augment", {{"policy", {3}}}}),
            "AutoAugment: policy must be 0 (imagenet), 1 (cifar10) or 2 (svhn), got 3");
  EXPECT_EQ(config_error({"auto_augment", {{"interpolation", {2}}}}),
            "AutoAugment: interpolation must be 0 (nearest) or 1 (bilinear)");
  EXPECT_EQ(config_error({"aug_mix", {{"severity", {11}}}}), "AugMix: severity must be an integer in [1, 10], got 11");
  EXPECT_EQ(config_error({"aug_mix", {{"mixture_width", {0}}}}),
            "AugMix: mixture_width must be an integer in [1, 100], got 0");
  EXPECT_EQ(config_error({"aug_mix", {{"alpha", {0}}}}), "AugMix: alpha must be in (0, 1000000], got 0");
}

}  // namespace
}  // namespace conveyor
