#include "conveyor/ops/float_output.h"

#include <cmath>
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

const float kInverse255 = 1.0f / 255.0f;

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
// NormalizeArithmetic::value on eight values.
__attribute__((target("avx2,fma"))) inline __m256 normalize8(__m256 x, __m256 mean, __m256 std, __m256 inverse_std) {
  const __m256 c255 = _mm256_set1_ps(255.0f), inverse255 = _mm256_set1_ps(kInverse255);
  __m256 q = _mm256_mul_ps(x, inverse255);
  q = _mm256_fmadd_ps(_mm256_fnmadd_ps(q, c255, x), inverse255, q);
  const __m256 d = _mm256_sub_ps(q, mean);
  const __m256 o = _mm256_mul_ps(d, inverse_std);
  return _mm256_fmadd_ps(_mm256_fnmadd_ps(o, std, d), inverse_std, o);
}

__attribute__((target("avx2,fma"))) inline __m256 bytes_to_floats(__m128i bytes) {
  return _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(bytes));
}

// The bytes of 8 pixels at p (24 for RGB, read as 16 + 8 so that nothing
// past them is read) as 8 floats per channel.
template <int C>
__attribute__((target("avx2,fma"))) inline void split_channels(const uint8_t* p, __m256* v) {
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
__attribute__((target("avx2,fma"))) void normalized_row_avx2(const uint8_t* s, int w, bool flip, const float* mean,
                                                             const float* std, const float* inverse_std,
                                                             float* const* planes) {
  __m256 m[C], sd[C], inv[C];
  for (int c = 0; c < C; ++c) {
    m[c] = _mm256_set1_ps(mean[c]);
    sd[c] = _mm256_set1_ps(std[c]);
    inv[c] = _mm256_set1_ps(inverse_std[c]);
  }
  const __m256i reverse = _mm256_setr_epi32(7, 6, 5, 4, 3, 2, 1, 0);
  int i = 0;
  for (; i + 8 <= w; i += 8) {
    __m256 v[C];
    split_channels<C>(s + static_cast<ptrdiff_t>(i) * C, v);
    for (int c = 0; c < C; ++c) {
      const __m256 o = normalize8(v[c], m[c], sd[c], inv[c]);
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
      _mm256_store_ps(values, normalize8(v[c], m[c], sd[c], inv[c]));
      for (int k = 0; k < n; ++k) planes[c][flip ? w - 1 - (i + k) : i + k] = values[k];
    }
  }
}
#endif

}  // namespace

std::optional<NormalizeArithmetic> NormalizeArithmetic::matching(const float* tables, int channels, const float* mean,
                                                                 const float* std) {
#if defined(CONVEYOR_AVX2_NORMALIZE)
  if (channels != 1 && channels != 3) return std::nullopt;
  if (!__builtin_cpu_supports("avx2") || !__builtin_cpu_supports("fma")) return std::nullopt;
  NormalizeArithmetic arithmetic;
  arithmetic.channels_ = channels;
  for (int c = 0; c < channels; ++c) {
    arithmetic.mean_[c] = mean[c];
    arithmetic.std_[c] = std[c];
    arithmetic.inverse_std_[c] = 1.0f / std[c];
    for (int v = 0; v < 256; ++v) {
      // Bit for bit: a table value that is NaN (or -0 against +0) is a mismatch too.
      const float got = arithmetic.value(c, v), want = tables[c * 256 + v];
      if (std::memcmp(&got, &want, sizeof got) != 0) return std::nullopt;
    }
  }
  return arithmetic;
#else
  (void)tables, (void)channels, (void)mean, (void)std;
  return std::nullopt;
#endif
}

float NormalizeArithmetic::value(int channel, int v) const {
  // The roundings of normalize8: fma is exact-then-rounded in both.
  const auto x = static_cast<float>(v);
  float q = x * kInverse255;
  q = std::fma(std::fma(-q, 255.0f, x), kInverse255, q);
  const float d = q - mean_[channel];
  const float o = d * inverse_std_[channel];
  return std::fma(std::fma(-o, std_[channel], d), inverse_std_[channel], o);
}

void NormalizeArithmetic::write_chw(const ImageView& image, bool flip, float* out, bool stream) const {
#if defined(CONVEYOR_AVX2_NORMALIZE)
  const int w = image.width;
  for_each_row(image.height, w, channels_, out, stream, [&](int y, float* const* planes) {
    if (channels_ == 3) {
      normalized_row_avx2<3>(image.row(y), w, flip, mean_, std_, inverse_std_, planes);
    } else {
      normalized_row_avx2<1>(image.row(y), w, flip, mean_, std_, inverse_std_, planes);
    }
  });
#else
  (void)image, (void)flip, (void)out, (void)stream;
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
