#include "conveyor/pipeline/epoch_order.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <numeric>
#include <string>
#include <vector>

#include "conveyor/core/rng.h"

namespace conveyor {
namespace {

// `n` samples that are never read: only the order is asked for.
class CountSource : public Source {
 public:
  explicit CountSource(int64_t n) : n_(n) {}
  int64_t size() const override { return n_; }
  Record read(int64_t /*index*/) const override { throw Error(ErrorKind::kInternal, "not read here"); }
  std::string key(int64_t index) const override { return std::to_string(index); }

 private:
  int64_t n_;
};

LoaderOptions ranks(int64_t world_size, int64_t rank, bool drop_last, bool shuffle = false) {
  LoaderOptions o;
  o.world_size = world_size;
  o.rank = rank;
  o.drop_last = drop_last;
  o.shuffle = shuffle;
  o.seed = 7;
  return o;
}

TEST(EpochOrderTest, SamplesPerRankAreDistributedSamplersSplit) {
  EXPECT_EQ(samples_per_rank(10, ranks(1, 0, false)), 10);
  EXPECT_EQ(samples_per_rank(10, ranks(3, 0, false)), 4);  // Padded to 12.
  EXPECT_EQ(samples_per_rank(10, ranks(3, 0, true)), 3);   // Truncated to 9.
  EXPECT_EQ(ceil_div(0, 4), 0);
  EXPECT_EQ(ceil_div(INT64_MAX, 2), INT64_MAX / 2 + 1);
}

TEST(EpochOrderTest, RanksTakeEveryWorldSizethPositionOfThePaddedOrder) {
  const CountSource source(10);
  // Index order 0..9 padded from its start to 12: 0..9, 0, 1.
  EXPECT_EQ(rank_order(source, ranks(3, 0, false), 0, 0, 4), (std::vector<int64_t>{0, 3, 6, 9}));
  EXPECT_EQ(rank_order(source, ranks(3, 1, false), 0, 0, 4), (std::vector<int64_t>{1, 4, 7, 0}));
  EXPECT_EQ(rank_order(source, ranks(3, 2, false), 0, 0, 4), (std::vector<int64_t>{2, 5, 8, 1}));
  EXPECT_EQ(rank_order(source, ranks(3, 2, true), 0, 0, 3), (std::vector<int64_t>{2, 5, 8}));
}

TEST(EpochOrderTest, TheRanksOfAShuffledEpochCoverItsPermutationOnce) {
  const CountSource source(11);
  const std::vector<int64_t> permutation = random_permutation(11, 7, 4);
  std::vector<int64_t> dealt(12);
  for (int64_t rank = 0; rank < 2; ++rank) {
    const std::vector<int64_t> order = rank_order(source, ranks(2, rank, false, true), 4, 0, 6);
    for (size_t i = 0; i < order.size(); ++i) dealt[i * 2 + static_cast<size_t>(rank)] = order[i];
  }
  std::vector<int64_t> expected = permutation;
  expected.push_back(permutation[0]);  // The padding repeats the first sample.
  EXPECT_EQ(dealt, expected);
}

TEST(EpochOrderTest, AResumedSegmentDealsWhatTheEarlierWorldLeft) {
  const CountSource source(10);
  // An earlier world consumed 4 positions: 4..9 left, dealt to 4 ranks of 2 (padded with 4, 5).
  EXPECT_EQ(rank_order(source, ranks(4, 0, false), 0, 4, 2), (std::vector<int64_t>{4, 8}));
  EXPECT_EQ(rank_order(source, ranks(4, 3, false), 0, 4, 2), (std::vector<int64_t>{7, 5}));
}

TEST(EpochOrderTest, AnOrderThatCannotFitInMemoryIsRefusedNamingItsSize) {
  const CountSource source(int64_t{1} << 60);
  try {
    samples_per_rank_of_an_order_that_fits(source, ranks(1, 0, false));
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kConfig);
    EXPECT_EQ(e.cause(), "the source has 1152921504606846976 samples: its epoch order (8 EiB) cannot be allocated");
  }
}

}  // namespace
}  // namespace conveyor
