#include "conveyor/ops/transforms/warp.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <map>
#include <numbers>
#include <string>
#include <vector>

#include "conveyor/core/error.h"
#include "conveyor/ops/image_pipeline.h"
#include "conveyor/ops/testing/test_images.h"

namespace conveyor {
namespace {

using testing::make_pattern;

void expect_matrix(const Matrix3& actual, const Matrix3& expected) {
  for (int i = 0; i < 9; ++i) EXPECT_NEAR(actual[i], expected[i], 1e-12) << i;
}

TEST(WarpTest, AffineMatrixIsTorchvisions) {
  // A quarter turn about the origin, forward and inverse.
  expect_matrix(affine_matrix({0, 0}, 90, {0, 0}, 1, {0, 0}, false), {0, -1, 0, 1, 0, 0, 0, 0, 1});
  expect_matrix(affine_matrix({0, 0}, 90, {0, 0}, 1, {0, 0}, true), {0, 1, 0, -1, 0, 0, 0, 0, 1});
  // Scale 2 about (10, 20), then translate (3, 4): x' = 2x + (10 + 3 - 20).
  expect_matrix(affine_matrix({10, 20}, 0, {3, 4}, 2, {0, 0}, false), {2, 0, -7, 0, 2, -16, 0, 0, 1});
  // An x shear of 45 degrees: x' = x - y.
  expect_matrix(affine_matrix({0, 0}, 0, {0, 0}, 1, {45, 0}, false), {1, -1, 0, 0, 1, 0, 0, 0, 1});
  // The inverse is the inverse.
  const Matrix3 f = affine_matrix({5, 7}, 33, {2, -1}, 1.5, {10, -5}, false);
  const Matrix3 i = affine_matrix({5, 7}, 33, {2, -1}, 1.5, {10, -5}, true);
  expect_matrix(multiply(f, i), {1, 0, 0, 0, 1, 0, 0, 0, 1});
}

TEST(WarpTest, PerspectiveCoefficientsMapEndpointsToStartpoints) {
  const std::array<std::array<double, 2>, 4> start{{{0, 0}, {9, 0}, {9, 9}, {0, 9}}};
  std::array<double, 8> c = perspective_coefficients(start, start);
  for (int k = 0; k < 8; ++k) EXPECT_NEAR(c[k], (k == 0 || k == 4) ? 1 : 0, 1e-6) << k;
  const std::array<std::array<double, 2>, 4> shifted{{{2, 3}, {11, 3}, {11, 12}, {2, 12}}};
  c = perspective_coefficients(start, shifted);
  const std::array<double, 8> expected{1, 0, -2, 0, 1, -3, 0, 0};
  for (int k = 0; k < 8; ++k) EXPECT_NEAR(c[k], expected[k], 1e-6) << k;
  const std::array<std::array<double, 2>, 4> collapsed{{{0, 0}, {0, 0}, {0, 0}, {0, 0}}};
  EXPECT_THROW(perspective_coefficients(start, collapsed), Error);
}

TEST(WarpTest, QuarterTurnWithExpandIsExactAndMovesBoxes) {
  // A 4 x 6 image turned 90 degrees anticlockwise: 6 x 4, out[r][c] = in[c][5 - r].
  const Image image = make_pattern(4, 6);
  SampleImage sample;
  sample.image = image;
  std::vector<BoundingBox> boxes{{1, 0, 2, 1, 9}};
  sample.boxes = &boxes;
  const Warp warp = rotation_warp(4, 6, 90, true, std::nullopt);
  EXPECT_EQ(warp.rot90, 1);
  apply_warp(warp, Interpolation::kNearest, FillArg{}, sample, "test");
  ASSERT_EQ(sample.image.height, 6);
  ASSERT_EQ(sample.image.width, 4);
  for (int r = 0; r < 6; ++r)
    for (int c = 0; c < 4; ++c)
      for (int k = 0; k < 3; ++k)
        ASSERT_EQ(sample.image.pixels[(r * 4 + c) * 3 + k], image.pixels[(c * 6 + 5 - r) * 3 + k]) << r << c;
  // Corners (1, 0) .. (3, 1) go to (y, 6 - x): x in [0, 1], y in [3, 5].
  ASSERT_EQ(boxes.size(), 1u);
  EXPECT_NEAR(boxes[0].x, 0, 1e-5);
  EXPECT_NEAR(boxes[0].y, 3, 1e-5);
  EXPECT_NEAR(boxes[0].width, 1, 1e-5);
  EXPECT_NEAR(boxes[0].height, 2, 1e-5);
  EXPECT_EQ(boxes[0].category, 9);
}

TEST(WarpTest, TranslationMovesPixelsAndBoxesAndFillsTheRest) {
  const Image image = make_pattern(5, 6);
  SampleImage sample;
  sample.image = image;
  std::vector<BoundingBox> boxes{{0, 0, 2, 2, 1}, {5, 4, 1, 1, 2}};
  sample.boxes = &boxes;
  FillArg fill;
  fill.values = {7, 8, 9};
  apply_warp(affine_warp(5, 6, 0, {2, 1}, 1, {0, 0}, std::nullopt), Interpolation::kNearest, fill, sample, "test");
  for (int y = 0; y < 5; ++y) {
    for (int x = 0; x < 6; ++x) {
      for (int k = 0; k < 3; ++k) {
        const uint8_t expected =
            (y >= 1 && x >= 2) ? image.pixels[((y - 1) * 6 + x - 2) * 3 + k] : static_cast<uint8_t>(7 + k);
        ASSERT_EQ(sample.image.pixels[(y * 6 + x) * 3 + k], expected) << y << "," << x;
      }
    }
  }
  // The second box moves to (7, 5): outside, dropped.
  EXPECT_EQ(boxes, (std::vector<BoundingBox>{{2, 1, 2, 2, 1}}));
}

TEST(WarpTest, NearestWarpsGiveTheSamePixelsOnEveryPath) {
  // One image as RGB (AVX2 rows, or runs for translations and x-shears), as
  // its first two channels (2 channels: the scalar loops, the reference) and
  // as its green channel (the 1-channel AVX2 rows): every channel agrees,
  // fill included. (The RGB result is checked against torchvision in
  // tests/parity.) 24 x 40: rows of whole 8-pixel groups, so that the
  // rotation about the last pixel stops the vector rows there.
  const int h = 24, w = 40;
  const Image rgb = make_pattern(h, w);
  Image two{h, w, 2, std::vector<uint8_t>(static_cast<size_t>(h) * w * 2)};
  Image green{h, w, 1, std::vector<uint8_t>(static_cast<size_t>(h) * w)};
  for (size_t p = 0; p < green.pixels.size(); ++p) {
    two.pixels[2 * p] = rgb.pixels[3 * p];
    two.pixels[2 * p + 1] = green.pixels[p] = rgb.pixels[3 * p + 1];
  }
  FillArg fill;
  fill.values = {40};
  const std::array<std::array<double, 2>, 4> start{{{0, 0}, {39, 0}, {39, 23}, {0, 23}}};
  const std::array<std::array<double, 2>, 4> end{{{3, 2}, {36, 1}, {38, 21}, {1, 22}}};
  const std::vector<Warp> warps{rotation_warp(h, w, 33.3, false, std::nullopt),
                                rotation_warp(h, w, -12.0, true, std::nullopt),
                                rotation_warp(h, w, 3.0, false, std::array<double, 2>{39, 23}),
                                affine_warp(h, w, 0, {0, 0}, 1, {0, 20}, std::array<double, 2>{0, 0}),
                                affine_warp(h, w, 0, {0, 0}, 1, {25, 0}, std::array<double, 2>{0, 0}),
                                affine_warp(h, w, 0, {5, -3}, 1, {0, 0}, std::nullopt),
                                affine_warp(h, w, -30, {3, -2}, 0.7, {10, 0}, std::nullopt),
                                perspective_warp(h, w, perspective_coefficients(start, end))};
  for (size_t k = 0; k < warps.size(); ++k) {
    SampleImage three_channels{rgb, {}, nullptr}, two_channels{two, {}, nullptr}, one_channel{green, {}, nullptr};
    apply_warp(warps[k], Interpolation::kNearest, fill, three_channels, "test");
    apply_warp(warps[k], Interpolation::kNearest, fill, two_channels, "test");
    apply_warp(warps[k], Interpolation::kNearest, fill, one_channel, "test");
    const std::vector<uint8_t>& a = three_channels.image.pixels;
    const std::vector<uint8_t>& b = two_channels.image.pixels;
    const std::vector<uint8_t>& g = one_channel.image.pixels;
    ASSERT_EQ(a.size(), 3 * g.size()) << "warp " << k;
    ASSERT_EQ(b.size(), 2 * g.size()) << "warp " << k;
    int filled = 0;
    for (size_t p = 0; p < g.size(); ++p) {
      ASSERT_EQ(a[3 * p], b[2 * p]) << "warp " << k << ", pixel " << p;
      ASSERT_EQ(a[3 * p + 1], b[2 * p + 1]) << "warp " << k << ", pixel " << p;
      ASSERT_EQ(g[p], b[2 * p + 1]) << "warp " << k << ", pixel " << p;
      filled += a[3 * p] == 40 && a[3 * p + 1] == 40 && a[3 * p + 2] == 40;
    }
    EXPECT_GT(filled, 0) << "warp " << k;  // Each warp moves some pixels off the image.
  }
}

// Runs `chain` on `image` (PNG) with SampleRng(1, 0, 0); uint8 HWC.
std::vector<uint8_t> run_chain(std::vector<TransformSpec> chain, const Image& image,
                               std::vector<BoundingBox>* boxes = nullptr) {
  const ImagePipeline p(std::move(chain), {DType::kUInt8, Layout::kHWC});
  const std::vector<uint8_t> png = testing::encode_png(image);
  std::vector<uint8_t> out(p.output_spec().num_bytes());
  SampleRng rng(1, 0, 0);
  std::vector<BoundingBox> none;
  p.apply_tracked({png.data(), png.size()}, rng, out.data(), boxes != nullptr ? *boxes : none);
  return out;
}

TEST(WarpTest, ACropAfterAWarpComputesOnlyItsWindowWithTheSamePixels) {
  const Image image = make_pattern(30, 40);
  const CenterCropSpec whole{{30, 40}};
  for (const double interpolation : {0.0, 1.0}) {
    const TransformSpec rotation{"random_rotation", {{"degrees", {25, 25}}, {"interpolation", {interpolation}}}};
    std::vector<BoundingBox> boxes{{5, 5, 20, 10, 1}};
    const std::vector<uint8_t> fused = run_chain({whole, rotation, CenterCropSpec{{12, 16}}}, image, &boxes);
    // The same rotation of the whole image, then the crop (top 9, left 12).
    SampleImage sample;
    sample.image = image;
    std::vector<BoundingBox> expected_boxes{{5, 5, 20, 10, 1}};
    sample.boxes = &expected_boxes;
    apply_warp(rotation_warp(30, 40, 25, false, std::nullopt), static_cast<Interpolation>(interpolation), FillArg{},
               sample, "test");
    Image expected;
    pad_crop_image(sample.image, 9, 12, 12, 16, PadMode::kConstant, Fill{}, expected);
    crop_boxes(&expected_boxes, 9, 12, 12, 16);
    EXPECT_EQ(boxes, expected_boxes);
    if (interpolation == 0) {
      EXPECT_EQ(fused, expected.pixels);  // The nearest kernel computes each pixel the same way.
    } else {
      // OpenCV's fixed-point positions depend on the window's origin: a level at most.
      for (size_t i = 0; i < fused.size(); ++i) ASSERT_LE(std::abs(fused[i] - expected.pixels[i]), 1) << i;
    }
  }
  // A resize after the warp reads the window (and, for a fractional box, the
  // resize kernel's reach around it): the same pixels as the whole warp
  // followed by the same group (an identity step on the image in between
  // keeps the warp whole).
  const TransformSpec identity{"pad", {{"padding", {0, 0, 0, 0}}, {"padding_mode", {1}}}};
  for (const TransformSpec& rotation : {TransformSpec{"random_rotation", {{"degrees", {-40, -40}}}},
                                        TransformSpec{"random_affine", {{"degrees", {10, 10}}, {"scale", {2, 2}}}}}) {
    for (const std::vector<TransformSpec>& group :
         {std::vector<TransformSpec>{ResizeSpec{0, {60, 80}}, CenterCropSpec{{20, 24}}},
          std::vector<TransformSpec>{ResizeSpec{0, {47, 61}}, CenterCropSpec{{20, 24}}},
          std::vector<TransformSpec>{ResizeSpec{0, {20, 24}}}}) {
      std::vector<TransformSpec> fused{whole, rotation}, separate{whole, rotation, identity};
      fused.insert(fused.end(), group.begin(), group.end());
      separate.insert(separate.end(), group.begin(), group.end());
      EXPECT_EQ(run_chain(fused, image), run_chain(separate, image));
    }
  }
}

TEST(WarpTest, StepsDrawSameWarpForSameStream) {
  const auto step = make_transform_step({"random_rotation", {{"degrees", {-30, 10}}}});
  SampleRng a(3, 1, 4), b(3, 1, 4);
  EXPECT_EQ(draw_warp(*step, 20, 30, a)->src_from_dst, draw_warp(*step, 20, 30, b)->src_from_dst);
  EXPECT_FALSE(draw_warp(*make_transform_step({"vertical_flip", {}}), 20, 30, a).has_value());
}

// Uniform draws: inside [lo, hi], mean near the middle, and each quarter of
// the range holds about a quarter of 10 000 draws.
void expect_uniform(const std::vector<double>& draws, double lo, double hi) {
  ASSERT_EQ(draws.size(), 10000u);
  double sum = 0;
  int quarters[4] = {};
  for (const double v : draws) {
    ASSERT_GE(v, lo - 1e-4);
    ASSERT_LE(v, hi + 1e-4);
    sum += v;
    ++quarters[std::clamp(static_cast<int>((v - lo) / (hi - lo) * 4), 0, 3)];
  }
  const double sd = (hi - lo) / std::sqrt(12.0) / std::sqrt(10000.0);
  EXPECT_NEAR(sum / 10000, (lo + hi) / 2, 5 * sd);
  for (const int q : quarters) EXPECT_NEAR(q, 2500, 200);
}

constexpr double kDegrees = 180.0 / std::numbers::pi;

TEST(WarpDrawTest, RotationAnglesAreUniformInDegrees) {
  const auto step = make_transform_step({"random_rotation", {{"degrees", {-30, 10}}}});
  std::vector<double> angles;
  for (uint64_t i = 0; i < 10000; ++i) {
    SampleRng rng(1, 0, i);
    const Matrix3 f = draw_warp(*step, 20, 30, rng)->boxes_forward;
    angles.push_back(-std::atan2(f[3], f[0]) * kDegrees);  // forward = R(-angle) on screen coordinates.
  }
  expect_uniform(angles, -30, 10);
}

TEST(WarpDrawTest, AffineTranslationIsRoundedUniformAndScaleAndShearUniform) {
  // Height 50, width 100: shifts up to 0.1 * 100 = 10 and 0.2 * 50 = 10 pixels.
  const auto translate = make_transform_step({"random_affine", {{"degrees", {0, 0}}, {"translate", {0.1, 0.2}}}});
  std::map<int, int> xs;
  std::vector<double> tx;
  for (uint64_t i = 0; i < 10000; ++i) {
    SampleRng rng(2, 0, i);
    const Matrix3 f = draw_warp(*translate, 50, 100, rng)->boxes_forward;
    ASSERT_EQ(f[2], std::round(f[2]));
    ASSERT_EQ(f[5], std::round(f[5]));
    ++xs[static_cast<int>(f[2])];
    tx.push_back(f[2]);
  }
  // round(U(-10, 10)): -10 and 10 get half the share (1/40) of the others (1/20).
  EXPECT_EQ(xs.begin()->first, -10);
  EXPECT_EQ(xs.rbegin()->first, 10);
  EXPECT_EQ(xs.size(), 21u);
  EXPECT_NEAR(xs[-10], 250, 60);
  EXPECT_NEAR(xs[0], 500, 90);
  double sum = 0;
  for (const double v : tx) sum += v;
  EXPECT_NEAR(sum / 10000, 0, 0.3);

  const auto scale = make_transform_step({"random_affine", {{"degrees", {0, 0}}, {"scale", {0.5, 1.5}}}});
  const auto shear = make_transform_step({"random_affine", {{"degrees", {0, 0}}, {"shear", {-20, 20}}}});
  std::vector<double> scales, shears;
  for (uint64_t i = 0; i < 10000; ++i) {
    SampleRng rng(3, 0, i);
    scales.push_back(draw_warp(*scale, 50, 100, rng)->boxes_forward[0]);
    shears.push_back(std::atan(-draw_warp(*shear, 50, 100, rng)->boxes_forward[1]) * kDegrees);
  }
  expect_uniform(scales, 0.5, 1.5);
  expect_uniform(shears, -20, 20);
}

TEST(WarpDrawTest, PerspectiveAppliesWithProbabilityPAndCornersStayInTheirBounds) {
  // 60 x 100, distortion 0.5: corners move by up to int(0.5 * 50) = 25 and int(0.5 * 30) = 15.
  const auto step = make_transform_step({"random_perspective", {{"distortion_scale", {0.5}}, {"p", {0.3}}}});
  int warped = 0;
  std::map<int, int> xs, ys;
  for (uint64_t i = 0; i < 10000; ++i) {
    SampleRng rng(4, 0, i);
    const std::optional<Warp> warp = draw_warp(*step, 60, 100, rng);
    if (!warp) continue;
    ++warped;
    const Matrix3& f = warp->boxes_forward;  // Start (0, 0) goes to the top-left end point.
    ++xs[static_cast<int>(std::lround(f[2] / f[8]))];
    ++ys[static_cast<int>(std::lround(f[5] / f[8]))];
  }
  EXPECT_NEAR(warped, 3000, 150);
  EXPECT_EQ(xs.size(), 26u);
  EXPECT_EQ(xs.begin()->first, 0);
  EXPECT_EQ(xs.rbegin()->first, 25);
  EXPECT_EQ(ys.size(), 16u);
  EXPECT_EQ(ys.rbegin()->first, 15);
}

TEST(WarpDrawTest, RandomCropPositionsAreUniform) {
  // 40 x 50 padded by 4: the top is uniform in [0, 48 - 32], the left in [0, 58 - 32].
  const auto step = make_transform_step({"random_crop", {{"size", {32}}, {"padding", {4, 4, 4, 4}}}});
  std::map<int, int> tops, lefts;
  for (uint64_t i = 0; i < 10000; ++i) {
    SampleRng rng(5, 0, i);
    Placement p;
    p.height = 40;
    p.width = 50;
    step_as<PlacementStep>(*step).place(p, rng);
    ++tops[static_cast<int>(p.y0) + 4];
    ++lefts[static_cast<int>(p.x0) + 4];
  }
  ASSERT_EQ(tops.size(), 17u);
  EXPECT_EQ(tops.begin()->first, 0);
  EXPECT_EQ(tops.rbegin()->first, 16);
  for (const auto& [top, n] : tops) EXPECT_NEAR(n, 10000 / 17.0, 100) << top;
  ASSERT_EQ(lefts.size(), 27u);
  EXPECT_EQ(lefts.rbegin()->first, 26);
  for (const auto& [left, n] : lefts) EXPECT_NEAR(n, 10000 / 27.0, 80) << left;
}

TEST(WarpTest, ErrorsNameTheArgument) {
  const auto error = [](TransformSpec spec) {
    try {
      ImagePipeline({spec, CenterCropSpec{{4, 4}}}, {DType::kUInt8, Layout::kHWC});
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), ErrorKind::kConfig);
      return std::string(e.what());
    }
    return std::string("accepted");
  };
  EXPECT_EQ(error({"random_rotation", {{"degrees", {10, -10}}}}),
            "transform 0 RandomRotation: degrees must be (min, max) with min <= max, got [10, -10]");
  EXPECT_EQ(error({"random_rotation", {{"degrees", {0, 10}}, {"interpolation", {2}}}}),
            "transform 0 RandomRotation: interpolation must be 0 (nearest) or 1 (bilinear), got 2");
  EXPECT_EQ(error({"random_affine", {{"degrees", {0, 0}}, {"translate", {0.5, 1.5}}}}),
            "transform 0 RandomAffine: translate values must be in [0, 1], got [0.5, 1.5]");
  EXPECT_EQ(error({"random_affine", {{"degrees", {0, 0}}, {"scale", {0, 1}}}}),
            "transform 0 RandomAffine: scale values must be positive, got [0, 1]");
  EXPECT_EQ(error({"random_affine", {{"degrees", {0, 0}}, {"shear", {1, 2, 3}}}}),
            "transform 0 RandomAffine: shear must have 2 or 4 values, got [1, 2, 3]");
  EXPECT_EQ(error({"random_perspective", {{"distortion_scale", {1.5}}}}),
            "transform 0 RandomPerspective: distortion_scale must be in [0, 1], got 1.5");
  EXPECT_EQ(error({"random_perspective", {{"p", {-0.5}}}}),
            "transform 0 RandomPerspective: p must be in [0, 1], got -0.5");
}

}  // namespace
}  // namespace conveyor
