#include "conveyor/core/rng.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <set>

namespace conveyor {
namespace {

TEST(SampleRngTest, SameKeySameStream) {
  SampleRng a(7, 3, 42), b(7, 3, 42);
  for (int i = 0; i < 100; ++i) EXPECT_EQ(a.next_u64(), b.next_u64());
}

TEST(SampleRngTest, AnyKeyPartChangesTheStream) {
  const uint64_t first = SampleRng(7, 3, 42).next_u64();
  EXPECT_NE(first, SampleRng(8, 3, 42).next_u64());
  EXPECT_NE(first, SampleRng(7, 4, 42).next_u64());
  EXPECT_NE(first, SampleRng(7, 3, 43).next_u64());
}

TEST(SampleRngTest, UniformIsInRangeAndRoughlyUniform) {
  SampleRng rng(1, 0, 0);
  double sum = 0;
  constexpr int kDraws = 100000;
  for (int i = 0; i < kDraws; ++i) {
    double u = rng.uniform();
    ASSERT_GE(u, 0.0);
    ASSERT_LT(u, 1.0);
    sum += u;
  }
  EXPECT_NEAR(sum / kDraws, 0.5, 0.01);
}

TEST(SampleRngTest, BelowCoversEveryValue) {
  SampleRng rng(1, 0, 0);
  std::set<uint64_t> seen;
  for (int i = 0; i < 1000; ++i) {
    uint64_t v = rng.below(7);
    ASSERT_LT(v, 7u);
    seen.insert(v);
  }
  EXPECT_EQ(seen.size(), 7u);
}

TEST(RandomPermutationTest, IsAPermutationDeterminedBySeedAndEpoch) {
  auto p = random_permutation(1000, 5, 2);
  auto sorted = p;
  std::sort(sorted.begin(), sorted.end());
  for (int64_t i = 0; i < 1000; ++i) ASSERT_EQ(sorted[static_cast<size_t>(i)], i);
  EXPECT_EQ(p, random_permutation(1000, 5, 2));
  EXPECT_NE(p, random_permutation(1000, 5, 3));
  EXPECT_NE(p, random_permutation(1000, 6, 2));
}

}  // namespace
}  // namespace conveyor

