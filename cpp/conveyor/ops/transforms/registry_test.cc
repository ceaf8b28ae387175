#include "conveyor/ops/transforms/registry.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <functional>
#include <limits>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "conveyor/core/error.h"
#include "conveyor/ops/image_pipeline.h"
#include "conveyor/ops/testing/test_images.h"
#include "conveyor/ops/transforms/center_crop.h"
#include "conveyor/ops/transforms/normalize.h"
#include "conveyor/ops/transforms/resize.h"

namespace conveyor {
namespace {

// Two transforms that exist only in this test binary: each is this file's
// code alone (no edit anywhere else), registered by name and used through
// the registry like the built-in ones.

// Pointwise: 1 - x.
class InvertStep final : public PointwiseStep {
 public:
  float map_value(int /*channel*/, float value) const override { return 1.0f - value; }
};

// Geometric: the top-left `size` x `size` square.
class TopLeftStep final : public GeometricStep {
 public:
  explicit TopLeftStep(int size) : size_(size) {}
  StepPlan plan(ChainPlan& chain) const override {
    chain.size = Size2D{size_, size_};
    return {};
  }
  void place(Placement& placement, SampleRng& /*rng*/) const override { placement.crop(0, 0, size_, size_); }

 private:
  int size_;
};

const bool kRegistered = register_transform("test_invert",
                                            [](const TransformParams& params) {
                                              TransformArgs("TestInvert", params).finish();
                                              return std::make_unique<InvertStep>();
                                            }) &&
                         register_transform("test_top_left",
                                            [](const TransformParams& params) {
                                              TransformArgs args("TestTopLeft", params);
                                              const Size2D size = args.size2d("size");
                                              args.finish();
                                              return std::make_unique<TopLeftStep>(size.height);
                                            }) &&
                         // A functional op: adds `amount` to every value (saturating).
                         register_image_function("test_add", [](const TransformParams& params, SampleImage& sample) {
                           TransformArgs args("test_add", params);
                           const double amount = args.number("amount");
                           args.finish();
                           for (uint8_t& v : sample.image.pixels) v = static_cast<uint8_t>(std::min(255.0, v + amount));
                         });

std::span<const uint8_t> as_span(const std::vector<uint8_t>& v) { return {v.data(), v.size()}; }

template <typename T>
std::vector<T> run(const ImagePipeline& p, const std::vector<uint8_t>& data,
                   std::vector<BoundingBox>* boxes = nullptr) {
  std::vector<T> out(p.output_spec().num_bytes() / sizeof(T));
  SampleRng rng(1, 0, 0);
  if (boxes != nullptr) {
    p.apply_tracked(as_span(data), rng, out.data(), *boxes);
  } else {
    p.apply(as_span(data), rng, out.data());
  }
  return out;
}

std::string config_error(std::vector<TransformSpec> chain, ImageOutputSpec output = {}) {
  try {
    ImagePipeline p(std::move(chain), output);
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kConfig);
    return e.what();
  }
  return "accepted";
}

TEST(TransformRegistryTest, TestOnlyTransformsAreRegisteredFromTheirOwnFile) {
  ASSERT_TRUE(kRegistered);
  const std::vector<std::string> names = registered_transform_names();
  // The built-in ones and every test-only one of this test binary.
  for (const std::string name : {"center_crop", "horizontal_flip", "normalize", "random_resized_crop", "resize",
                                 "test_invert", "test_top_left"}) {
    EXPECT_NE(std::find(names.begin(), names.end(), name), names.end()) << name;
  }
}

TEST(TransformRegistryTest, PointwiseTestTransformRunsInTheOutputPass) {
  const auto png = testing::encode_png(testing::make_pattern(20, 30));
  const ImagePipeline plain({CenterCropSpec{{8, 8}}}, {DType::kUInt8, Layout::kHWC});
  const ImagePipeline inverted({CenterCropSpec{{8, 8}}, TransformSpec{"test_invert", {}}},
                               {DType::kFloat32, Layout::kHWC});
  const std::vector<uint8_t> u8 = run<uint8_t>(plain, png);
  const std::vector<float> f32 = run<float>(inverted, png);
  ASSERT_EQ(u8.size(), f32.size());
  for (size_t i = 0; i < u8.size(); ++i) ASSERT_EQ(f32[i], 1.0f - static_cast<float>(u8[i]) / 255.0f) << i;
}

TEST(TransformRegistryTest, GeometricTestTransformMovesPixelsAndBoxes) {
  const Image image = testing::make_pattern(20, 30);
  const auto png = testing::encode_png(image);
  const ImagePipeline p({TransformSpec{"test_top_left", {{"size", {5}}}}}, {DType::kUInt8, Layout::kHWC});
  // One box straddles the crop's corner (clipped), one lies outside it (dropped).
  std::vector<BoundingBox> boxes{{2, 1, 10, 10, 7}, {6, 6, 3, 3, 8}};
  const std::vector<uint8_t> out = run<uint8_t>(p, png, &boxes);
  for (int y = 0; y < 5; ++y) {
    for (int x = 0; x < 5 * 3; ++x) ASSERT_EQ(out[y * 15 + x], image.pixels[y * 30 * 3 + x]) << y << "," << x;
  }
  EXPECT_EQ(boxes, (std::vector<BoundingBox>{{2, 1, 3, 4, 7}}));
  // The planner's ordering rule applies to it like to a built-in crop.
  EXPECT_EQ(config_error({NormalizeSpec{{0, 0, 0}, {1, 1, 1}}, TransformSpec{"test_top_left", {{"size", {5}}}}}),
            "transform 1 test_top_left (a resize or crop) comes after Normalize: put Normalize after every resize and "
            "crop");
}

TEST(TransformRegistryTest, EachStepIsTakenAsTheBaseOfItsKindAndNoOther) {
  const auto crop = make_transform_step(CenterCropSpec{{4, 4}});
  const auto flip = make_transform_step({"horizontal_flip", {}});
  const auto normalize = make_transform_step(NormalizeSpec{{0.5f}, {0.5f}});
  const auto jitter = make_transform_step({"color_jitter", {{"brightness", {0.5, 1.5}}}});
  const auto erasing = make_transform_step({"random_erasing", {}});
  EXPECT_EQ(crop->kind(), StepKind::kGeometric);
  EXPECT_EQ(flip->kind(), StepKind::kMirror);
  EXPECT_EQ(&step_as<PlacementStep>(*crop), crop.get());
  EXPECT_EQ(&step_as<PlacementStep>(*flip), flip.get());
  EXPECT_EQ(&step_as<PointwiseStep>(*normalize), normalize.get());
  EXPECT_EQ(&step_as<ImageStep>(*jitter), jitter.get());
  EXPECT_EQ(&step_as<OutputStep>(*erasing), erasing.get());
  for (const auto* step : {crop.get(), flip.get(), normalize.get(), erasing.get()}) {
    try {
      step_as<ImageStep>(*step);
      ADD_FAILURE() << "no error";
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), ErrorKind::kInternal);
      EXPECT_EQ(e.cause(), "a transform step taken for another kind");
    }
  }
  // A padding mode that needs pixels makes the same transform a step on the image.
  EXPECT_EQ(make_transform_step({"pad", {{"padding", {1, 1, 1, 1}}}})->kind(), StepKind::kGeometric);
  EXPECT_EQ(make_transform_step({"pad", {{"padding", {1, 1, 1, 1}}, {"padding_mode", {2}}}})->kind(), StepKind::kImage);
  EXPECT_EQ(make_transform_step({"random_crop", {{"size", {4}}, {"padding_mode", {1}}}})->kind(), StepKind::kImage);
}

