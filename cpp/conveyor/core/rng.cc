#include "conveyor/core/rng.h"

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

}  // namespace conveyor
