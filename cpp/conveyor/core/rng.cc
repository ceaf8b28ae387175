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

namespace {

// Appends to `order` the samples of `shards` (in that order; shard i is
// [starts[i], starts[i + 1])) as they leave a buffer of `buffer_size` slots
// drawn from by `rng`.
void stream_through_buffer(const std::vector<int64_t>& shards, const std::vector<int64_t>& starts, int64_t buffer_size,
                           SampleRng& rng, std::vector<int64_t>& order) {
  int64_t samples = 0;
  for (int64_t shard : shards) samples += starts[static_cast<size_t>(shard) + 1] - starts[static_cast<size_t>(shard)];
  // Never more slots than samples: a buffer past the data set's size holds it all.
  std::vector<int64_t> buffer;
  buffer.reserve(static_cast<size_t>(std::max<int64_t>(0, std::min(buffer_size, samples))));
  for (int64_t shard : shards) {
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
}

}  // namespace

std::vector<int64_t> buffered_shuffle(int64_t n, const std::vector<int64_t>& shard_starts, int64_t buffer_size,
                                      uint64_t seed, uint64_t epoch, int64_t streams) {
  std::vector<int64_t> starts = shard_starts.empty() ? std::vector<int64_t>{0} : shard_starts;
  const auto shards = static_cast<int64_t>(starts.size());
  starts.push_back(n);
  const std::vector<int64_t> shard_order = random_permutation(shards, seed, epoch);
  std::vector<int64_t> order;
  order.reserve(static_cast<size_t>(n));
  if (streams <= 1) {
    SampleRng rng(seed, epoch, kShuffleStream);
    stream_through_buffer(shard_order, starts, buffer_size, rng, order);
    return order;
  }
  // Streams past the shards' number would stay empty.
  streams = std::min(streams, shards);
  // Each shard to the stream with the fewest samples so far.
  std::vector<std::vector<int64_t>> dealt(static_cast<size_t>(streams));
  std::vector<int64_t> dealt_samples(static_cast<size_t>(streams));
  for (int64_t shard : shard_order) {
    const auto s =
        static_cast<size_t>(std::min_element(dealt_samples.begin(), dealt_samples.end()) - dealt_samples.begin());
    dealt[s].push_back(shard);
    dealt_samples[s] += starts[static_cast<size_t>(shard) + 1] - starts[static_cast<size_t>(shard)];
  }
  std::vector<std::vector<int64_t>> stream_orders(static_cast<size_t>(streams));
  size_t longest = 0;
  for (size_t s = 0; s < dealt.size(); ++s) {
    stream_orders[s].reserve(static_cast<size_t>(dealt_samples[s]));
    // Streams past the shuffling one, counting down: no sample index reaches them.
    SampleRng rng(seed, epoch, kShuffleStream - s);
    stream_through_buffer(dealt[s], starts, buffer_size, rng, stream_orders[s]);
    longest = std::max(longest, stream_orders[s].size());
  }
  for (size_t i = 0; i < longest; ++i) {
    for (const std::vector<int64_t>& stream : stream_orders) {
      if (i < stream.size()) order.push_back(stream[i]);
    }
  }
  return order;
}

}  // namespace conveyor
