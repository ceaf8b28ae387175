#include "conveyor/ops/float_output.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include "conveyor/ops/testing/test_images.h"

namespace conveyor {
namespace {

// torchvision's float32 arithmetic, with its divisions: ToDtype(float32,
// scale=True) then Normalize.
std::vector<float> normalize_tables(const std::vector<float>& mean, const std::vector<float>& std) {
  std::vector<float> tables;
  for (size_t c = 0; c < mean.size(); ++c) {
    for (int v = 0; v < 256; ++v) tables.push_back((static_cast<float>(v) / 255.0f - mean[c]) / std[c]);
  }
  return tables;
}

// Value (x, y, c) of the CHW output: the table's value of the source pixel
// at x (or at w - 1 - x when mirrored).
std::vector<float> reference(const Image& image, bool flip, const std::vector<float>& tables) {
  const int h = image.height, w = image.width, channels = image.channels;
  std::vector<float> out(static_cast<size_t>(h) * w * channels);
  for (int c = 0; c < channels; ++c) {
    for (int y = 0; y < h; ++y) {
      for (int x = 0; x < w; ++x) {
        const int from = flip ? w - 1 - x : x;
        const uint8_t v = image.pixels[(static_cast<size_t>(y) * w + from) * channels + c];
        out[(static_cast<size_t>(c) * h + y) * w + x] = tables[c * 256 + v];
      }
    }
  }
  return out;
}

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

bool has_avx2() {
#if defined(__GNUC__) && defined(__x86_64__)
  return __builtin_cpu_supports("avx2");
#else
  return false;
#endif
}

const std::vector<float> kMean{0.485f, 0.456f, 0.406f}, kStd{0.229f, 0.224f, 0.225f};

TEST(WriteChwFloat, EveryValueIsItsTableEntryInPlace) {
  // Widths around the vector groups of 8; one and three channels; plain and
  // streaming stores (into a slot that is not 16-byte aligned as well).
  for (int channels : {1, 3}) {
    const std::vector<float> mean(kMean.begin(), kMean.begin() + channels), std(kStd.begin(), kStd.begin() + channels);
    const std::vector<float> tables = normalize_tables(mean, std);
    for (int w : {1, 7, 8, 9, 17, 224}) {
      const Image image = testing::make_noise(3, w, channels, static_cast<uint32_t>(w * channels));
      for (bool flip : {false, true}) {
        const std::vector<float> want = reference(image, flip, tables);
        for (bool stream : {false, true}) {
          std::vector<float> buffer(want.size() + 1);
          float* out = buffer.data() + (stream ? 1 : 0);
          write_chw_float(image.view(), flip, tables.data(), out, stream);
          EXPECT_TRUE(same_bits(std::vector<float>(out, out + want.size()), want))
              << channels << " channels, width " << w << ", flip " << flip << ", stream " << stream;
        }
      }
    }
  }
}

TEST(NormalizeArithmetic, GivesTorchvisionsDivisionsBitForBit) {
  if (!has_avx2()) GTEST_SKIP() << "NormalizeArithmetic needs AVX2";
  // ImageNet's mean and std, the bare conversion (0, 1: ToDtype without
  // Normalize) and drawn ones (stds of either sign, 0.01 to 100).
  std::mt19937 gen(11);
  std::uniform_real_distribution<float> mean_of(-2.0f, 2.0f), log_std_of(-2.0f, 2.0f);
  std::vector<std::vector<float>> means{kMean, {0, 0, 0}}, stds{kStd, {1, 1, 1}};
  for (int k = 0; k < 20; ++k) {
    means.push_back({mean_of(gen), mean_of(gen), mean_of(gen)});
    const float sign = k % 2 == 0 ? 1.0f : -1.0f;
    stds.push_back(
        {sign * std::pow(10.0f, log_std_of(gen)), std::pow(10.0f, log_std_of(gen)), std::pow(10.0f, log_std_of(gen))});
  }
  for (size_t k = 0; k < means.size(); ++k) {
    for (int channels : {1, 3}) {
      const std::vector<float> mean(means[k].begin(), means[k].begin() + channels),
          std(stds[k].begin(), stds[k].begin() + channels);
      const std::vector<float> tables = normalize_tables(mean, std);
      const auto arithmetic = NormalizeArithmetic::make(channels, mean.data(), std.data());
      ASSERT_TRUE(arithmetic.has_value()) << channels << " channels";
      for (int w : {1, 7, 8, 9, 17, 224}) {
        const Image image = testing::make_noise(5, w, channels, static_cast<uint32_t>(100 + w * channels + k));
        for (bool flip : {false, true}) {
          const std::vector<float> want = reference(image, flip, tables);
          for (bool stream : {false, true}) {
            std::vector<float> buffer(want.size() + 1);
            float* out = buffer.data() + (stream ? 1 : 0);
            arithmetic->write_chw(image.view(), flip, out, stream);
            ASSERT_TRUE(same_bits(std::vector<float>(out, out + want.size()), want))
                << "mean/std set " << k << ", " << channels << " channels, width " << w << ", flip " << flip
                << ", stream " << stream;
          }
        }
      }
    }
  }
}

TEST(NormalizeArithmetic, OnlyForOneOrThreeChannels) {
  const float mean[4] = {}, std[4] = {1, 1, 1, 1};
  EXPECT_FALSE(NormalizeArithmetic::make(2, mean, std).has_value());
  EXPECT_FALSE(NormalizeArithmetic::make(4, mean, std).has_value());
  EXPECT_EQ(NormalizeArithmetic::make(3, mean, std).has_value(), has_avx2());
}

}  // namespace
}  // namespace conveyor
