#include "conveyor/core/latency_histogram.h"

#include <bit>
#include <cmath>

namespace conveyor {

LatencyHistogram::Counts LatencyHistogram::snapshot() const noexcept {
  Counts counts;
  for (size_t b = 0; b < kBuckets; ++b) counts[b] = counts_[b].load(std::memory_order_relaxed);
  return counts;
}

size_t LatencyHistogram::bucket_of(int64_t ns) noexcept {
  if (ns < kSubBuckets) return ns < 0 ? 0 : static_cast<size_t>(ns);
  const auto v = static_cast<uint64_t>(ns);
  const int top = std::bit_width(v) - 1;  // >= 2: the leading one's position.
  const auto sub = static_cast<size_t>((v >> (top - 2)) & (kSubBuckets - 1));
  return static_cast<size_t>(top - 1) * kSubBuckets + sub;
}

double LatencyHistogram::middle_of(size_t b) noexcept {
  if (b < kSubBuckets) return static_cast<double>(b);
  const int top = static_cast<int>(b / kSubBuckets) + 1;
  const double low = std::ldexp(static_cast<double>(kSubBuckets + b % kSubBuckets), top - 2);
  return low + std::ldexp(0.5, top - 2);  // Each bucket spans 2**(top - 2) values.
}

double percentile_between(const LatencyHistogram::Counts& now, const LatencyHistogram::Counts& before,
                          double q) noexcept {
  uint64_t total = 0;
  for (size_t b = 0; b < now.size(); ++b) total += now[b] - before[b];
  if (total == 0) return 0;
  const double wanted = q * static_cast<double>(total);
  uint64_t seen = 0;
  for (size_t b = 0; b < now.size(); ++b) {
    seen += now[b] - before[b];
    if (static_cast<double>(seen) >= wanted && now[b] != before[b]) return LatencyHistogram::middle_of(b);
  }
  return LatencyHistogram::middle_of(now.size() - 1);
}

}  // namespace conveyor
