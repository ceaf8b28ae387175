#include "conveyor/ops/raw_decoder.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "conveyor/core/error.h"
#include "conveyor/ops/image_pipeline.h"

namespace conveyor {
namespace {

// Pixel (y, x, c) of a raw H×W×C test image: distinct for every position.
std::vector<uint8_t> pattern(int h, int w, int c) {
  std::vector<uint8_t> pixels(static_cast<size_t>(h) * w * c);
  for (size_t i = 0; i < pixels.size(); ++i) pixels[i] = static_cast<uint8_t>((i * 7) % 251);
  return pixels;
}

ImagePipelineOptions raw(int h, int w, int c) {
  ImagePipelineOptions options;
  options.raw_input = RawImageShape{h, w, c};
  return options;
}

std::vector<uint8_t> run(const ImagePipeline& p, const std::vector<uint8_t>& data, uint64_t index = 0) {
  std::vector<uint8_t> out(p.output_spec().num_bytes());
  SampleRng rng(1, 0, index);
  p.apply({data.data(), data.size()}, rng, out.data());
  return out;
}

TEST(RawDecoderTest, EmptyChainKeepsThePixels) {
  const std::vector<uint8_t> pixels = pattern(5, 4, 3);
  const ImagePipeline p({}, {DType::kUInt8, Layout::kHWC, 3}, kDefaultMaxPixels, raw(5, 4, 3));
  EXPECT_EQ(p.output_spec().shape, (std::vector<int64_t>{5, 4, 3}));
  EXPECT_EQ(run(p, pixels), pixels);
}

TEST(RawDecoderTest, CenterCropIsTheCroppedPixels) {
  const std::vector<uint8_t> pixels = pattern(6, 5, 1);
  const ImagePipeline p({CenterCropSpec{{2, 3}}}, {DType::kUInt8, Layout::kCHW, 1}, kDefaultMaxPixels, raw(6, 5, 1));
  // torchvision: top = round((6 - 2) / 2) = 2, left = round((5 - 3) / 2) = 1.
  std::vector<uint8_t> expected;
  for (int y = 2; y < 4; ++y)
    for (int x = 1; x < 4; ++x) expected.push_back(pixels[static_cast<size_t>(y) * 5 + x]);
  EXPECT_EQ(run(p, pixels), expected);
}

TEST(RawDecoderTest, FlipAndCrossChannelConversion) {
  const std::vector<uint8_t> gray = pattern(2, 3, 1);
  // Gray input, RGB output: each value replicated; flipped (p = 1).
  const ImagePipeline p({HorizontalFlipSpec{1.0}}, {DType::kUInt8, Layout::kHWC, 3}, kDefaultMaxPixels, raw(2, 3, 1));
  std::vector<uint8_t> expected;
  for (int y = 0; y < 2; ++y)
    for (int x = 2; x >= 0; --x)
      for (int c = 0; c < 3; ++c) expected.push_back(gray[static_cast<size_t>(y) * 3 + x]);
  EXPECT_EQ(run(p, gray), expected);
}

TEST(RawDecoderTest, NormalizeMatchesTorchvisionArithmetic) {
  const std::vector<uint8_t> pixels = pattern(2, 2, 1);
  const ImagePipeline p({NormalizeSpec{{0.5f}, {0.25f}}}, {DType::kFloat32, Layout::kCHW, 1}, kDefaultMaxPixels,
                        raw(2, 2, 1));
  std::vector<float> out(4);
  SampleRng rng(1, 0, 0);
  p.apply({pixels.data(), pixels.size()}, rng, out.data());
  for (size_t i = 0; i < 4; ++i) EXPECT_EQ(out[i], (static_cast<float>(pixels[i]) / 255.0f - 0.5f) / 0.25f);
}

TEST(RawDecoderTest, WrongSizeIsADecodeError) {
  const ImagePipeline p({}, {DType::kUInt8, Layout::kHWC, 1}, kDefaultMaxPixels, raw(2, 2, 1));
  const std::vector<uint8_t> short_input(3);
  try {
    run(p, short_input);
    FAIL() << "accepted 3 bytes";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kDecode);
    EXPECT_EQ(e.cause(), "raw image: expected 2x2x1 = 4 bytes, got 3");
  }
}

// Regression: the Python binding took the sides as int, so an array of
// 2**31 + 1 rows was nanobind's TypeError, not a named error.
TEST(RawDecoderTest, RawImageShapeChecksSidesBeforeNarrowing) {
  const RawImageShape shape = raw_image_shape(28, 28, 1);
  EXPECT_EQ(shape.height, 28);
  EXPECT_EQ(shape.width, 28);
  EXPECT_EQ(shape.channels, 1);
  EXPECT_EQ(raw_image_shape(2147483647, 1, 3).height, 2147483647);
  const auto cause = [](int64_t h, int64_t w, int64_t c) {
    try {
      raw_image_shape(h, w, c);
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), ErrorKind::kConfig);
      return e.cause();
    }
    return std::string("accepted");
  };
  EXPECT_EQ(cause(2147483649, 1, 1), "raw image sides must be at most 2147483647 (the engine's int), got 2147483649x1");
  EXPECT_EQ(cause(1, int64_t{1} << 32, 3),
            "raw image sides must be at most 2147483647 (the engine's int), got 1x4294967296");
  EXPECT_EQ(cause(2, 2, (int64_t{1} << 32) + 1), "raw images need 1 or 3 channels, got 2x2x4294967297");
  EXPECT_EQ(cause(0, 2, 1), "raw images need positive height and width, got 0x2x1");
}

TEST(RawDecoderTest, BadShapeIsAConfigErrorAndMaxPixelsApplies) {
  try {
    ImagePipeline p({}, {DType::kUInt8, Layout::kHWC, 1}, kDefaultMaxPixels, raw(2, 2, 4));
    FAIL() << "accepted 4 channels";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kConfig);
    EXPECT_EQ(e.cause(), "raw images need positive height and width and 1 or 3 channels, got 2x2x4");
  }
  const ImagePipeline p({}, {DType::kUInt8, Layout::kHWC, 1}, /*max_pixels=*/3, raw(2, 2, 1));
  try {
    run(p, pattern(2, 2, 1));
    FAIL() << "accepted 4 pixels over max_pixels=3";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kTooLarge);
  }
}

}  // namespace
}  // namespace conveyor