TEST(TransformRegistryTest, PlanReturnsTheStepsOwnChoicesAndChangesOnlyTheSize) {
  ChainPlan chain;
  EXPECT_FALSE(make_transform_step(ResizeSpec{0, {10, 12}, false})->plan(chain).antialias);
  ASSERT_TRUE(chain.size.has_value());
  EXPECT_EQ(chain.size->height, 10);
  EXPECT_EQ(chain.size->width, 12);
  const StepPlan crop = make_transform_step(CenterCropSpec{{4, 6}})->plan(chain);
  EXPECT_TRUE(crop.antialias);
  EXPECT_EQ(crop.fill, (std::optional<Fill>{Fill{0, 0, 0}}));
  EXPECT_EQ(chain.size->width, 6);
  const StepPlan pad = make_transform_step({"pad", {{"padding", {2, 2, 2, 2}}, {"fill", {1, 2, 3}}}})->plan(chain);
  EXPECT_EQ(pad.fill, (std::optional<Fill>{Fill{1, 2, 3}}));
  EXPECT_EQ(chain.size->height, 8);
  EXPECT_EQ(chain.size->width, 10);
  EXPECT_FALSE(make_transform_step({"horizontal_flip", {}})->plan(chain).fill.has_value());
}

TEST(TransformRegistryTest, TheDefaultsAreWhatTheFactoryFallsBackTo) {
  EXPECT_EQ(
      transform_defaults({"random_resized_crop", {{"size", {8}}}}),
      (TransformParams{
          {"antialias", {1}}, {"interpolation", {1}}, {"ratio", {3.0 / 4.0, 4.0 / 3.0}}, {"scale", {0.08, 1.0}}}));
  // A given argument has no default to report; a required one is an error as make_transform_step's.
  EXPECT_EQ(transform_defaults({"horizontal_flip", {{"p", {0.25}}}}), TransformParams{});
  EXPECT_EQ(transform_defaults({"horizontal_flip", {}}), (TransformParams{{"p", {0.5}}}));
  try {
    transform_defaults({"center_crop", {}});
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.cause(), "CenterCrop: size is required");
  }
  // Recording ends with the call: a step built afterwards records nothing anywhere.
  EXPECT_NE(make_transform_step({"vertical_flip", {}}), nullptr);
  EXPECT_EQ(transform_defaults({"vertical_flip", {{"p", {1}}}}), TransformParams{});
}

