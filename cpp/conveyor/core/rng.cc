#include "conveyor/core/rng.h"

#include <algorithm>
#include <cstddef>
#include <numeric>
#include <utility>

namespace conveyor {

namespace {
// Sample streams use the sample index; shuffling uses a stream no index reaches.
constexpr uint64_t kShuffleStream = ~uint64_t{0};
}  // namespace

std::vector<int64_t> random_permutation(int64_t n, uint64_t seed, uint64_t epoch) {
  std::vector<int64_t> order(static_cast<size_t>(n));
  std::iota(order.begin(), order.end(), int64_t{0});
  SampleRng rng(seed, epoch, kShuffleStream);
  for (int64_t i = n - 1; i > 0; --i) {
    auto j = static_cast<int64_t>(rng.below(static_cast<uint64_t>(i) + 1));
    std::swap(order[static_cast<size_t>(i)], order[static_cast<size_t>(j)]);
  }
  return order;
}

std::vector<int64_t> buffered_shuffle(int64_t n, const std::vector<int64_t>& shard_starts, int64_t buffer_size,
                                      uint64_t seed, uint64_t epoch) {
  std::vector<int64_t> starts = shard_starts.empty() ? std::vector<int64_t>{0} : shard_starts;
  const auto shards = static_cast<int64_t>(starts.size());
  starts.push_back(n);
  SampleRng rng(seed, epoch, kShuffleStream);
  std::vector<int64_t> shard_order = random_permutation(shards, seed, epoch);
  std::vector<int64_t> order, buffer;
  order.reserve(static_cast<size_t>(n));
  buffer.reserve(static_cast<size_t>(std::max<int64_t>(buffer_size, 1)));
  for (int64_t shard : shard_order) {
    for (int64_t i = starts[static_cast<size_t>(shard)]; i < starts[static_cast<size_t>(shard) + 1]; ++i) {
      if (static_cast<int64_t>(buffer.size()) < buffer_size) {
        buffer.push_back(i);
        continue;
      }
      if (buffer.empty()) {
        order.push_back(i);
        continue;
      }
      auto j = static_cast<size_t>(rng.below(buffer.size()));
      order.push_back(buffer[j]);
      buffer[j] = i;
    }
  }
  for (int64_t i = static_cast<int64_t>(buffer.size()) - 1; i > 0; --i) {
    auto j = static_cast<size_t>(rng.below(static_cast<uint64_t>(i) + 1));
    std::swap(buffer[static_cast<size_t>(i)], buffer[j]);
  }
  order.insert(order.end(), buffer.begin(), buffer.end());
  return order;
}

}  // namespace conveyor
