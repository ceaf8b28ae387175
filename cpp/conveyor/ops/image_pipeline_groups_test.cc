// The planner's groups: steps on the image (StepKind::kImage) between
// axis-aligned groups, tested with test-only steps registered from this file.

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "conveyor/core/error.h"
#include "conveyor/ops/image_pipeline.h"
#include "conveyor/ops/resize.h"
#include "conveyor/ops/testing/test_images.h"
#include "conveyor/ops/transforms/center_crop.h"
#include "conveyor/ops/transforms/resize.h"

namespace conveyor {
namespace {

using testing::encode_png;
using testing::make_noise;
using testing::make_pattern;

// kImage: transposes the image (rows become columns), boxes too.
class TransposeStep final : public ImageStep {
 public:
  StepPlan plan(ChainPlan& chain) const override {
    if (chain.size) chain.size = Size2D{chain.size->width, chain.size->height};
    return {};
  }
  void apply_image(SampleImage& sample, SampleRng& /*rng*/) const override {
    const Image& in = sample.image;
    const int h = in.height, w = in.width, c = in.channels;
    sample.spare.resize(in.pixels.size());
    for (int y = 0; y < h; ++y)
      for (int x = 0; x < w; ++x)
        for (int k = 0; k < c; ++k) sample.spare[(x * h + y) * c + k] = in.pixels[(y * w + x) * c + k];
    std::swap(sample.image.pixels, sample.spare);
    sample.image.height = w;
    sample.image.width = h;
    if (sample.boxes != nullptr) {
      for (BoundingBox& b : *sample.boxes) b = {b.y, b.x, b.height, b.width, b.category};
    }
  }
};

// kImage: adds floor(uniform() * 100) to every value (saturating): one draw.
class AddRandomStep final : public ImageStep {
 public:
  void apply_image(SampleImage& sample, SampleRng& rng) const override {
    const int amount = static_cast<int>(rng.uniform() * 100);
    for (uint8_t& v : sample.image.pixels) v = static_cast<uint8_t>(std::min(255, v + amount));
  }
};

// Geometric: pads `pad` pixels on every side with (7, 8, 9).
class PadSevensStep final : public GeometricStep {
 public:
  explicit PadSevensStep(int pad) : pad_(pad) {}
  StepPlan plan(ChainPlan& chain) const override {
    if (chain.size) chain.size = Size2D{chain.size->height + 2 * pad_, chain.size->width + 2 * pad_};
    return {.fill = Fill{7, 8, 9}};
  }
  void place(Placement& p, SampleRng& /*rng*/) const override {
    p.crop(-pad_, -pad_, p.height + 2 * pad_, p.width + 2 * pad_);
  }