TEST(TransformRegistryTest, ImageFunctionsRunByNameWithTheirArguments) {
  SampleImage sample;
  sample.image = {1, 2, 3, {0, 10, 20, 250, 251, 252}};
  apply_image_function({"test_add", {{"amount", {5}}}}, sample);
  EXPECT_EQ(sample.image.pixels, (std::vector<uint8_t>{5, 15, 25, 255, 255, 255}));
  EXPECT_NE(std::find(registered_image_function_names().begin(), registered_image_function_names().end(), "test_add"),
            registered_image_function_names().end());
  try {
    apply_image_function({"test_add", {{"amount", {1}}, {"amout", {1}}}}, sample);
    FAIL() << "an unknown argument must be refused";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kConfig);
    EXPECT_EQ(e.cause(), "test_add: unknown argument 'amout'");
  }
  try {
    apply_image_function({"no_such_function", {}}, sample);
    FAIL() << "an unknown function must be refused";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kConfig);
    EXPECT_NE(std::string(e.cause()).find("unknown image function 'no_such_function' (registered: "),
              std::string::npos);
  }
}

TEST(TransformRegistryTest, ErrorsNameTheTransformAndTheArgument) {
  // The message lists every registered name (built-in and this binary's test-only ones).
  const std::string unknown = config_error({CenterCropSpec{{4, 4}}, TransformSpec{"no_such_transform", {}}});
  EXPECT_EQ(
      unknown.rfind(
          "transform 1 unknown transform 'no_such_transform' (registered: aug_mix, auto_augment, center_crop, ", 0),
      0)
      << unknown;
  EXPECT_NE(unknown.find(", test_invert, "), std::string::npos) << unknown;
  EXPECT_EQ(config_error({TransformSpec{"resize", {{"sise", {4}}}}}), "transform 0 Resize: size is required");
  EXPECT_EQ(config_error({TransformSpec{"resize", {{"size", {4, 4}}, {"sise", {4}}}}}),
            "transform 0 Resize: unknown argument 'sise'");
  EXPECT_EQ(config_error({TransformSpec{"center_crop", {{"size", {4, 4, 4}}}}}),
            "transform 0 CenterCrop: size must have 1 or 2 value(s), got [4, 4, 4]");
  EXPECT_EQ(config_error({TransformSpec{"horizontal_flip", {{"p", {0.5, 0.5}}}}}),
            "transform 0 RandomHorizontalFlip: p must have 1 value(s), got [0.5, 0.5]");
  EXPECT_EQ(config_error({TransformSpec{"horizontal_flip", {{"p", {1e-9, 0.1}}}}}),
            "transform 0 RandomHorizontalFlip: p must have 1 value(s), got [1e-09, 0.1]");
  EXPECT_EQ(config_error({CenterCropSpec{{4, 4}}, TransformSpec{"resize", {{"size", {4, 4}}, {"antialias", {2}}}}}),
            "transform 1 Resize: antialias must be a bool, got 2");
  EXPECT_EQ(config_error({CenterCropSpec{{4, 4}}, TransformSpec{"resize", {{"size", {4, 4}}, {"antialias", {1e-9}}}}}),
            "transform 1 Resize: antialias must be a bool, got 1e-09");
}

