#include "conveyor/ops/transforms/pad_crop.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <vector>

#include "conveyor/core/error.h"
#include "conveyor/ops/image_pipeline.h"
#include "conveyor/ops/testing/test_images.h"

namespace conveyor {
namespace {

using testing::encode_png;
using testing::make_pattern;

const ImageOutputSpec kU8{DType::kUInt8, Layout::kHWC};

std::vector<uint8_t> run(const ImagePipeline& p, const std::vector<uint8_t>& data, uint64_t index = 0,
                         std::vector<BoundingBox>* boxes = nullptr) {
  std::vector<uint8_t> out(p.output_spec().num_bytes());
  SampleRng rng(1, 0, index);
  std::vector<BoundingBox> none;
  p.apply_tracked({data.data(), data.size()}, rng, out.data(), boxes != nullptr ? *boxes : none);
  return out;
}

std::string config_error(std::vector<TransformSpec> chain, ImageOutputSpec output = kU8) {
  try {
    ImagePipeline p(std::move(chain), output);
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kConfig);
    return e.what();
  }
  return "accepted";
}

TransformSpec random_crop(int size, int padding, int mode, std::vector<double> fill = {0}) {
  const double p = padding;
  return {"random_crop",
          {{"size", {static_cast<double>(size)}},
           {"padding", {p, p, p, p}},
           {"fill", std::move(fill)},
           {"padding_mode", {static_cast<double>(mode)}}}};
}

TEST(PadCropTest, PaddingModesAreTorchs) {
  // torchvision's documented examples: [1, 2, 3, 4] padded by 2 on both sides.
  const Image row{1, 4, 1, {1, 2, 3, 4}};
  const auto padded = [&row](PadMode mode) {
    Image out;
    pad_crop_image(row, 0, -2, 1, 8, mode, Fill{9, 9, 9}, out);
    return out.pixels;
  };
  EXPECT_EQ(padded(PadMode::kConstant), (std::vector<uint8_t>{9, 9, 1, 2, 3, 4, 9, 9}));
  EXPECT_EQ(padded(PadMode::kEdge), (std::vector<uint8_t>{1, 1, 1, 2, 3, 4, 4, 4}));
  EXPECT_EQ(padded(PadMode::kReflect), (std::vector<uint8_t>{3, 2, 1, 2, 3, 4, 3, 2}));
  EXPECT_EQ(padded(PadMode::kSymmetric), (std::vector<uint8_t>{2, 1, 1, 2, 3, 4, 4, 3}));
  // Rows too, with a per-channel fill.
  const Image column{2, 1, 3, {1, 2, 3, 4, 5, 6}};
  Image out;
  pad_crop_image(column, -1, 0, 3, 1, PadMode::kConstant, Fill{7, 8, 9}, out);
  EXPECT_EQ(out.pixels, (std::vector<uint8_t>{7, 8, 9, 1, 2, 3, 4, 5, 6}));
}

TEST(PadCropTest, RandomCropDrawsTopThenLeftAndPadsWithTheFill) {
  const Image image = make_pattern(20, 30);
  const auto png = encode_png(image);
  for (const int mode : {0, 2}) {  // Constant (fused into the decode) and reflect (on the image).
    const ImagePipeline p({random_crop(16, 4, mode, {7, 8, 9})}, kU8);
    for (uint64_t index = 0; index < 8; ++index) {
      SampleRng rng(1, 0, index);
      const int top = static_cast<int>(rng.below(28 - 16 + 1));
      const int left = static_cast<int>(rng.below(38 - 16 + 1));
      Image expected;
      pad_crop_image(image, top - 4, left - 4, 16, 16, static_cast<PadMode>(mode), Fill{7, 8, 9}, expected);
      std::vector<BoundingBox> boxes{{10, 5, 4, 6, 1}};
      ASSERT_EQ(run(p, png, index, &boxes), expected.pixels) << mode << " " << index;
      // The box, shifted by the padding and the crop, clipped to it.
      std::vector<BoundingBox> moved{{10, 5, 4, 6, 1}};
      crop_boxes(&moved, top - 4, left - 4, 16, 16);
      EXPECT_EQ(boxes, moved);
    }
  }
}

TEST(PadCropTest, PadThenCropIsOneGroupAndOtherModesRunOnTheImage) {
  const Image image = make_pattern(6, 8);
  const auto png = encode_png(image);
  const TransformSpec pad{"pad", {{"padding", {1, 2, 3, 4}}, {"fill", {5}}}};
  const CenterCropSpec same{{6, 8}};  // The whole image: gives the chain its size.
  const ImagePipeline p({same, pad}, kU8);
  EXPECT_EQ(p.output_spec().shape, (std::vector<int64_t>{12, 12, 3}));
  Image expected;
  pad_crop_image(image, -2, -1, 12, 12, PadMode::kConstant, Fill{5, 5, 5}, expected);
  std::vector<BoundingBox> boxes{{0, 0, 2, 2, 3}};
  EXPECT_EQ(run(p, png, 0, &boxes), expected.pixels);
  EXPECT_EQ(boxes, (std::vector<BoundingBox>{{1, 2, 2, 2, 3}}));
  const ImagePipeline edge({same, TransformSpec{"pad", {{"padding", {1, 2, 3, 4}}, {"padding_mode", {1}}}}}, kU8);
  pad_crop_image(image, -2, -1, 12, 12, PadMode::kEdge, Fill{}, expected);
  EXPECT_EQ(run(edge, png), expected.pixels);
}

TEST(PadCropTest, VerticalFlipIsFreeAndMirrorsCropsAndBoxes) {
  const Image image = make_pattern(10, 12);
  const auto png = encode_png(image);
  const ImagePipeline p({VerticalFlipSpec{1.0}, CenterCropSpec{{7, 12}}}, kU8);
  // Flipped, then the central 7 rows (top = round(1.5) = 2) of the flipped image.
  std::vector<BoundingBox> boxes{{1, 0, 2, 3, 4}};
  const std::vector<uint8_t> out = run(p, png, 0, &boxes);
  for (int y = 0; y < 7; ++y) {
    for (int x = 0; x < 12 * 3; ++x) ASSERT_EQ(out[y * 36 + x], image.pixels[(9 - (y + 2)) * 36 + x]) << y;
  }
  // Rows 0..3 become 7..10 of the flipped image, then 5..8 of the crop: clipped to 7.
  EXPECT_EQ(boxes, (std::vector<BoundingBox>{{1, 5, 2, 2, 4}}));
}

TEST(PadCropTest, ErrorsNameTheArgument) {
  EXPECT_EQ(config_error({random_crop(8, 1, 0, {1, 2, 3})}, {DType::kUInt8, Layout::kHWC, 1}),
            "transform 0 RandomCrop: fill has 3 values but the images have 1 channel(s)");
  EXPECT_EQ(config_error({random_crop(8, 1, 0, {300})}),
            "transform 0 RandomCrop: fill values must be in [0, 255], got 300");
  EXPECT_EQ(config_error({random_crop(8, 1, 0, {1, 2})}),
            "transform 0 RandomCrop: fill must be one number or one per channel (3), got [1, 2]");
  EXPECT_EQ(config_error({random_crop(8, 1, 7)}),
            "transform 0 RandomCrop: padding_mode must be 0 (constant), 1 (edge), 2 (reflect) or 3 (symmetric)");
  EXPECT_EQ(config_error({TransformSpec{"pad", {{"padding", {1, 1, -1, 1}}}}}),
            "transform 0 Pad: padding must be non-negative integers of at most 2**30, got [1, 1, -1, 1]");
  EXPECT_EQ(config_error({TransformSpec{"vertical_flip", {{"p", {1.5}}}}, CenterCropSpec{{4, 4}}}),
            "transform 0 RandomVerticalFlip: p must be in [0, 1], got 1.5");
}

TEST(PadCropTest, ACropLargerThanThePaddedImageIsAnErrorUnlessPadIfNeeded) {
  const auto png = encode_png(make_pattern(10, 12));
  const ImagePipeline p({random_crop(16, 2, 0)}, kU8);
  try {
    run(p, png);
    FAIL() << "accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kConfig);
    EXPECT_EQ(e.cause(), "RandomCrop: required crop size (16, 16) is larger than padded input image size (14, 16)");
  }
  TransformSpec padded = random_crop(16, 0, 0);
  padded.params.erase("padding");
  padded.params["pad_if_needed"] = {1};
  // 10 rows: 6 missing, added on both sides (22 rows), so the top is drawn in [0, 6].
  const ImagePipeline q({padded}, kU8);
  const std::vector<uint8_t> out = run(q, png);
  EXPECT_EQ(out.size(), 16u * 16 * 3);
}

}  // namespace
}  // namespace conveyor
