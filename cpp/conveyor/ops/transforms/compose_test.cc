#include "conveyor/ops/transforms/compose.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "conveyor/core/error.h"

namespace conveyor {
namespace {

using Pixels = std::vector<uint8_t>;

const Pixels kPixels{10, 20, 200, 30, 60, 90, 250, 130, 0};

// What the step of `spec` makes of a 1x3 RGB image for sample `index`.
Pixels apply(const TransformSpec& spec, uint64_t index) {
  const auto step = make_transform_step(spec);
  SampleImage sample{Image{1, 3, 3, kPixels}, {}, nullptr};
  SampleRng rng(11, 0, index);
  step_as<ImageStep>(*step).apply_image(sample, rng);
  return sample.image.pixels;
}

const TransformSpec kInvert{"random_invert", {{"p", {1}}}};
const TransformSpec kPosterize{"random_posterize", {{"bits", {1}}, {"p", {1}}}};

TransformSpec compound(std::string name, TransformParams params, std::vector<TransformSpec> children) {
  return {std::move(name), std::move(params), nullptr, std::move(children)};
}

std::string config_error(const TransformSpec& spec) {
  try {
    make_transform_step(spec);
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kConfig);
    return e.cause();
  }
  return "no error";
}

TEST(ComposeTest, RandomApplyRunsItsTransformsInOrderWithProbabilityP) {
  const Pixels both = apply(compound("random_apply", {{"p", {1}}}, {kInvert, kPosterize}), 0);
  // Invert then posterize to 1 bit: 255 - v, then its top bit.
  Pixels expected;
  for (uint8_t v : kPixels) expected.push_back(static_cast<uint8_t>((255 - v) & 0x80));
  EXPECT_EQ(both, expected);
  EXPECT_EQ(apply(compound("random_apply", {{"p", {0}}}, {kInvert}), 0), kPixels);
  int applied = 0;
  for (uint64_t i = 0; i < 10000; ++i) {
    applied += apply(compound("random_apply", {{"p", {0.3}}}, {kInvert}), i) != kPixels;
  }
  EXPECT_NEAR(applied / 10000.0, 0.3, 0.023);  // Binomial sd 0.0046; 5 sd.
}

TEST(ComposeTest, RandomChoiceRunsOneTransformWithItsWeightsShare) {
  const Pixels inverted = apply(kInvert, 0);
  const Pixels posterized = apply(kPosterize, 0);
  int second = 0;
  for (uint64_t i = 0; i < 10000; ++i) {
    const Pixels out = apply(compound("random_choice", {{"p", {1, 3}}}, {kInvert, kPosterize}), i);
    ASSERT_TRUE(out == inverted || out == posterized);
    second += out == posterized;
  }
  EXPECT_NEAR(second / 10000.0, 0.75, 0.022);  // Binomial sd 0.0043; 5 sd.
  EXPECT_EQ(apply(compound("random_choice", {{"p", {0, 2}}}, {kInvert, kPosterize}), 5), posterized);
  // Weights whose sum overflows, or that are subnormal, keep their ratios.
  for (const double w : {1e308, 5e-324}) {
    int first = 0;
    for (uint64_t i = 0; i < 2000; ++i) {
      first += apply(compound("random_choice", {{"p", {w, w}}}, {kInvert, kPosterize}), i) == inverted;
    }
    EXPECT_NEAR(first / 2000.0, 0.5, 0.056) << w;  // Binomial sd 0.011; 5 sd.
  }
  // Without p: equal weights.
  int without_p = 0;
  for (uint64_t i = 0; i < 2000; ++i) {
    const Pixels out = apply(compound("random_choice", {}, {kInvert, kPosterize}), i);
    ASSERT_TRUE(out == inverted || out == posterized);
    without_p += out == posterized;
  }
  EXPECT_NEAR(without_p / 2000.0, 0.5, 0.056);  // Binomial sd 0.011; 5 sd.
}

TEST(ComposeTest, RandomOrderRunsEveryTransformInADrawnOrder) {
  Pixels invert_first, posterize_first;
  for (uint8_t v : kPixels) {
    invert_first.push_back(static_cast<uint8_t>((255 - v) & 0x80));
    posterize_first.push_back(static_cast<uint8_t>(255 - (v & 0x80)));
  }
  int inverted_first = 0;
  for (uint64_t i = 0; i < 2000; ++i) {
    const Pixels out = apply(compound("random_order", {}, {kInvert, kPosterize}), i);
    ASSERT_TRUE(out == invert_first || out == posterize_first) << i;
    inverted_first += out == invert_first;
  }
  EXPECT_NEAR(inverted_first / 2000.0, 0.5, 0.056);  // Binomial sd 0.011; 5 sd.
}

TEST(ComposeTest, TheOutputSizeIsTheTransformsOnlyWhenEveryOutcomeGivesIt) {
  const TransformSpec expand{"random_rotation", {{"degrees", {0, 90}}, {"expand", {1}}}};
  const auto planned = [](const TransformSpec& spec) {
    ChainPlan chain;
    chain.size = Size2D{8, 6};
    make_transform_step(spec)->plan(chain);
    return chain.size;
  };
  EXPECT_TRUE(planned(compound("random_apply", {}, {kInvert})).has_value());
  EXPECT_FALSE(planned(compound("random_apply", {}, {expand})).has_value());
  EXPECT_FALSE(planned(compound("random_choice", {}, {kInvert, expand})).has_value());
  EXPECT_FALSE(planned(compound("random_order", {}, {kInvert, expand})).has_value());
  EXPECT_EQ(planned(compound("random_order", {}, {kInvert, kPosterize}))->width, 6);
}

TEST(ComposeTest, ErrorsNameTheCompoundAndTheTransform) {
  EXPECT_EQ(config_error(compound("random_apply", {}, {{"horizontal_flip", {}}})),
            "RandomApply: transforms[0] is a crop, resize or flip; per sample, RandomApply takes steps on the image "
            "(colour, blur, rotations, policies, T.Lambda)");
  EXPECT_EQ(config_error(compound("random_order", {}, {kInvert, {"normalize", {{"mean", {0}}, {"std", {1}}}}})),
            "RandomOrder: transforms[1] is Normalize-like (pointwise); per sample, RandomOrder takes steps on the "
            "image (colour, blur, rotations, policies, T.Lambda)");
  EXPECT_EQ(config_error(compound("random_apply", {}, {})), "RandomApply: transforms must not be empty");
  EXPECT_EQ(config_error(compound("random_choice", {}, {})), "RandomChoice: transforms must not be empty");
  EXPECT_EQ(config_error(compound("random_choice", {{"p", {0, 0}}}, {kInvert, kPosterize})),
            "RandomChoice: p must not be all 0, got [0, 0]");
  EXPECT_EQ(config_error(compound("random_apply", {{"p", {2}}}, {kInvert})), "RandomApply: p must be in [0, 1], got 2");
  EXPECT_EQ(config_error(compound("random_apply", {}, {{"random_invert", {{"p", {3}}}}})),
            "random_apply: transforms[0]: RandomInvert: p must be in [0, 1], got 3");
  EXPECT_EQ(config_error(compound("resize", {{"size", {4}}}, {kInvert})), "resize takes no transforms");
}

TEST(ComposeTest, ACompoundsDefaultsAreItsOwnNotItsChildrens) {
  EXPECT_EQ(transform_defaults(compound("random_apply", {}, {kPosterize})), (TransformParams{{"p", {0.5}}}));
}

}  // namespace
}  // namespace conveyor