TEST(TransformRegistryTest, SizesOutsideAnIntAreConfigErrorsNamingTheArgument) {
  // Sizes arrive as doubles (from Python or a config); each must be an int.
  for (const double bad : {3e9, 2147483648.0, 0.0, -1.0, 1.5}) {
    const std::string message = config_error({TransformSpec{"resize", {{"size", {bad, 8}}}}});
    EXPECT_EQ(message.rfind("transform 0 Resize: size must be positive integers of at most 2147483647, got [", 0), 0)
        << message;
  }
  EXPECT_EQ(config_error({TransformSpec{"random_resized_crop", {{"size", {3e9}}}}}),
            "transform 0 RandomResizedCrop: size must be positive integers of at most 2147483647, got 3000000000");
  EXPECT_EQ(config_error({TransformSpec{"center_crop", {{"size", {1e300}}}}}).rfind("transform 0 CenterCrop: size", 0),
            0);
  // Each side fits, the output's byte count does not.
  EXPECT_EQ(config_error({CenterCropSpec{{2000000000, 2000000000}}}),
            "ImagePipeline: the output size overflows: 4000000000000000000 x 3");
}

// The error `call` throws: its kind and what().
std::pair<ErrorKind, std::string> error_of(const std::function<void()>& call) {
  try {
    call();
  } catch (const Error& e) {
    return {e.kind(), e.what()};
  }
  return {ErrorKind::kInternal, "accepted"};
}

TEST(ImageFunctionTest, EveryFunctionRefusesAnEmptyImageBeforeRunning) {
  // Empty images once crashed resize and pad (edge) and made pad (reflect)
  // spin: the entry refuses them for every function, whatever its arguments.
  const uint8_t pixel[3] = {1, 2, 3};
  for (const std::string& name : registered_image_function_names()) {
    for (const auto& size : {std::pair{0, 3}, std::pair{3, 0}, std::pair{0, 0}}) {
      const int height = size.first, width = size.second;  // Captured: clang 14 cannot capture bindings.
      const auto [kind, message] = error_of([&] { apply_image_function({name, {}}, pixel, height, width, 3); });
      EXPECT_EQ(kind, ErrorKind::kConfig) << name;
      EXPECT_EQ(message, name + ": an image of " + std::to_string(width) + "x" + std::to_string(height) +
                             " pixels (each side must be at least 1)");
    }
  }
}

TEST(ImageFunctionTest, EveryFunctionWithoutItsArgumentsRunsOrNamesTheMissingOne) {
  // pad without padding once read past an empty fallback (found by fuzzing).
  const Image image = testing::make_pattern(6, 7);
  for (const std::string& name : registered_image_function_names()) {
    const auto [kind, message] = error_of([&] {
      apply_image_function({name, {}}, image.pixels.data(), 6, 7, 3, 1000);
    });
    if (message == "accepted") continue;
    EXPECT_EQ(kind, ErrorKind::kConfig) << name;
    EXPECT_EQ(message.rfind(name + ": ", 0), 0u) << message;  // "...: padding is required", "...: give ...".
  }
  EXPECT_EQ(error_of([&] {
              apply_image_function({"pad", {}}, image.pixels.data(), 6, 7, 3);
            }).second,
            "pad: padding is required");
}

