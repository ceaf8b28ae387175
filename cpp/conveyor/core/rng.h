#pragma once

#include <cstdint>
#include <vector>

namespace conveyor {

/// SplitMix64's finalizer: a bijective 64-bit mix with good avalanche.
constexpr uint64_t mix64(uint64_t x) noexcept {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

namespace detail {

/// High 64 bits of the 128-bit product a * b, from four 32-bit partial
/// products: for compilers without a 128-bit integer.
constexpr uint64_t mul_high_u64_portable(uint64_t a, uint64_t b) noexcept {
  const uint64_t a_lo = a & 0xffffffffULL, a_hi = a >> 32, b_lo = b & 0xffffffffULL, b_hi = b >> 32;
  const uint64_t lo_lo = a_lo * b_lo, hi_lo = a_hi * b_lo, lo_hi = a_lo * b_hi, hi_hi = a_hi * b_hi;
  const uint64_t cross = (lo_lo >> 32) + (hi_lo & 0xffffffffULL) + lo_hi;  // At most 2^64 - 1: no wrap.
  return hi_hi + (hi_lo >> 32) + (cross >> 32);
}

/// High 64 bits of a * b: the compiler's 128-bit integer where it has one,
/// else mul_high_u64_portable (the same result).
constexpr uint64_t mul_high_u64(uint64_t a, uint64_t b) noexcept {
#if defined(__SIZEOF_INT128__)
  __extension__ using uint128 = unsigned __int128;
  return static_cast<uint64_t>((static_cast<uint128>(a) * b) >> 64);
#else
  return mul_high_u64_portable(a, b);
#endif
}

}  // namespace detail

/// Counter-based random stream of one sample. Every value is a pure function
/// of (seed, epoch, stream, draw number), so a sample gets the same random
/// choices whichever thread processes it and whenever it runs: output is
/// identical for 1 or 16 threads, and a resumed run matches an uninterrupted one.
///
/// Thread-safety: not thread-safe; each task owns its own SampleRng.
class SampleRng {
 public:
  /// `stream` is usually the sample's index in the dataset.
  SampleRng(uint64_t seed, uint64_t epoch, uint64_t stream) noexcept
      : key_(mix64(mix64(mix64(seed) ^ epoch) ^ stream)) {}

  /// Next 64 random bits.
  uint64_t next_u64() noexcept { return mix64(key_ ^ (0xd1b54a32d192ed03ULL * ++counter_)); }

  /// Uniform double in [0, 1), 53 bits of precision.
  double uniform() noexcept { return static_cast<double>(next_u64() >> 11) * 0x1.0p-53; }

  /// Uniform double in [lo, hi).
  double uniform(double lo, double hi) noexcept { return lo + (hi - lo) * uniform(); }

  /// Uniform integer in [0, n); n > 0. Lemire's multiply-shift (bias < 2^-64 * n).
  uint64_t below(uint64_t n) noexcept { return detail::mul_high_u64(next_u64(), n); }

 private:
  uint64_t key_;
  uint64_t counter_ = 0;
};

/// Returns a permutation of [0, n) that depends only on (seed, epoch)
/// (Fisher-Yates driven by a SampleRng on a stream reserved for shuffling).
std::vector<int64_t> random_permutation(int64_t n, uint64_t seed, uint64_t epoch);

/// The order a streaming shuffle gives (as webdataset's shards + shuffle(N)),
/// from (seed, epoch, streams) only: the shards [shard_starts[i], shard_starts[i+1])
/// of [0, n) are taken in a random order, and their samples pass through a
/// buffer of `buffer_size` slots from which a random one is emitted as each
/// new sample enters. Reads stay within a few shards at a time; the result is
/// a permutation of [0, n). Empty `shard_starts` means one shard.
///
/// With `streams` > 1 (as webdataset's shards split among ranks, each with
/// its own shuffle buffer), the shards, in the same random order, are dealt
/// one at a time to the stream with the fewest samples so far (the first
/// such on a tie); each stream passes its shards' samples through a buffer
/// of its own (`buffer_size` slots, a random stream of its own; stream 0's
/// is the single stream's), and the streams are interleaved: stream s gives
/// positions s, s + streams, ... while every stream has samples left, then
/// the streams still holding samples take turns. So every `streams`-th
/// position comes from one stream's shards, but for the longer streams' last
/// samples. There are at most as many streams as shards.
std::vector<int64_t> buffered_shuffle(int64_t n, const std::vector<int64_t>& shard_starts, int64_t buffer_size,
                                      uint64_t seed, uint64_t epoch, int64_t streams = 1);

}  // namespace conveyor
