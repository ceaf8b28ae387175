#include "conveyor/ops/float_output.h"

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <vector>

#if defined(__SSE2__)
#include <emmintrin.h>
#endif
#if defined(__GNUC__) && defined(__x86_64__)
#include <immintrin.h>
#define CONVEYOR_AVX2_NORMALIZE 1
#endif

namespace conveyor {

namespace {

// Runs `write_row(y, planes)` for every row of an h x w image of `channels`
// planes; planes[c] is where row y of plane c goes: the output itself, or
// (stream) a per-thread row then copied out with non-temporal stores.
template <typename WriteRow>
void for_each_row(int h, int w, int channels, float* out, bool stream, WriteRow&& write_row) {
  const ptrdiff_t plane = static_cast<ptrdiff_t>(h) * w;
  float* planes[3];
#if defined(__SSE2__)
  if (stream) {
    thread_local std::vector<float> row;
    row.resize(static_cast<size_t>(channels) * w);
    for (int c = 0; c < channels; ++c) planes[c] = row.data() + static_cast<ptrdiff_t>(c) * w;
    for (int y = 0; y < h; ++y) {
      write_row(y, planes);
      for (int c = 0; c < channels; ++c) {
        float* o = out + c * plane + static_cast<ptrdiff_t>(y) * w;
        const float* from = planes[c];
        int x = 0;
        for (; x < w && (reinterpret_cast<uintptr_t>(o + x) & 15) != 0; ++x) o[x] = from[x];
        for (; x + 4 <= w; x += 4) _mm_stream_ps(o + x, _mm_loadu_ps(from + x));
        for (; x < w; ++x) o[x] = from[x];
      }
    }
    // Streaming stores are weakly ordered: complete them before the slot is
    // handed over (the lock that publishes it does not order them).
    _mm_sfence();
    return;
  }
#else
  (void)stream;
#endif
  for (int y = 0; y < h; ++y) {
    for (int c = 0; c < channels; ++c) planes[c] = out + c * plane + static_cast<ptrdiff_t>(y) * w;
    write_row(y, planes);
  }
}

#if defined(CONVEYOR_AVX2_NORMALIZE)
// torchvision's float32 (x / 255 - mean) / std on eight values: the same
// IEEE operations as the tables' scalar ones, so the same bits.
__attribute__((target("avx2"))) inline __m256 normalize8(__m256 x, __m256 mean, __m256 std) {
  return _mm256_div_ps(_mm256_sub_ps(_mm256_div_ps(x, _mm256_set1_ps(255.0f)), mean), std);
}

__attribute__((target("avx2"))) inline __m256 bytes_to_floats(__m128i bytes) {
  return _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(bytes));
}

// The bytes of 8 pixels at p (24 for RGB, read as 16 + 8 so that nothing
// past them is read) as 8 floats per channel.
template <int C>
__attribute__((target("avx2"))) inline void split_channels(const uint8_t* p, __m256* v) {
  if constexpr (C == 3) {
    const __m128i a = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
    const __m128i b = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(p + 16));
    const __m128i ra = _mm_setr_epi8(0, 3, 6, 9, 12, 15, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1);
    const __m128i rb = _mm_setr_epi8(-1, -1, -1, -1, -1, -1, 2, 5, -1, -1, -1, -1, -1, -1, -1, -1);
    const __m128i ga = _mm_setr_epi8(1, 4, 7, 10, 13, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1);
    const __m128i gb = _mm_setr_epi8(-1, -1, -1, -1, -1, 0, 3, 6, -1, -1, -1, -1, -1, -1, -1, -1);
    const __m128i ba = _mm_setr_epi8(2, 5, 8, 11, 14, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1);
    const __m128i bb = _mm_setr_epi8(-1, -1, -1, -1, -1, 1, 4, 7, -1, -1, -1, -1, -1, -1, -1, -1);
    v[0] = bytes_to_floats(_mm_or_si128(_mm_shuffle_epi8(a, ra), _mm_shuffle_epi8(b, rb)));
    v[1] = bytes_to_floats(_mm_or_si128(_mm_shuffle_epi8(a, ga), _mm_shuffle_epi8(b, gb)));
    v[2] = bytes_to_floats(_mm_or_si128(_mm_shuffle_epi8(a, ba), _mm_shuffle_epi8(b, bb)));
  } else {
    v[0] = bytes_to_floats(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p)));
  }
}