 private:
  int pad_;
};

const bool kRegistered = register_transform("test_transpose",
                                            [](const TransformParams& params) {
                                              TransformArgs("TestTranspose", params).finish();
                                              return std::make_unique<TransposeStep>();
                                            }) &&
                         register_transform("test_add_random",
                                            [](const TransformParams& params) {
                                              TransformArgs("TestAddRandom", params).finish();
                                              return std::make_unique<AddRandomStep>();
                                            }) &&
                         register_transform("test_pad_sevens", [](const TransformParams& params) {
                           TransformArgs args("TestPadSevens", params);
                           const int pad = static_cast<int>(args.number("pad"));
                           args.finish();
                           return std::make_unique<PadSevensStep>(pad);
                         });

const TransformSpec kTranspose{"test_transpose", {}};
const TransformSpec kAddRandom{"test_add_random", {}};
const ImageOutputSpec kU8{DType::kUInt8, Layout::kHWC};

std::span<const uint8_t> as_span(const std::vector<uint8_t>& v) { return {v.data(), v.size()}; }

std::vector<uint8_t> run(const ImagePipeline& p, const std::vector<uint8_t>& data, uint64_t index = 0,
                         std::vector<BoundingBox>* boxes = nullptr) {
  std::vector<uint8_t> out(p.output_spec().num_bytes());
  SampleRng rng(1, 0, index);
  if (boxes != nullptr) {
    p.apply_tracked(as_span(data), rng, out.data(), *boxes);
  } else {
    p.apply(as_span(data), rng, out.data());
  }
  return out;
}

Image as_image(std::vector<uint8_t> pixels, int h, int w) { return {h, w, 3, std::move(pixels)}; }

Image transposed(const Image& in) {
  Image out{in.width, in.height, 3, std::vector<uint8_t>(in.pixels.size())};
  for (int y = 0; y < in.height; ++y)
    for (int x = 0; x < in.width; ++x)
      for (int c = 0; c < 3; ++c) out.pixels[(x * in.height + y) * 3 + c] = in.pixels[(y * in.width + x) * 3 + c];
  return out;
}

Image cropped(const Image& in, int top, int left, int h, int w) {
  Image out{h, w, 3, {}};
  for (int y = 0; y < h; ++y)
    for (int x = 0; x < w; ++x)
      for (int c = 0; c < 3; ++c) out.pixels.push_back(in.pixels[((top + y) * in.width + left + x) * 3 + c]);
  return out;
}

Image mirrored(const Image& in) {
  Image out = in;
  for (int y = 0; y < in.height; ++y)
    for (int x = 0; x < in.width; ++x)
      for (int c = 0; c < 3; ++c)
        out.pixels[(y * in.width + x) * 3 + c] = in.pixels[(y * in.width + in.width - 1 - x) * 3 + c];
  return out;
}

TEST(ImagePipelineGroupsTest, ImageStepBetweenAResizeAndACrop) {
  ASSERT_TRUE(kRegistered);
  const auto png = encode_png(make_pattern(40, 60));
  // [Resize, transpose, CenterCrop]: the resize is fused into the decode
  // (the same pixels as Resize alone), the crop cuts the transposed image.
  const Image resized = as_image(run(ImagePipeline({ResizeSpec{0, {20, 30}}}, kU8), png), 20, 30);
  const ImagePipeline p({ResizeSpec{0, {20, 30}}, kTranspose, CenterCropSpec{{10, 12}}}, kU8);
  EXPECT_EQ(p.output_spec().shape, (std::vector<int64_t>{10, 12, 3}));
  // The transposed image is 30 x 20: the crop starts at round(10) = 10, round(4) = 4.
  EXPECT_EQ(run(p, png), cropped(transposed(resized), 10, 4, 10, 12).pixels);
  // Boxes: resized (x 0.5), transposed, cropped (and clipped).
  std::vector<BoundingBox> boxes{{10, 20, 20, 10, 1}, {0, 0, 4, 4, 2}};
  run(p, png, 0, &boxes);
  // {10, 20, 20, 10} -> {5, 10, 10, 5} -> {10, 5, 5, 10} -> {6, -5, 5, 10} clipped to {6, 0, 5, 5};
  // {0, 0, 4, 4} -> {0, 0, 2, 2} -> {0, 0, 2, 2} -> {-4, -10, ...}: outside, dropped.
  EXPECT_EQ(boxes, (std::vector<BoundingBox>{{6, 0, 5, 5, 1}}));
}

TEST(ImagePipelineGroupsTest, ChainsStartingOrEndingWithAnImageStep) {
  const Image image = make_pattern(12, 18);
  const auto png = encode_png(image);
  EXPECT_EQ(run(ImagePipeline({kTranspose, CenterCropSpec{{18, 12}}}, kU8), png), transposed(image).pixels);
  EXPECT_EQ(run(ImagePipeline({kTranspose, CenterCropSpec{{8, 8}}}, kU8), png),
            cropped(transposed(image), 5, 2, 8, 8).pixels);
  const ImagePipeline ending({CenterCropSpec{{8, 10}}, kTranspose}, kU8);
  EXPECT_EQ(ending.output_spec().shape, (std::vector<int64_t>{10, 8, 3}));
  EXPECT_EQ(run(ending, png), transposed(cropped(image, 2, 4, 8, 10)).pixels);
  // Two image steps in a row, and a float output after them.
  EXPECT_EQ(run(ImagePipeline({CenterCropSpec{{8, 10}}, kTranspose, kTranspose}, kU8), png),
            cropped(image, 2, 4, 8, 10).pixels);
}

TEST(ImagePipelineGroupsTest, FlipsBeforeAnImageStepAreMaterializedAfterItDeferred) {
  const Image image = make_pattern(12, 18);
  const auto png = encode_png(image);
  // The leading group's flip happens before the transpose.
  EXPECT_EQ(run(ImagePipeline({HorizontalFlipSpec{1.0}, kTranspose, CenterCropSpec{{18, 12}}}, kU8), png),
            transposed(mirrored(image)).pixels);
  // The last group's flip is the output pass's; a crop after it is mirrored.
  EXPECT_EQ(run(ImagePipeline({kTranspose, HorizontalFlipSpec{1.0}, CenterCropSpec{{18, 11}}}, kU8), png),
            cropped(mirrored(transposed(image)), 0, 0, 18, 11).pixels);
  // A middle group's flip is materialized too.
  EXPECT_EQ(run(ImagePipeline({kTranspose, HorizontalFlipSpec{1.0}, kTranspose, CenterCropSpec{{12, 18}}}, kU8), png),
            transposed(mirrored(transposed(image))).pixels);
  std::vector<BoundingBox> boxes{{1, 2, 3, 4, 0}};
  run(ImagePipeline({HorizontalFlipSpec{1.0}, kTranspose, CenterCropSpec{{18, 12}}}, kU8), png, 0, &boxes);
  // Mirrored in the 18-wide image: x = 18 - 4 = 14; transposed.
  EXPECT_EQ(boxes, (std::vector<BoundingBox>{{2, 14, 4, 3, 0}}));
}

TEST(ImagePipelineGroupsTest, MaterializedFlipsAtEveryWidth) {
  // The materialized mirror moves RGB rows five pixels per step where the
  // CPU allows: widths around its steps and tails, several rows.
  for (int w = 1; w <= 23; ++w) {
    const Image image = make_pattern(3, w);
    const auto png = encode_png(image);
    EXPECT_EQ(run(ImagePipeline({HorizontalFlipSpec{1.0}, kTranspose, CenterCropSpec{{w, 3}}}, kU8), png),
              transposed(mirrored(image)).pixels)
        << "width " << w;
  }
}

TEST(ImagePipelineGroupsTest, PointwiseTablesLeftForTheOutputPassGiveTheSameValues) {
  // A policy right before the output pass leaves its pointwise ops
  // (brightness, contrast, posterize, solarize, autocontrast, equalize,
  // invert) as tables the output pass composes with its own; with a crop
  // after it, they are written into the pixels. Both must give the same
  // values, for every output kind and for chains of ops (num_ops 3).
  const Image image = make_pattern(40, 52);
  const auto png = encode_png(image);
  const TransformSpec crop = CenterCropSpec{{40, 52}};
  const TransformSpec policies[] = {{"trivial_augment_wide", {}},
                                    {"rand_augment", {{"num_ops", {3}}, {"magnitude", {12}}}},
                                    {"auto_augment", {{"policy", {0}}}}};
  const ImageOutputSpec outputs[] = {kU8, {DType::kUInt8, Layout::kCHW}, {DType::kFloat32, Layout::kCHW}};
  for (const TransformSpec& policy : policies) {
    for (const ImageOutputSpec& output : outputs) {
      std::vector<TransformSpec> deferred = {crop, policy}, written = {crop, policy, crop};
      if (output.dtype == DType::kFloat32) {
        deferred.emplace_back(NormalizeSpec{{0.5f, 0.4f, 0.3f}, {0.2f, 0.25f, 0.3f}});
        written.emplace_back(NormalizeSpec{{0.5f, 0.4f, 0.3f}, {0.2f, 0.25f, 0.3f}});
      }
      const ImagePipeline a(deferred, output), b(written, output);
      for (uint64_t i = 0; i < 60; ++i) {
        std::vector<uint8_t> x(a.output_spec().num_bytes()), y(b.output_spec().num_bytes());
        SampleRng ra(3, 0, i), rb(3, 0, i);
        a.apply(as_span(png), ra, x.data());
        b.apply(as_span(png), rb, y.data());
        ASSERT_EQ(x, y) << policy.name << " sample " << i << " dtype " << static_cast<int>(output.dtype);
      }
    }
  }
}

TEST(ImagePipelineGroupsTest, RandomDrawsKeepChainOrder) {
  const Image image = make_pattern(30, 40);
  const auto png = encode_png(image);
  const RandomResizedCropSpec rrc{{16, 16}};
  const ImagePipeline crop_only({rrc}, kU8);
  const ImagePipeline p({rrc, kAddRandom, HorizontalFlipSpec{0.5}}, kU8);
  int flips = 0;
  for (uint64_t index = 0; index < 16; ++index) {
    // The crop draws first, then the image step, then the flip.
    SampleRng rng(1, 0, index);
    sample_random_resized_crop(30, 40, rrc.scale, rrc.ratio, rng);
    const int amount = static_cast<int>(rng.uniform() * 100);
    const bool flip = rng.uniform() < 0.5;
    Image expected = as_image(run(crop_only, png, index), 16, 16);
    for (uint8_t& v : expected.pixels) v = static_cast<uint8_t>(std::min(255, v + amount));
    if (flip) expected = mirrored(expected);
    flips += flip;
    ASSERT_EQ(run(p, png, index), expected.pixels) << index;
  }
  EXPECT_GT(flips, 0);
  EXPECT_LT(flips, 16);
}

TEST(ImagePipelineGroupsTest, AnotherPaddingFillStartsANewGroup) {
  const Image image = make_pattern(4, 6);
  const auto png = encode_png(image);
  // Padded by 1 with (7, 8, 9), then center-cropped to 8 x 10: zeros around.
  const std::vector<uint8_t> out =
      run(ImagePipeline({TransformSpec{"test_pad_sevens", {{"pad", {1}}}}, CenterCropSpec{{8, 10}}}, kU8), png);
  for (int y = 0; y < 8; ++y) {
    for (int x = 0; x < 10; ++x) {
      for (int c = 0; c < 3; ++c) {
        uint8_t expected = 0;
        if (y >= 2 && y < 6 && x >= 2 && x < 8) {
          expected = image.pixels[((y - 2) * 6 + x - 2) * 3 + c];
        } else if (y >= 1 && y < 7 && x >= 1 && x < 9) {
          expected = static_cast<uint8_t>(7 + c);
        }
        ASSERT_EQ(out[(y * 10 + x) * 3 + c], expected) << y << "," << x << "," << c;
      }
    }
  }
  // A crop after the padding, within one group.
  const std::vector<uint8_t> inner =
      run(ImagePipeline({TransformSpec{"test_pad_sevens", {{"pad", {2}}}}, CenterCropSpec{{6, 8}}}, kU8), png);
  EXPECT_EQ(inner[0], 7);
  EXPECT_EQ(inner[2], 9);
  EXPECT_EQ(inner[(1 * 8 + 1) * 3], image.pixels[0]);
}

TEST(ImagePipelineGroupsTest, AnotherInterpolationStartsANewGroup) {
  // A bicubic resize to 12 x 14, then a nearest one to 5 x 6: two resamples,
  // the nearest picking pixels of the bicubic result (one group would have
  // resampled the source once).
  const Image image = make_pattern(20, 24);
  const ResizeSpec bicubic{.size = {12, 14}, .interpolation = Interpolation::kBicubic};
  const ResizeSpec nearest{.size = {5, 6}, .interpolation = Interpolation::kNearest};
  std::vector<uint8_t> middle(12 * 14 * 3), want(5 * 6 * 3), scratch;
  resize_image(image.view(), {0, 0, 24, 20}, middle.data(), 12, 14, 14 * 3, {Interpolation::kBicubic, true}, scratch);
  resize_image({middle.data(), 12, 14, 3, 14 * 3}, {0, 0, 14, 12}, want.data(), 5, 6, 6 * 3,
               {Interpolation::kNearest, true}, scratch);
  EXPECT_EQ(run(ImagePipeline({bicubic, nearest}, kU8), encode_png(image)), want);
  // The same interpolation twice: one group, one resample of the source.
  const ResizeSpec nearest_again{.size = {5, 6}, .interpolation = Interpolation::kNearest};
  resize_image(image.view(), {0, 0, 24, 20}, want.data(), 5, 6, 6 * 3, {Interpolation::kNearest, true}, scratch);
  EXPECT_EQ(
      run(ImagePipeline({ResizeSpec{.size = {12, 14}, .interpolation = Interpolation::kNearest}, nearest_again}, kU8),
          encode_png(image)),
      want);
}

// resize_image of all of `image` to h x w.
Image resized_whole(const Image& image, int h, int w, Resampling r) {
  Image out{h, w, 3, std::vector<uint8_t>(static_cast<size_t>(h) * w * 3)};
  std::vector<uint8_t> scratch;
  resize_image(image.view(), {0, 0, static_cast<double>(image.width), static_cast<double>(image.height)},
               out.pixels.data(), h, w, w * 3, r, scratch);
  return out;
}

TEST(ImagePipelineGroupsTest, ACropAfterAResizeSeesTheNeighboursOfItsBoxAndACropBeforeBoundsIt) {
  // As torchvision: Resize then CenterCrop is the crop of the whole resized
  // image (one resample of the crop's box, whose edge pixels see the source
  // beyond it), even when that box's edges fall on whole source pixels (216 x
  // 220 to 72 x 80, cropped to 64: the box is (22, 12)-(198, 204)).
  const Image image = make_noise(216, 220, 3, 9);
  const auto png = encode_png(image);
  const Resampling bicubic{Interpolation::kBicubic, true};
  const ResizeSpec resize{.size = {72, 80}, .interpolation = Interpolation::kBicubic};
  EXPECT_EQ(run(ImagePipeline({resize, CenterCropSpec{{64, 64}}}, kU8), png),
            cropped(resized_whole(image, 72, 80, bicubic), 4, 8, 64, 64).pixels);
  // CenterCrop, Resize, CenterCrop: the resize reads the first crop only.
  const Image first = cropped(image, 58, 60, 100, 100);
  const ResizeSpec to_50{.size = {50, 50}, .interpolation = Interpolation::kBicubic};
  EXPECT_EQ(run(ImagePipeline({CenterCropSpec{{100, 100}}, to_50, CenterCropSpec{{40, 40}}}, kU8), png),
            cropped(resized_whole(first, 50, 50, bicubic), 5, 5, 40, 40).pixels);
}

TEST(ImagePipelineGroupsTest, APaddingCropAfterAResizePadsWithTheFillNotTheSourceBeyond) {
  // CenterCrop(100), Resize(50) bicubic, Pad(4, fill 9): the border is the
  // fill; the source beyond the first crop is never read (ASan checks the
  // reads of the decoded region).
  const Image image = make_noise(200, 200, 3, 4);
  const ResizeSpec resize{.size = {50, 50}, .interpolation = Interpolation::kBicubic};
  const TransformSpec pad{"pad", {{"padding", {4, 4, 4, 4}}, {"fill", {9}}}};
  const std::vector<uint8_t> out =
      run(ImagePipeline({CenterCropSpec{{100, 100}}, resize, pad}, kU8), encode_png(image));
  const Image inner = resized_whole(cropped(image, 50, 50, 100, 100), 50, 50, {Interpolation::kBicubic, true});
  for (int y = 0; y < 58; ++y) {
    for (int x = 0; x < 58; ++x) {
      const bool border = y < 4 || y >= 54 || x < 4 || x >= 54;
      for (int c = 0; c < 3; ++c) {
        const uint8_t want = border ? 9 : inner.pixels[((y - 4) * 50 + x - 4) * 3 + c];
        ASSERT_EQ(out[(y * 58 + x) * 3 + c], want) << y << "," << x << "," << c;
      }
    }
  }
}

TEST(ImagePipelineGroupsTest, ImageStepsComeBeforeNormalize) {
  try {
    ImagePipeline({CenterCropSpec{{8, 8}}, NormalizeSpec{{0, 0, 0}, {1, 1, 1}}, kTranspose}, {});
    FAIL() << "accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kConfig);
    EXPECT_EQ(e.cause(),
              "transform 2 test_transpose comes after Normalize: put Normalize after every step on the image");
  }
  // A chain ending in an image step whose size depends on the image is refused.
  try {
    ImagePipeline({ResizeSpec{8}, kTranspose}, {});
    FAIL() << "accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kConfig);
  }
}

TEST(ImagePipelineGroupsTest, IntermediateImagesAreBoundedByMaxPixels) {
  const auto png = encode_png(make_pattern(10, 10));
  const ImagePipeline p({ResizeSpec{0, {100, 100}}, kTranspose, CenterCropSpec{{4, 4}}}, kU8, 5000);
  try {
    run(p, png);
    FAIL() << "accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kTooLarge);
    EXPECT_EQ(e.cause(), "the resizes and crops: an image of 100x100 pixels, more than max_pixels (5000)");
  }
}

}  // namespace
}  // namespace conveyor
