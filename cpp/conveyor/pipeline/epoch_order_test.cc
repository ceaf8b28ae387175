#include "conveyor/pipeline/epoch_order.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <numeric>
#include <set>
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

// CountSource in shards of `shard` samples.
class ShardedCountSource final : public CountSource {
 public:
  ShardedCountSource(int64_t n, int64_t shard) : CountSource(n), shard_(shard) {}
  std::vector<int64_t> shard_starts() const override {
    std::vector<int64_t> starts;
    for (int64_t s = 0; s < size(); s += shard_) starts.push_back(s);
    return starts;
  }

 private:
  int64_t shard_;
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
  EXPECT_EQ(rank_order(source, ranks(3, 0, false), 0, 0, 4, 3), (std::vector<int64_t>{0, 3, 6, 9}));
  EXPECT_EQ(rank_order(source, ranks(3, 1, false), 0, 0, 4, 3), (std::vector<int64_t>{1, 4, 7, 0}));
  EXPECT_EQ(rank_order(source, ranks(3, 2, false), 0, 0, 4, 3), (std::vector<int64_t>{2, 5, 8, 1}));
  EXPECT_EQ(rank_order(source, ranks(3, 2, true), 0, 0, 3, 3), (std::vector<int64_t>{2, 5, 8}));
}

TEST(EpochOrderTest, TheRanksOfAShuffledEpochCoverItsPermutationOnce) {
  const CountSource source(11);
  const std::vector<int64_t> permutation = random_permutation(11, 7, 4);
  std::vector<int64_t> dealt(12);
  for (int64_t rank = 0; rank < 2; ++rank) {
    const std::vector<int64_t> order = rank_order(source, ranks(2, rank, false, true), 4, 0, 6, 2);
    for (size_t i = 0; i < order.size(); ++i) dealt[i * 2 + static_cast<size_t>(rank)] = order[i];
  }
  std::vector<int64_t> expected = permutation;
  expected.push_back(permutation[0]);  // The padding repeats the first sample.
  EXPECT_EQ(dealt, expected);
}

TEST(EpochOrderTest, AResumedSegmentDealsWhatTheEarlierWorldLeft) {
  const CountSource source(10);
  // An earlier world consumed 4 positions: 4..9 left, dealt to 4 ranks of 2 (padded with 4, 5).
  EXPECT_EQ(rank_order(source, ranks(4, 0, false), 0, 4, 2, 4), (std::vector<int64_t>{4, 8}));
  EXPECT_EQ(rank_order(source, ranks(4, 3, false), 0, 4, 2, 4), (std::vector<int64_t>{7, 5}));
}

TEST(EpochOrderTest, AShuffleBufferOverShardsGivesEachRankOfTheWorldItWasMadeForShardsOfItsOwn) {
  const ShardedCountSource source(100, 10);  // 10 shards of 10.
  LoaderOptions o = ranks(5, 0, false, true);
  o.shuffle_buffer = 4;
  EXPECT_TRUE(order_deals_shards(source, o));
  std::vector<std::vector<int64_t>> orders;
  std::set<int64_t> all;
  for (int64_t rank = 0; rank < 5; ++rank) {
    o.rank = rank;
    orders.push_back(rank_order(source, o, 3, 0, 20, 5));
    std::set<int64_t> shards;
    for (int64_t sample : orders.back()) shards.insert(sample / 10);
    // Two whole shards, read by no other rank.
    EXPECT_EQ(shards.size(), 2u) << "rank " << rank;
    all.insert(orders.back().begin(), orders.back().end());
  }
  EXPECT_EQ(all.size(), 100u);
  // Made for one rank (a state saved before), the same world reads every
  // 5th sample of the single buffered shuffle.
  o.rank = 0;
  const std::vector<int64_t> single = buffered_shuffle(100, source.shard_starts(), 4, 7, 3);
  std::vector<int64_t> every_fifth;
  for (size_t i = 0; i < single.size(); i += 5) every_fifth.push_back(single[i]);
  EXPECT_EQ(rank_order(source, o, 3, 0, 20, 1), every_fifth);
  // Resumed by 2 ranks after 10 positions, the rest of that same order.
  std::vector<int64_t> global;
  for (size_t i = 0; i < 20; ++i) {
    for (const auto& order : orders) global.push_back(order[i]);
  }
  LoaderOptions two = ranks(2, 1, false, true);
  two.shuffle_buffer = 4;
  std::vector<int64_t> rest;
  for (size_t i = 11; i < global.size(); i += 2) rest.push_back(global[i]);
  EXPECT_EQ(rank_order(source, two, 3, 10, 45, 5), rest);
  // Without a shuffle buffer, or with one shard, the world does not matter.
  o.shuffle_buffer = 0;
  EXPECT_FALSE(order_deals_shards(source, o));
  o.shuffle_buffer = 4;
  EXPECT_FALSE(order_deals_shards(CountSource(100), o));
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