TEST(ImageFunctionTest, ASideBeyondAnIntOrTheLimitIsRefusedBeforeAnyRead) {
  // 2**32 + 3 rows once wrapped to 3. The pixels are never read: one byte here.
  const uint8_t pixel[1] = {0};
  EXPECT_EQ(error_of([&] {
              apply_image_function({"invert", {}}, pixel, (int64_t{1} << 32) + 3, 1, 1);
            }),
            std::pair(ErrorKind::kTooLarge,
                      std::string("invert: an image of 1x4294967299 pixels, a side longer than 2147483647")));
  EXPECT_EQ(error_of([&] {
              apply_image_function({"invert", {}}, pixel, 100, 100, 1, 5000);
            }).first,
            ErrorKind::kTooLarge);
  EXPECT_EQ(error_of([&] {
              apply_image_function({"invert", {}}, pixel, 1, 1, 4);
            }),
            std::pair(ErrorKind::kConfig, std::string("invert: image must have 1 or 3 channels, got 4")));
}

TEST(ImageFunctionTest, WhatAFunctionMakesIsCheckedBeforeItIsAllocated) {
  const Image image = testing::make_pattern(32, 48);
  const auto call = [&](const std::string& name, TransformParams params) {
    return error_of([&] { apply_image_function({name, params}, image.pixels.data(), 32, 48, 3, 100000); });
  };
  // 60032 x 60048 pixels would be 10.8 GB: refused by size, not by the allocator.
  EXPECT_EQ(call("pad", {{"padding", {30000, 30000, 30000, 30000}}, {"padding_mode", {2}}}),
            std::pair(ErrorKind::kTooLarge,
                      std::string("pad: an image of 60048x60032 pixels, more than max_pixels (100000)")));
  EXPECT_EQ(call("crop", {{"top", {0}}, {"left", {0}}, {"size", {1000, 1000}}}).first, ErrorKind::kTooLarge);
  EXPECT_EQ(call("center_crop", {{"output_size", {1000, 1000}}}).first, ErrorKind::kTooLarge);
  EXPECT_EQ(call("resize", {{"size", {1000, 1000}}}).first, ErrorKind::kTooLarge);
  EXPECT_EQ(
      call("resized_crop", {{"top", {0}}, {"left", {0}}, {"height", {8}}, {"width", {8}}, {"size", {999, 999}}}).first,
      ErrorKind::kTooLarge);
  // A center this far away leaves float32 no digit of the expanded size.
  EXPECT_EQ(
      call("rotate", {{"angle", {30}}, {"expand", {1}}, {"center", {3e9, 3e9}}}),
      std::pair(ErrorKind::kConfig, std::string("rotate: an image of 0x0 pixels (each side must be at least 1)")));
  EXPECT_EQ(call("rotate", {{"angle", {45}}, {"expand", {1}}}).second,
            "accepted");  // 57 x 57 (the max_pixels of this test allow it).
}

TEST(ImageFunctionTest, TheSizeCheckNamesTheSizeAndNeverOverflows) {
  EXPECT_EQ(error_of([] { check_image_size(5, 0, 100, "Pad"); }),
            std::pair(ErrorKind::kConfig, std::string("Pad: an image of 0x5 pixels (each side must be at least 1)")));
  EXPECT_EQ(error_of([] { check_image_size(11, 10, 100, "Pad"); }),
            std::pair(ErrorKind::kTooLarge, std::string("Pad: an image of 10x11 pixels, more than "
                                                        "max_pixels (100)")));
  EXPECT_EQ(error_of([] { check_image_size(10, 10, 100, "Pad"); }).second, "accepted");
  // A side past an int under the largest limit (Pad once narrowed it): refused.
  EXPECT_EQ(error_of([] { check_image_size(int64_t{1} << 31, 1, std::numeric_limits<int64_t>::max(), "Pad"); }),
            std::pair(ErrorKind::kTooLarge,
                      std::string("Pad: an image of 1x2147483648 pixels, a side longer than 2147483647")));
  // A product that would overflow int64_t, under the largest limit: sides fit, the product does not.
  EXPECT_EQ(error_of([] { check_image_size(int64_t{1} << 30, int64_t{1} << 30, (int64_t{1} << 60) - 1, "x"); }).first,
            ErrorKind::kTooLarge);
}

}  // namespace
}  // namespace conveyor
