#include "conveyor/ops/transforms/histogram.h"

#include <algorithm>
#include <array>
#include <cstdint>

#include "conveyor/ops/transforms/image_step.h"
#include "conveyor/ops/transforms/pixel_tables.h"
#if defined(__SSE2__)
#include <emmintrin.h>
#endif

namespace conveyor {

namespace {

// Per-channel histograms of 1 or 3 channels.
std::array<std::array<int64_t, 256>, 3> histograms(const Image& image) {
  std::array<std::array<int64_t, 256>, 3> hist{};
  const int c = image.channels;
  const size_t n = image.pixels.size();
  const uint8_t* px = image.pixels.data();
  if (c == 3) {
    // Unrolled: a loop over a run-time channel count costs more than the counting.
    for (size_t i = 0; i + 2 < n; i += 3) {
      ++hist[0][px[i]];
      ++hist[1][px[i + 1]];
      ++hist[2][px[i + 2]];
    }
    return hist;
  }
  for (size_t i = 0; i < n; i += c) {
    for (int k = 0; k < c; ++k) ++hist[k][px[i + k]];
  }
  return hist;
}

// Per-channel minimum and maximum of 1 or 3 channels: 48-byte blocks (16
// whole RGB pixels) reduced lane by lane (SSE2 byte min/max); lane j of a
// block is channel j % c. (Blocks are read for 1 or 3 channels only.)
std::array<std::array<uint8_t, 2>, 3> channel_ranges(const Image& image) {
  const int c = image.channels;
  const size_t n = image.pixels.size();
  const uint8_t* px = image.pixels.data();
  constexpr size_t kBlock = 48;
  alignas(16) uint8_t lo[kBlock], hi[kBlock];
  std::fill(lo, lo + kBlock, uint8_t{255});
  std::fill(hi, hi + kBlock, uint8_t{0});
  size_t i = 0;
#if defined(__SSE2__)
  if (c == 1 || c == 3) {
    __m128i l[3], h[3];
    for (int k = 0; k < 3; ++k) {
      l[k] = _mm_set1_epi8(static_cast<char>(0xff));
      h[k] = _mm_setzero_si128();
    }
    for (; i + kBlock <= n; i += kBlock) {
      for (int k = 0; k < 3; ++k) {
        const __m128i v = _mm_loadu_si128(reinterpret_cast<const __m128i*>(px + i + 16 * k));
        l[k] = _mm_min_epu8(l[k], v);
        h[k] = _mm_max_epu8(h[k], v);
      }
    }
    for (int k = 0; k < 3; ++k) {
      _mm_store_si128(reinterpret_cast<__m128i*>(lo + 16 * k), l[k]);
      _mm_store_si128(reinterpret_cast<__m128i*>(hi + 16 * k), h[k]);
    }
  }
#endif
  std::array<std::array<uint8_t, 2>, 3> range{};
  for (int k = 0; k < c; ++k) range[k] = {255, 0};
  if (i > 0) {
    for (size_t j = 0; j < kBlock; ++j) {
      auto& r = range[j % static_cast<size_t>(c)];
      r = {std::min(r[0], lo[j]), std::max(r[1], hi[j])};
    }
  }
  for (; i < n; ++i) {
    auto& r = range[i % static_cast<size_t>(c)];
    r = {std::min(r[0], px[i]), std::max(r[1], px[i])};
  }
  return range;
}

}  // namespace

ChannelTables autocontrast_tables(const Image& image) {
  ChannelTables luts = identity_tables();
  if (image.pixels.empty()) return luts;
  const auto ranges = channel_ranges(image);
  const float inv255 = static_cast<float>(1.0 / 255);
  for (int k = 0; k < image.channels; ++k) {
    const int lo = ranges[k][0], hi = ranges[k][1];
    // torchvision: inv_scale = (max - min) * (1 / 255); a constant channel
    // gets min 0 and scale 1 (unchanged).
    const float minimum = lo == hi ? 0.0f : static_cast<float>(lo);
    const float inv_scale = lo == hi ? 1.0f : static_cast<float>(hi - lo) * inv255;
    for (int v = 0; v < 256; ++v) {
      luts[k][v] =
          static_cast<uint8_t>(std::min(std::max((static_cast<float>(v) - minimum) / inv_scale, 0.0f), 255.0f));
    }
  }
  return luts;
}

ChannelTables equalize_tables(const Image& image) {
  ChannelTables luts = identity_tables();
  if (image.pixels.empty()) return luts;
  const auto hist = histograms(image);
  const int64_t count = static_cast<int64_t>(image.pixels.size()) / image.channels;
  for (int k = 0; k < image.channels; ++k) {
    int last = 255;
    while (hist[k][last] == 0) --last;
    const int64_t step = (count - hist[k][last]) / 255;
    if (step == 0) continue;  // Unchanged.
    int64_t cumulative = 0;
    luts[k][0] = 0;
    for (int v = 1; v < 256; ++v) {
      cumulative += hist[k][v - 1];
      luts[k][v] = static_cast<uint8_t>(std::min<int64_t>((cumulative + step / 2) / step, 255));
    }
  }
  return luts;
}

void autocontrast(Image& image) { apply_tables(image, autocontrast_tables(image)); }

void equalize(Image& image) { apply_tables(image, equalize_tables(image)); }

std::unique_ptr<const TransformStep> make_random_autocontrast_step(const TransformParams& params) {
  TransformArgs args("RandomAutocontrast", params);
  const double p = probability_arg(args, 0.5);
  args.finish();
  return make_image_step(p, [](SampleImage& sample, SampleRng& /*rng*/) { autocontrast(sample.image); });
}

std::unique_ptr<const TransformStep> make_random_equalize_step(const TransformParams& params) {
  TransformArgs args("RandomEqualize", params);
  const double p = probability_arg(args, 0.5);
  args.finish();
  return make_image_step(p, [](SampleImage& sample, SampleRng& /*rng*/) { equalize(sample.image); });
}

void autocontrast_function(const TransformParams& params, SampleImage& sample) {
  TransformArgs("autocontrast", params).finish();
  check_color_channels("autocontrast", sample.image);
  autocontrast(sample.image);
}

void equalize_function(const TransformParams& params, SampleImage& sample) {
  TransformArgs("equalize", params).finish();
  check_color_channels("equalize", sample.image);
  equalize(sample.image);
}

}  // namespace conveyor
