#include "conveyor/pipeline/epoch_order.h"

#include <algorithm>
#include <limits>
#include <numeric>
#include <string>

#if __has_include(<unistd.h>)
#include <unistd.h>
#endif

#include "conveyor/core/number_format.h"
#include "conveyor/core/rng.h"

namespace conveyor {

namespace {

// The machine's memory in bytes (no limit where it cannot be asked).
double physical_memory_bytes() {
#if defined(_SC_PHYS_PAGES) && defined(_SC_PAGE_SIZE)
  const long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGE_SIZE);
  if (pages > 0 && page > 0) return static_cast<double>(pages) * static_cast<double>(page);
#endif
  return std::numeric_limits<double>::infinity();
}

// Entries of the vectors behind an epoch's order: the source's samples, or
// more with the padding for world_size (a double: the product may not fit).
double order_samples(const Source& source, const LoaderOptions& options) {
  const int64_t per_rank = samples_per_rank(source.epoch_size(), options);
  return std::max(static_cast<double>(per_rank) * static_cast<double>(options.world_size),
                  static_cast<double>(source.epoch_size()));
}

}  // namespace

int64_t samples_per_rank(int64_t n, const LoaderOptions& options) {
  if (options.world_size == 1) return n;
  if (options.drop_last) return n / options.world_size;
  return ceil_div(n, options.world_size);
}

Error order_too_large(const Source& source, const LoaderOptions& options) {
  const int64_t n = source.epoch_size();
  const double entries = order_samples(source, options);
  std::string samples = std::to_string(n) + " samples";
  if (entries > static_cast<double>(n))
    samples += " (padded for world_size " + std::to_string(options.world_size) + ")";
  return Error(ErrorKind::kConfig, "the source has " + samples + ": its epoch order (" +
                                       human_bytes(entries * sizeof(int64_t)) + ") cannot be allocated");
}

int64_t samples_per_rank_of_an_order_that_fits(const Source& source, const LoaderOptions& options) {
  if (order_samples(source, options) * sizeof(int64_t) > physical_memory_bytes()) {
    throw order_too_large(source, options);
  }
  return samples_per_rank(source.epoch_size(), options);
}

std::vector<int64_t> rank_order(const Source& source, const LoaderOptions& options, int64_t epoch,
                                int64_t segment_start, int64_t samples, int64_t order_world_size) {
  const int64_t n = source.epoch_size();
  std::vector<int64_t> base = source.epoch_order(options.seed, static_cast<uint64_t>(epoch), options.shuffle);
  if (!base.empty()) {
    // A source with its own order (a mixture).
  } else if (options.shuffle && options.shuffle_buffer > 0) {
    // Streaming shards, each rank its own (as webdataset's split by node):
    // a rank that read every W-th sample of each shard would fetch every
    // shard, or request each sample alone.
    base = buffered_shuffle(n, source.shard_starts(), options.shuffle_buffer, options.seed,
                            static_cast<uint64_t>(epoch), order_world_size);
  } else if (options.shuffle) {
    base = random_permutation(n, options.seed, static_cast<uint64_t>(epoch));
  } else {
    base.resize(static_cast<size_t>(n));
    std::iota(base.begin(), base.end(), int64_t{0});
  }
  // The part of the global order this world shares: all of it, or what an
  // earlier world (another world_size) left of it (elastic resume).
  if (segment_start > 0) base.erase(base.begin(), base.begin() + segment_start);
  const int64_t world = options.world_size;
  if (world == 1) return base;
  // As DistributedSampler: padded by repeating from the start (or truncated
  // with drop_last) to `samples` per rank, dealt round-robin.
  const int64_t left = n - segment_start;
  const int64_t total = samples * world;
  for (int64_t i = left; i < total; ++i) base.push_back(base[static_cast<size_t>((i - left) % left)]);
  std::vector<int64_t> order;
  order.reserve(static_cast<size_t>(samples));
  for (int64_t i = options.rank; i < total; i += world) order.push_back(base[static_cast<size_t>(i)]);
  return order;
}

bool order_deals_shards(const Source& source, const LoaderOptions& options) {
  // A mixture orders itself, and has no shuffle buffer (the loader refuses one).
  return options.shuffle && options.shuffle_buffer > 0 && source.parts() == 1 && source.shard_starts().size() >= 2;
}

}  // namespace conveyor