// One row of 8-pixel groups: pixels i .. i + 7 split into channels,
// converted, normalized and stored (flip: reversed, at the mirrored place).
// The last w % 8 pixels go through a zero-padded copy.
template <int C>
__attribute__((target("avx2"))) void normalized_row_avx2(const uint8_t* s, int w, bool flip, const float* mean,
                                                         const float* std, float* const* planes) {
  __m256 m[C], sd[C];
  for (int c = 0; c < C; ++c) {
    m[c] = _mm256_set1_ps(mean[c]);
    sd[c] = _mm256_set1_ps(std[c]);
  }
  const __m256i reverse = _mm256_setr_epi32(7, 6, 5, 4, 3, 2, 1, 0);
  int i = 0;
  for (; i + 8 <= w; i += 8) {
    __m256 v[C];
    split_channels<C>(s + static_cast<ptrdiff_t>(i) * C, v);
    for (int c = 0; c < C; ++c) {
      const __m256 o = normalize8(v[c], m[c], sd[c]);
      if (flip) {
        _mm256_storeu_ps(planes[c] + (w - 8 - i), _mm256_permutevar8x32_ps(o, reverse));
      } else {
        _mm256_storeu_ps(planes[c] + i, o);
      }
    }
  }
  if (i < w) {
    const int n = w - i;
    alignas(32) uint8_t tail[8 * C + 8] = {};
    std::memcpy(tail, s + static_cast<ptrdiff_t>(i) * C, static_cast<size_t>(n) * C);
    __m256 v[C];
    split_channels<C>(tail, v);
    alignas(32) float values[8];
    for (int c = 0; c < C; ++c) {
      _mm256_store_ps(values, normalize8(v[c], m[c], sd[c]));
      for (int k = 0; k < n; ++k) planes[c][flip ? w - 1 - (i + k) : i + k] = values[k];
    }
  }
}
#endif

}  // namespace

std::optional<NormalizeArithmetic> NormalizeArithmetic::make(int channels, const float* mean, const float* std) {
#if defined(CONVEYOR_AVX2_NORMALIZE)
  if ((channels != 1 && channels != 3) || !__builtin_cpu_supports("avx2")) return std::nullopt;
  NormalizeArithmetic arithmetic;
  arithmetic.channels_ = channels;
  std::copy(mean, mean + channels, arithmetic.mean_);
  std::copy(std, std + channels, arithmetic.std_);
  return arithmetic;
#else
  (void)channels, (void)mean, (void)std;
  return std::nullopt;
#endif
}

void NormalizeArithmetic::write_chw(const ImageView& image, bool flip, float* out, bool stream) const {
#if defined(CONVEYOR_AVX2_NORMALIZE)
  const int w = image.width;
  for_each_row(image.height, w, channels_, out, stream, [&](int y, float* const* planes) {
    if (channels_ == 3) {
      normalized_row_avx2<3>(image.row(y), w, flip, mean_, std_, planes);
    } else {
      normalized_row_avx2<1>(image.row(y), w, flip, mean_, std_, planes);
    }
  });
#else
  // No instance exists without AVX2 (make).
  (void)image, (void)flip, (void)out, (void)stream;
  __builtin_unreachable();
#endif
}

void write_chw_float(const ImageView& image, bool flip, const float* tables, float* out, bool stream) {
  const int w = image.width, channels = image.channels;
  for_each_row(image.height, w, channels, out, stream, [&](int y, float* const* planes) {
    const uint8_t* s = image.row(y);
    if (channels == 3) {
      for (int x = 0; x < w; ++x) {
        const int to = flip ? w - 1 - x : x;
        planes[0][to] = tables[s[3 * x]];
        planes[1][to] = tables[256 + s[3 * x + 1]];
        planes[2][to] = tables[512 + s[3 * x + 2]];
      }
    } else {
      for (int x = 0; x < w; ++x) planes[0][flip ? w - 1 - x : x] = tables[s[x]];
    }
  });
}

}  // namespace conveyor
