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
