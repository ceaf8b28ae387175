#include "conveyor/ops/resize.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
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
    resize_image(src.view(), {0, 0, 17, 13}, out.data(), 13, 17, 17 * channels, true, scratch);
    EXPECT_EQ(out, src.pixels) << channels << " channels";
  }
}

TEST(ResizeImage, HalfPixelShiftAveragesNeighbours) {
  // A box shifted by half a pixel horizontally: each output pixel is the
  // rounded mean of two source pixels (the last one the replicated edge).
  const Image src{1, 4, 1, {10, 21, 40, 80}};
  std::vector<uint8_t> out(4), scratch;
  resize_image(src.view(), {0.5, 0, 4.5, 1}, out.data(), 1, 4, 4, true, scratch);
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
        resize_image(src.view(), box, out.data(), h, w, static_cast<ptrdiff_t>(w) * channels, false, scratch);
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

TEST(ResizeImage, WholePixelBoxReplicatesItsOwnEdges) {
  // A crop then a resize (PIL's order): the box's edge pixels are replicated,
  // its neighbours in the source are never read.
  Image src{3, 4, 1, {0, 0, 0, 0, 0, 100, 200, 0, 0, 0, 0, 0}};
  std::vector<uint8_t> out(4), scratch;
  resize_image(src.view(), {1, 1, 3, 2}, out.data(), 1, 4, 4, false, scratch);
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
        resize_image(src.view(), box, out.data(), h, w, static_cast<ptrdiff_t>(w) * channels, true, scratch);
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
        resize_image(src.view(), box, rgb.data(), h, w, stride, antialias, scratch);
        for (int c = 0; c < 3; ++c) {
          Image plane{src.height, src.width, 1, std::vector<uint8_t>(static_cast<size_t>(src.height) * src.width)};
          for (size_t i = 0; i < plane.pixels.size(); ++i) plane.pixels[i] = src.pixels[i * 3 + c];
          std::vector<uint8_t> gray(static_cast<size_t>(h) * w);
          resize_image(plane.view(), box, gray.data(), h, w, w, antialias, scratch);
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

}  // namespace
}  // namespace conveyor
