#include "conveyor/core/latency_histogram.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <thread>
#include <vector>

namespace conveyor {
namespace {

TEST(LatencyHistogramTest, BucketsAreFourPerPowerOfTwoAndHoldTheirValues) {
  for (int64_t v = 0; v < 8; ++v) EXPECT_EQ(LatencyHistogram::bucket_of(v), static_cast<size_t>(v));
  EXPECT_EQ(LatencyHistogram::bucket_of(-5), 0u);
  // Every value lies within its bucket's width of the bucket's middle: at most
  // 12.5 % of the value away.
  for (int64_t v :
       {int64_t{9}, int64_t{1000}, int64_t{123456789}, int64_t{1} << 40, std::numeric_limits<int64_t>::max()}) {
    const size_t b = LatencyHistogram::bucket_of(v);
    ASSERT_LT(b, LatencyHistogram::kBuckets);
    EXPECT_LE(std::abs(LatencyHistogram::middle_of(b) - static_cast<double>(v)), 0.125 * static_cast<double>(v)) << v;
  }
  // Buckets are ordered: a larger value never falls in an earlier bucket.
  size_t last = 0;
  for (int64_t v = 1; v < 100000; v += 7) {
    const size_t b = LatencyHistogram::bucket_of(v);
    EXPECT_GE(b, last);
    last = b;
  }
}

TEST(LatencyHistogramTest, APercentileIsReadFromTheWindowBetweenTwoSnapshots) {
  LatencyHistogram h;
  for (int i = 0; i < 1000; ++i) h.record(5'000'000);  // An earlier window: 5 ms.
  const LatencyHistogram::Counts before = h.snapshot();
  // This window: 1 ms to 100 ms, uniformly.
  for (int i = 1; i <= 100; ++i) h.record(int64_t{i} * 1'000'000);
  const LatencyHistogram::Counts now = h.snapshot();
  EXPECT_NEAR(percentile_between(now, before, 0.9), 90e6, 0.125 * 90e6);
  EXPECT_NEAR(percentile_between(now, before, 0.5), 50e6, 0.125 * 50e6);
  EXPECT_NEAR(percentile_between(now, before, 1.0), 100e6, 0.125 * 100e6);
  EXPECT_EQ(percentile_between(now, now, 0.9), 0);  // Nothing recorded between them.
  // The whole history, from an empty snapshot: 1 000 of 1 100 are 5 ms.
  EXPECT_NEAR(percentile_between(now, LatencyHistogram::Counts{}, 0.9), 5e6, 0.125 * 5e6);
}

TEST(LatencyHistogramTest, ConcurrentRecordsAreAllCounted) {
  LatencyHistogram h;
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&h, t] {
      for (int i = 0; i < 10000; ++i) h.record(1000 * (t + 1));
    });
  }
  for (auto& thread : threads) thread.join();
  uint64_t total = 0;
  for (uint64_t c : h.snapshot()) total += c;
  EXPECT_EQ(total, 40000u);
}

}  // namespace
}  // namespace conveyor