namespace conveyor {
namespace {

TEST(BufferedShuffleTest, IsAPermutationThatStaysNearItsShards) {
  // 10 shards of 100 samples, a buffer of 20.
  std::vector<int64_t> starts;
  for (int64_t s = 0; s < 1000; s += 100) starts.push_back(s);
  auto order = buffered_shuffle(1000, starts, 20, 3, 1);
  auto sorted = order;
  std::sort(sorted.begin(), sorted.end());
  for (int64_t i = 0; i < 1000; ++i) ASSERT_EQ(sorted[static_cast<size_t>(i)], i);
  EXPECT_EQ(order, buffered_shuffle(1000, starts, 20, 3, 1));
  EXPECT_NE(order, buffered_shuffle(1000, starts, 20, 3, 2));
  // Any window of 100 emitted samples comes from at most 3 shards (a shard
  // plus what the 20-sample buffer still holds from earlier ones).
  for (size_t begin = 0; begin + 100 <= order.size(); begin += 100) {
    std::set<int64_t> shards;
    for (size_t i = begin; i < begin + 100; ++i) shards.insert(order[i] / 100);
    EXPECT_LE(shards.size(), 3u) << "window at " << begin;
  }
  // Not the identity within shards either.
  EXPECT_NE(std::vector<int64_t>(order.begin(), order.begin() + 50),
            std::vector<int64_t>(sorted.begin(), sorted.begin() + 50));
}

TEST(BufferedShuffleTest, StreamsTakeTheShardsInTurnByFewestSamplesAndInterleave) {
  // 7 shards of unequal sizes (120 samples), dealt to 3 streams.
  const std::vector<int64_t> sizes{30, 10, 20, 10, 25, 15, 10};
  std::vector<int64_t> starts{0};
  for (size_t i = 0; i + 1 < sizes.size(); ++i) starts.push_back(starts.back() + sizes[i]);
  const auto shard_of = [&](int64_t sample) {
    return static_cast<int64_t>(std::upper_bound(starts.begin(), starts.end(), sample) - starts.begin()) - 1;
  };
  // The deal the rule gives: the shards in random_permutation's order, each
  // to the stream with the fewest samples so far.
  std::vector<std::set<int64_t>> dealt(3);
  std::vector<int64_t> dealt_samples(3);
  for (int64_t shard : random_permutation(7, 5, 2)) {
    const auto s =
        static_cast<size_t>(std::min_element(dealt_samples.begin(), dealt_samples.end()) - dealt_samples.begin());
    dealt[s].insert(shard);
    dealt_samples[s] += sizes[static_cast<size_t>(shard)];
  }
  const std::vector<int64_t> order = buffered_shuffle(120, starts, 8, 5, 2, 3);
  auto sorted = order;
  std::sort(sorted.begin(), sorted.end());
  for (int64_t i = 0; i < 120; ++i) ASSERT_EQ(sorted[static_cast<size_t>(i)], i);
  EXPECT_EQ(order, buffered_shuffle(120, starts, 8, 5, 2, 3));
  // Position p is stream p % 3's while every stream has samples left ...
  const int64_t aligned = 3 * *std::min_element(dealt_samples.begin(), dealt_samples.end());
  for (int64_t p = 0; p < aligned; ++p) {
    ASSERT_TRUE(dealt[static_cast<size_t>(p % 3)].count(shard_of(order[static_cast<size_t>(p)]))) << "position " << p;
  }
  // ... then the streams still holding samples take turns.
  std::vector<int64_t> left = dealt_samples;
  for (auto& l : left) l -= aligned / 3;
  size_t p = static_cast<size_t>(aligned);
  while (p < order.size()) {
    for (size_t s = 0; s < 3; ++s) {
      if (left[s] == 0) continue;
      --left[s];
      ASSERT_TRUE(dealt[s].count(shard_of(order[p]))) << "position " << p;
      ++p;
    }
  }
  // One stream is the plain buffered shuffle; more streams than shards are as many as shards.
  EXPECT_EQ(buffered_shuffle(120, starts, 8, 5, 2, 1), buffered_shuffle(120, starts, 8, 5, 2));
  EXPECT_EQ(buffered_shuffle(120, starts, 8, 5, 2, 1000), buffered_shuffle(120, starts, 8, 5, 2, 7));
}

TEST(BufferedShuffleTest, BufferAsLargeAsTheDataIsAFullShuffle) {
  auto order = buffered_shuffle(50, {}, 1000, 1, 0);
  auto sorted = order;
  std::sort(sorted.begin(), sorted.end());
  for (int64_t i = 0; i < 50; ++i) ASSERT_EQ(sorted[static_cast<size_t>(i)], i);
  EXPECT_NE(order, sorted);
  // Any larger buffer is the same shuffle, and takes no room of its size
  // (10^17 slots of 8 bytes would throw std::length_error or bad_alloc).
  EXPECT_EQ(buffered_shuffle(50, {}, int64_t{1} << 60, 1, 0), order);
  EXPECT_EQ(buffered_shuffle(50, {0, 20, 30}, int64_t{1} << 60, 1, 0, 2),
            buffered_shuffle(50, {0, 20, 30}, 50, 1, 0, 2));
}

}  // namespace
}  // namespace conveyor

namespace conveyor {
namespace {

TEST(MulHighTest, PortableFormMatchesThe128BitProduct) {
  constexpr uint64_t kMax = ~uint64_t{0};
  static_assert(detail::mul_high_u64_portable(kMax, kMax) == kMax - 1);
  static_assert(detail::mul_high_u64_portable(uint64_t{1} << 32, uint64_t{1} << 32) == 1);
  static_assert(detail::mul_high_u64_portable(kMax, 1) == 0);
  static_assert(detail::mul_high_u64_portable(0, kMax) == 0);
  const uint64_t edges[] = {0, 1, 2, 0xffffffffULL, 0x100000000ULL, 0x8000000000000000ULL, kMax - 1, kMax};
  for (uint64_t a : edges) {
    for (uint64_t b : edges)
      EXPECT_EQ(detail::mul_high_u64_portable(a, b), detail::mul_high_u64(a, b)) << a << " " << b;
  }
  uint64_t x = 1;
  for (int i = 0; i < 1000000; ++i) {
    const uint64_t a = mix64(x++), b = mix64(x++) >> (i % 64);  // Small and large factors alike.
    ASSERT_EQ(detail::mul_high_u64_portable(a, b), detail::mul_high_u64(a, b)) << a << " " << b;
  }
}

}  // namespace
}  // namespace conveyor
