#include "conveyor/ops/resize.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <utility>
#include <vector>

#include "conveyor/ops/testing/test_images.h"

namespace conveyor {
namespace {

// Bilinear interpolation in double precision, edges replicated: what the
// sampling (no antialiasing) computes in fixed point.
double reference(const Image& img, double fx, double fy, int c) {
  const auto at = [&](int x, int y) {
    x = std::clamp(x, 0, img.width - 1);
    y = std::clamp(y, 0, img.height - 1);
    return static_cast<double>(img.pixels[(static_cast<size_t>(y) * img.width + x) * img.channels + c]);
  };
  fx = std::clamp(fx, 0.0, img.width - 1.0);
  fy = std::clamp(fy, 0.0, img.height - 1.0);
  const int x0 = static_cast<int>(std::floor(fx)), y0 = static_cast<int>(std::floor(fy));
  const double a = fx - x0, b = fy - y0;
  return (at(x0, y0) * (1 - a) + at(x0 + 1, y0) * a) * (1 - b) +
         (at(x0, y0 + 1) * (1 - a) + at(x0 + 1, y0 + 1) * a) * b;
}

TEST(ResizeImage, SameSizeWholeBoxIsACopy) {
  for (int channels : {1, 3, 4}) {
    const Image src = testing::make_noise(13, 17, channels, 1);
    std::vector<uint8_t> out(src.pixels.size()), scratch;
    resize_image(src.view(), {0, 0, 17, 13}, out.data(), 13, 17, 17 * channels, Resampling{}, scratch);
    EXPECT_EQ(out, src.pixels) << channels << " channels";
  }
}

TEST(ResizeImage, HalfPixelShiftAveragesNeighbours) {
  // A box shifted by half a pixel horizontally: each output pixel is the
  // rounded mean of two source pixels (the last one the replicated edge).
  const Image src{1, 4, 1, {10, 21, 40, 80}};
  std::vector<uint8_t> out(4), scratch;
  resize_image(src.view(), {0.5, 0, 4.5, 1}, out.data(), 1, 4, 4, Resampling{}, scratch);
  EXPECT_EQ(out, (std::vector<uint8_t>{16, 31, 60, 80}));  // 15.5 -> 16, 30.5 -> 31.
}

TEST(ResizeImage, SamplingMatchesExactBilinearWithinItsFixedPoint) {
  // Fractional boxes, growing and shrinking (no antialiasing: the sampling
  // alone), boxes reaching past the edges; every channel count's path. The
  // bound: rounding (0.5) plus positions rounded to 1/128 pixel vertically
  // and 1/4096 horizontally, times the largest step between pixels (255).
  const double bound = 0.5 + 255.0 / 256 + 255.0 / 8192 + 1e-9;
  const BoxF boxes[] = {{0, 0, 31, 23}, {2.37, 1.61, 20.9, 17.3}, {-1.5, -0.75, 33.25, 24.5}, {5.2, 3.1, 9.7, 8.4}};
  const int sizes[][2] = {{23, 31}, {40, 57}, {11, 9}, {1, 1}, {7, 64}};
  for (int channels : {1, 3, 4}) {
    const Image src = testing::make_noise(23, 31, channels, 7 + channels);
    for (const BoxF& box : boxes) {
      for (const auto& size : sizes) {
        const int h = size[0], w = size[1];
        std::vector<uint8_t> out(static_cast<size_t>(h) * w * channels), scratch;
        resize_image(src.view(), box, out.data(), h, w, static_cast<ptrdiff_t>(w) * channels,
                     Resampling{.antialias = false}, scratch);
        const double sx = (box.x1 - box.x0) / w, sy = (box.y1 - box.y0) / h;
        for (int y = 0; y < h; ++y) {
          for (int x = 0; x < w; ++x) {
            for (int c = 0; c < channels; ++c) {
              const double expected = reference(src, box.x0 + (x + 0.5) * sx - 0.5, box.y0 + (y + 0.5) * sy - 0.5, c);
              const int got = out[(static_cast<size_t>(y) * w + x) * channels + c];
              ASSERT_LE(std::abs(got - expected), bound)
                  << channels << " channels, " << w << "x" << h << " at (" << x << ", " << y << ", " << c << ")";
            }
          }
        }
      }
    }
  }
}

TEST(ResizeImage, ABoxSeesItsNeighboursAndTheEdgesOfSrcAreReplicated) {
  // A box of whole pixels inside the image (a crop of a resize): its edge
  // pixels blend with their neighbours. The crop alone as `src` (a crop,
  // then a resize: PIL's order) replicates its own edges instead.
  Image src{3, 4, 1, {0, 0, 0, 0, 0, 100, 200, 0, 0, 0, 0, 0}};
  std::vector<uint8_t> out(4), scratch;
  resize_image(src.view(), {1, 1, 3, 2}, out.data(), 1, 4, 4, Resampling{.antialias = false}, scratch);
  EXPECT_EQ(out, (std::vector<uint8_t>{75, 125, 175, 150}));
  const ImageView crop{src.pixels.data() + 5, 1, 2, 1, 4};
  resize_image(crop, {0, 0, 2, 1}, out.data(), 1, 4, 4, Resampling{.antialias = false}, scratch);
  EXPECT_EQ(out, (std::vector<uint8_t>{100, 125, 175, 200}));
}

// PIL's tent of a shrink by s <= 2 ({a, 1, a} / (1 + 2a), a = 1 - 1/s; edges
// replicated) on both axes, in double precision.
void tent_reference(const Image& img, double sx, double sy, std::vector<double>& out) {
  const auto side = [](double s) { return s > 1 ? 1 - 1 / s : 0.0; };
  const double ax = side(sx), ay = side(sy);
  const int h = img.height, w = img.width, c = img.channels;
  std::vector<double> rows(img.pixels.size());
  out.assign(img.pixels.size(), 0);
  const auto px = [&](int x, int y, int ch) {
    return static_cast<double>(
        img.pixels[(static_cast<size_t>(std::clamp(y, 0, h - 1)) * w + std::clamp(x, 0, w - 1)) * c + ch]);
  };
  for (int y = 0; y < h; ++y)
    for (int x = 0; x < w; ++x)
      for (int ch = 0; ch < c; ++ch)
        rows[(static_cast<size_t>(y) * w + x) * c + ch] =
            (ay * px(x, y - 1, ch) + px(x, y, ch) + ay * px(x, y + 1, ch)) / (1 + 2 * ay);
  for (int y = 0; y < h; ++y)
    for (int x = 0; x < w; ++x)
      for (int ch = 0; ch < c; ++ch) {
        const auto at = [&](int xx) { return rows[(static_cast<size_t>(y) * w + std::clamp(xx, 0, w - 1)) * c + ch]; };
        out[(static_cast<size_t>(y) * w + x) * c + ch] = (ax * at(x - 1) + at(x) + ax * at(x + 1)) / (1 + 2 * ax);
      }
}

TEST(ResizeImage, ShrinkByAtMostTwoIsTentThenExactBilinear) {
  // The tent is applied inside the sampling (no 8-bit image in between): the
  // result is the double-precision tent + bilinear within the fixed point's
  // error: rounding (0.5) plus the four vertical taps rounded to 1/128 each,
  // times full-range steps between neighbours (random noise, the worst case:
  // 1.7 levels at most here; photos stay well under 1).
  const int sizes[][2] = {{16, 20}, {20, 30}, {25, 19}, {16, 40}};  // Both axes shrink by <= 2, or grow.
  for (int channels : {1, 3}) {
    const Image src = testing::make_noise(31, 37, channels, 3 + channels);
    for (const BoxF& box : {BoxF{0, 0, 37, 31}, BoxF{1.3, 2.6, 35.1, 30.2}}) {
      for (const auto& size : sizes) {
        const int h = size[0], w = size[1];
        const double sx = (box.x1 - box.x0) / w, sy = (box.y1 - box.y0) / h;
        std::vector<double> smooth;
        tent_reference(src, sx, sy, smooth);
        std::vector<uint8_t> out(static_cast<size_t>(h) * w * channels), scratch;
        resize_image(src.view(), box, out.data(), h, w, static_cast<ptrdiff_t>(w) * channels, Resampling{}, scratch);
        double worst = 0;
        for (int y = 0; y < h; ++y) {
          for (int x = 0; x < w; ++x) {
            for (int c = 0; c < channels; ++c) {
              const double fx = std::clamp(box.x0 + (x + 0.5) * sx - 0.5, 0.0, src.width - 1.0);
              const double fy = std::clamp(box.y0 + (y + 0.5) * sy - 0.5, 0.0, src.height - 1.0);
              const int x0 = static_cast<int>(fx), y0 = static_cast<int>(fy);
              const double a = fx - x0, b = fy - y0;
              const auto at = [&](int xx, int yy) {
                return smooth[(static_cast<size_t>(std::min(yy, src.height - 1)) * src.width +
                               std::min(xx, src.width - 1)) *
                                  channels +
                              c];
              };
              const double expected = (at(x0, y0) * (1 - a) + at(x0 + 1, y0) * a) * (1 - b) +
                                      (at(x0, y0 + 1) * (1 - a) + at(x0 + 1, y0 + 1) * a) * b;
              worst = std::max(worst, std::abs(out[(static_cast<size_t>(y) * w + x) * channels + c] - expected));
            }
          }
        }
        EXPECT_LE(worst, 2.0) << channels << " channels, " << w << "x" << h;
      }
    }
  }
}

TEST(ResizeImage, RgbEqualsEachChannelResizedAlone) {
  // The 3-channel column blend runs vectorized (AVX2 four pixels per step,
  // SSE2 one, a scalar tail), the 1-channel one scalar, with the same integer
  // arithmetic: every byte must agree. Widths cover each path's tail and a
  // stride wider than the row (the vector stores must stay inside it).
  const Image src = testing::make_noise(41, 53, 3, 11);
  for (const BoxF& box : {BoxF{0, 0, 53, 41}, BoxF{2.4, 1.7, 47.9, 39.2}, BoxF{10, 10, 30, 25}}) {
    for (int w : {1, 2, 5, 6, 7, 9, 10, 31, 64, 101}) {
      for (bool antialias : {false, true}) {
        const int h = 23;
        const ptrdiff_t stride = static_cast<ptrdiff_t>(w) * 3 + 5;
        std::vector<uint8_t> rgb(static_cast<size_t>(h) * stride, 0xAB), scratch;
        resize_image(src.view(), box, rgb.data(), h, w, stride, Resampling{.antialias = antialias}, scratch);
        for (int c = 0; c < 3; ++c) {
          Image plane{src.height, src.width, 1, std::vector<uint8_t>(static_cast<size_t>(src.height) * src.width)};
          for (size_t i = 0; i < plane.pixels.size(); ++i) plane.pixels[i] = src.pixels[i * 3 + c];
          std::vector<uint8_t> gray(static_cast<size_t>(h) * w);
          resize_image(plane.view(), box, gray.data(), h, w, w, Resampling{.antialias = antialias}, scratch);
          for (int y = 0; y < h; ++y) {
            for (int x = 0; x < w; ++x) {
              ASSERT_EQ(rgb[static_cast<size_t>(y) * stride + x * 3 + c], gray[static_cast<size_t>(y) * w + x])
                  << "width " << w << " channel " << c << " at (" << x << ", " << y << ")";
            }
            for (ptrdiff_t i = static_cast<ptrdiff_t>(w) * 3; i < stride; ++i) {
              ASSERT_EQ(rgb[static_cast<size_t>(y * stride + i)], 0xAB) << "written past the row, width " << w;
            }
          }
        }
      }
    }
  }
}

// (x * 37 + y * 91 + c * 53 + x * y * 7) mod 256: the image the expected
// bytes below were computed from, with torchvision 0.29.1 (torch 2.14.1):
// TF.resize(image, size, interpolation=BICUBIC, antialias=...) on uint8.
Image formula_image(int height, int width, int channels) {
  Image img{height, width, channels, std::vector<uint8_t>(static_cast<size_t>(height) * width * channels)};
  for (int y = 0; y < height; ++y)
    for (int x = 0; x < width; ++x)
      for (int c = 0; c < channels; ++c)
        img.pixels[(static_cast<size_t>(y) * width + x) * channels + c] =
            static_cast<uint8_t>((x * 37 + y * 91 + c * 53 + x * y * 7) % 256);
  return img;
}

std::vector<uint8_t> resized(const Image& src, const BoxF& box, int h, int w, Resampling r) {
  std::vector<uint8_t> out(static_cast<size_t>(h) * w * src.channels), scratch;
  resize_image(src.view(), box, out.data(), h, w, static_cast<ptrdiff_t>(w) * src.channels, r, scratch);
  return out;
}

std::vector<uint8_t> resized(const Image& src, int h, int w, Resampling r) {
  return resized(src, {0, 0, static_cast<double>(src.width), static_cast<double>(src.height)}, h, w, r);
}

TEST(ResizeImage, BicubicGivesTorchsUint8ResultExactly) {
  constexpr Resampling kAntialiased{Interpolation::kBicubic, true}, kPlain{Interpolation::kBicubic, false};
  const Image rgb = formula_image(9, 11, 3), gray = formula_image(5, 4, 1);
  EXPECT_EQ(resized(rgb, 4, 5, kAntialiased),
            (std::vector<uint8_t>{
                96,  130, 145, 122, 129, 148, 127, 137, 133, 109, 122, 141, 117, 125, 141, 124, 134, 125, 140, 139,
                137, 145, 136, 126, 132, 125, 123, 130, 137, 128, 110, 156, 126, 122, 132, 108, 149, 129, 123, 126,
                142, 120, 137, 125, 97,  131, 97,  145, 134, 117, 155, 119, 123, 117, 126, 123, 127, 127, 117, 147,
            }));
  EXPECT_EQ(resized(rgb, 4, 5, kPlain),
            (std::vector<uint8_t>{
                66,  139, 224, 208, 83,  98,  88, 141, 130, 114, 173, 188, 132, 47,  132, 60, 90, 145, 170, 253,
                79,  57,  110, 152, 179, 183, 8,  28,  117, 172, 73,  126, 98,  134, 215, 33, 52, 105, 147, 162,
                219, 37,  114, 154, 127, 177, 56, 106, 157, 148, 206, 74,  127, 116, 182, 55, 95, 128, 127, 187,
            }));
  EXPECT_EQ(resized(gray, 9, 7, kAntialiased),
            (std::vector<uint8_t>{
                0,   2,   26,  48,  68,  92,  105, 21,  32,  57,  85,  111, 137, 150, 77,  91,  120, 150, 181, 209, 224,
                142, 163, 193, 154, 115, 145, 166, 178, 205, 237, 131, 24,  56,  83,  82,  106, 142, 106, 73,  121, 151,
                12,  32,  71,  112, 149, 176, 188, 72,  93,  136, 189, 209, 130, 81,  110, 133, 176, 232, 239, 101, 19,
            }));
  EXPECT_EQ(resized(gray, 9, 7, kPlain),
            (std::vector<uint8_t>{
                0,   1,   23,  46,  67,  90,  104, 22,  33,  57,  89,  120, 145, 158, 73,  87,  114, 149, 185, 212, 226,
                149, 175, 202, 158, 114, 141, 167, 177, 212, 240, 131, 21,  49,  84,  82,  111, 143, 101, 65,  113, 153,
                8,   30,  67,  114, 155, 178, 189, 64,  87,  126, 189, 208, 142, 87,  111, 135, 176, 243, 239, 110, 11,
            }));
  // Only the width changes: torch skips the vertical pass.
  EXPECT_EQ(
      resized(rgb, 9, 4, kAntialiased),
      (std::vector<uint8_t>{
          35,  89,  148, 143, 187, 188, 120, 85,  86,  67,  125, 184, 145, 178, 162, 110, 81,  99,  114, 170, 188, 154,
          107, 91,  153, 107, 87,  115, 156, 164, 136, 101, 109, 120, 178, 158, 79,  137, 170, 174, 144, 121, 137, 140,
          117, 106, 91,  124, 161, 146, 106, 131, 134, 133, 147, 124, 123, 173, 151, 111, 97,  156, 109, 148, 113, 97,
          112, 156, 140, 90,  144, 97,  100, 154, 145, 107, 151, 116, 170, 133, 98,  146, 104, 95,  136, 95,  148, 126,
          95,  148, 128, 97,  150, 143, 97,  150, 140, 93,  153, 149, 127, 133, 89,  149, 110, 104, 157, 148,
      }));
}

TEST(ResizeImage, ABoxStartingWholeOutputsInIsTheCropOfTheWholeResize) {
  // Resize then crop, fused: the box of the crop in source pixels. Nearest
  // and bicubic: every byte equals the crop of the whole resize. Bilinear
  // places samples to 1/4096 pixel: within a level.
  const Image src = testing::make_noise(37, 45, 3, 5);
  for (Interpolation mode :
       {Interpolation::kBicubic, Interpolation::kNearest, Interpolation::kNearestExact, Interpolation::kBilinear}) {
    for (bool antialias : {true, false}) {
      const Resampling r{mode, antialias};
      for (auto [oh, ow] : {std::pair{20, 26}, std::pair{61, 80}}) {
        const std::vector<uint8_t> whole = resized(src, oh, ow, r);
        const double sx = 45.0 / ow, sy = 37.0 / oh;
        const int top = 3, left = 5, h = oh - 7, w = ow - 9;
        const std::vector<uint8_t> part = resized(src, {left * sx, top * sy, (left + w) * sx, (top + h) * sy}, h, w, r);
        int worst = 0;
        for (int y = 0; y < h; ++y)
          for (int x = 0; x < w * 3; ++x)
            worst = std::max(worst, std::abs(part[static_cast<size_t>(y) * w * 3 + x] -
                                             whole[static_cast<size_t>(y + top) * ow * 3 + left * 3 + x]));
        EXPECT_LE(worst, mode == Interpolation::kBilinear ? 1 : 0)
            << static_cast<int>(mode) << " antialias " << antialias << " " << oh << "x" << ow;
      }
    }
  }
}

TEST(ResizeImage, NearestPicksTorchsSourcePixels) {
  const Image row{1, 5, 1, {10, 11, 12, 13, 14}};
  // Nearest: floor(i * 5 / 3); nearest-exact: floor((i + 0.5) * 5 / 3).
  EXPECT_EQ(resized(row, 1, 3, {Interpolation::kNearest, true}), (std::vector<uint8_t>{10, 11, 13}));
  EXPECT_EQ(resized(row, 1, 3, {Interpolation::kNearestExact, true}), (std::vector<uint8_t>{10, 12, 14}));
  // Twice the size: each pixel twice; 5 -> 7: nearest repeats early, exact centred.
  EXPECT_EQ(resized(row, 1, 10, {Interpolation::kNearest, true}),
            (std::vector<uint8_t>{10, 10, 11, 11, 12, 12, 13, 13, 14, 14}));
  EXPECT_EQ(resized(row, 1, 7, {Interpolation::kNearest, true}), (std::vector<uint8_t>{10, 10, 11, 12, 12, 13, 14}));
  EXPECT_EQ(resized(row, 1, 7, {Interpolation::kNearestExact, true}),
            (std::vector<uint8_t>{10, 11, 11, 12, 13, 13, 14}));
}

TEST(ResizeImage, AStrongBicubicShrinkIsBoxReducedFirstAndStaysClose) {
  // 4000 x 3 to 10 x 3: a shrink by 400, past kMaxCubicScale. A ramp stays a
  // ramp within a few levels.
  Image ramp{3, 4000, 1, std::vector<uint8_t>(12000)};
  for (int y = 0; y < 3; ++y)
    for (int x = 0; x < 4000; ++x)
      ramp.pixels[static_cast<size_t>(y) * 4000 + x] = static_cast<uint8_t>(x * 256 / 4000);
  const std::vector<uint8_t> out = resized(ramp, 3, 10, {Interpolation::kBicubic, true});
  for (int x = 0; x < 10; ++x) EXPECT_NEAR(out[x], (x + 0.5) * 25.6, 3) << x;
}

}  // namespace
}  // namespace conveyor
