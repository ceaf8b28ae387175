#pragma once

#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>

namespace conveyor {

/// Counts durations (nanoseconds) in logarithmic buckets, four per power of
/// two, so that a percentile read back is within 12.5 % of the true one,
/// whatever the scale (microsecond decodes, second-long remote reads).
/// Cumulative: a window's percentile is read from the difference of two
/// snapshots (percentile_between), so recording never resets anything.
///
/// Thread-safety: record() may be called from any number of threads at once
/// (one relaxed atomic increment); snapshot() from any thread, seeing each
/// bucket's count at some moment of the call.
class LatencyHistogram {
 public:
  static constexpr int kSubBuckets = 4;  ///< Buckets per power of two.
  static constexpr size_t kBuckets = 64 * kSubBuckets;
  using Counts = std::array<uint64_t, kBuckets>;

  /// Counts one duration (negative ones as 0).
  void record(int64_t ns) noexcept { counts_[bucket_of(ns)].fetch_add(1, std::memory_order_relaxed); }

  /// The counts so far.
  Counts snapshot() const noexcept;

  /// The bucket `ns` falls in: values below 4 have their own, then four per
  /// power of two (by the two bits after the leading one).
  static size_t bucket_of(int64_t ns) noexcept;
  /// The middle of bucket `b`'s range of values (its representative).
  static double middle_of(size_t b) noexcept;

 private:
  std::array<std::atomic<uint64_t>, kBuckets> counts_{};
};

/// The `q`-quantile (0 < q <= 1, e.g. 0.9) of the durations recorded between
/// two snapshots of one histogram (`before` taken first), in nanoseconds:
/// the middle of the bucket where the cumulative count reaches q of the
/// total; 0 when nothing was recorded between them.
double percentile_between(const LatencyHistogram::Counts& now, const LatencyHistogram::Counts& before,
                          double q) noexcept;

}  // namespace conveyor
