// Variable-size outputs (ImagePipelineOptions::variable_size) and the
// user-function step (TransformSpec::function, T.Lambda's engine side).

#include <gtest/gtest.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "conveyor/core/error.h"
#include "conveyor/ops/image_pipeline.h"
#include "conveyor/ops/testing/test_images.h"

namespace conveyor {
namespace {

using testing::encode_png;
using testing::make_pattern;

ImagePipelineOptions variable() {
  ImagePipelineOptions options;
  options.variable_size = true;
  return options;
}

// Runs `pipeline` on `png` through apply_variable; the sample's spec and bytes.
std::pair<SampleSpec, std::vector<uint8_t>> run(const ImagePipeline& pipeline, const std::vector<uint8_t>& png) {
  SampleSpec spec;
  std::vector<uint8_t> out;
  SampleRng rng(1, 2, 3);
  pipeline.apply_variable(
      png, rng,
      [&](const SampleSpec& s) -> void* {
        spec = s;
        out.resize(s.num_bytes());
        return out.data();
      },
      nullptr);
  return {spec, out};
}

TEST(ImagePipelineVariableTest, AShorterSideResizeGivesEachImageItsOwnSize) {
  ImagePipeline pipeline({ResizeSpec{10}}, {DType::kUInt8, Layout::kHWC, 3}, kDefaultMaxPixels, variable());
  EXPECT_FALSE(pipeline.fixed_shape());
  EXPECT_EQ(pipeline.output_spec().shape, (std::vector<int64_t>{-1, -1, 3}));
  const auto [spec, pixels] = run(pipeline, encode_png(make_pattern(20, 30, 3)));
  EXPECT_EQ(spec.shape, (std::vector<int64_t>{10, 15, 3}));
  // The same as the fixed chain Resize((10, 15)).
  ImagePipeline fixed({ResizeSpec{0, {10, 15}}}, {DType::kUInt8, Layout::kHWC, 3});
  std::vector<uint8_t> expected(fixed.output_spec().num_bytes());
  SampleRng rng(1, 2, 3);
  fixed.apply(encode_png(make_pattern(20, 30, 3)), rng, expected.data());
  EXPECT_EQ(pixels, expected);
  // apply() has no size to write at.
  std::vector<uint8_t> out(1000);
  EXPECT_THROW(pipeline.apply(encode_png(make_pattern(20, 30, 3)), rng, out.data()), Error);
}

TEST(ImagePipelineVariableTest, NoTransformGivesTheDecodedImageInTheLayoutAndDtype) {
  ImagePipeline pipeline({}, {DType::kFloat32, Layout::kCHW, 3}, kDefaultMaxPixels, variable());
  const Image image = make_pattern(7, 5, 3);
  const auto [spec, bytes] = run(pipeline, encode_png(image));
  EXPECT_EQ(spec.shape, (std::vector<int64_t>{3, 7, 5}));
  EXPECT_EQ(spec.dtype, DType::kFloat32);
  const auto* values = reinterpret_cast<const float*>(bytes.data());
  EXPECT_EQ(values[2 * 35 + 4 * 5 + 3], static_cast<float>(image.pixels[(4 * 5 + 3) * 3 + 2]) / 255.0f);
}

TEST(ImagePipelineVariableTest, WithoutTheOptionAChainWithoutAFixedSizeIsRefused) {
  EXPECT_THROW(ImagePipeline({ResizeSpec{10}}, {DType::kUInt8, Layout::kHWC, 3}), Error);
}

TEST(FunctionStepTest, AUserFunctionChangesTheSizeAndTheChainGoesOn) {
  // Keeps the top-left 6 x 8 and paints it white; then CenterCrop(4).
  TransformSpec user{"Lambda(crop)", {}, [](SampleImage& sample) {
                       Image& in = sample.image;
                       Image out{6, 8, in.channels, std::vector<uint8_t>(6 * 8 * in.channels, 255)};
                       in = std::move(out);
                     }};
  ImagePipeline pipeline({user, CenterCropSpec{{4, 4}}}, {DType::kUInt8, Layout::kHWC, 3});
  EXPECT_TRUE(pipeline.fixed_shape());
  std::vector<uint8_t> out(4 * 4 * 3);
  SampleRng rng(0, 0, 0);
  pipeline.apply(encode_png(make_pattern(20, 30, 3)), rng, out.data());
  EXPECT_EQ(out, std::vector<uint8_t>(48, 255));
  // Last in the chain: variable size.
  ImagePipeline last({user}, {DType::kUInt8, Layout::kHWC, 3}, kDefaultMaxPixels, variable());
  EXPECT_EQ(run(last, encode_png(make_pattern(20, 30, 3))).first.shape, (std::vector<int64_t>{6, 8, 3}));
}

TEST(FunctionStepTest, AnotherChannelCountFailsTheSampleAndErrorsKeepTheirAttachment) {
  TransformSpec gray{"Lambda(gray)", {}, [](SampleImage& sample) { sample.image = Image{2, 2, 1, {1, 2, 3, 4}}; }};
  ImagePipeline pipeline({gray, CenterCropSpec{{2, 2}}}, {DType::kUInt8, Layout::kHWC, 3});
  std::vector<uint8_t> out(12);
  SampleRng rng(0, 0, 0);
  try {
    pipeline.apply(encode_png(make_pattern(4, 4, 3)), rng, out.data());
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.cause(), "Lambda(gray) returned an image of 1 channel(s); it must keep the chain's 3");
  }
  struct Note : ErrorAttachment {};
  auto note = std::make_shared<Note>();
  TransformSpec raising{
      "Lambda(raises)", {}, [note](SampleImage&) { throw Error(ErrorKind::kInternal, "no", {}, note); }};
  ImagePipeline failing({raising, CenterCropSpec{{2, 2}}}, {DType::kUInt8, Layout::kHWC, 3});
  try {
    failing.apply(encode_png(make_pattern(4, 4, 3)), rng, out.data());
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.attachment(), note);
    EXPECT_EQ(e.with_key("k").attachment(), note);
  }
  EXPECT_THROW(make_transform_step({"Lambda(x)", {{"p", {1}}}, [](SampleImage&) {}}), Error);
}

}  // namespace
}  // namespace conveyor
