#pragma once

#include <cstdint>
#include <vector>

#include "conveyor/io/source.h"
#include "conveyor/pipeline/loader.h"

namespace conveyor {

/// Which samples an epoch gives each rank, and in what order: the source's
/// own order (a mixture), a buffered shuffle, a permutation or the index
/// order, then DistributedSampler's deal among world_size ranks. Pure
/// functions of the options, the source, (seed, epoch) and, for a buffered
/// shuffle of shards, the world size its shards are dealt to.

/// a / b rounded up, for a >= 0, b >= 1 (a + b - 1 could overflow).
constexpr int64_t ceil_div(int64_t a, int64_t b) { return a / b + (a % b != 0 ? 1 : 0); }

/// Samples per rank of an epoch of `n` samples, as DistributedSampler splits
/// it: padded by wrapping around (or truncated with drop_last) to a multiple
/// of world_size.
int64_t samples_per_rank(int64_t n, const LoaderOptions& options);

/// samples_per_rank() of the source's epoch, once its order is known to fit
/// in memory: every epoch's order is a vector of int64_t (the base order
/// padded to samples per rank x world_size), so a source whose order cannot
/// fit is refused at construction (Error{kConfig} "the source has N samples:
/// its epoch order (8 TiB) cannot be allocated") rather than at each epoch.
int64_t samples_per_rank_of_an_order_that_fits(const Source& source, const LoaderOptions& options);

/// The Error{kConfig} of an epoch order that cannot be allocated (also
/// thrown by rank_order's caller when the allocation fails).
Error order_too_large(const Source& source, const LoaderOptions& options);

/// This rank's `samples` positions of the epoch's global order from
/// `segment_start` on (the part an earlier world size left, elastic resume:
/// 0 for a whole epoch), for options.seed and `epoch`: the base order, cut
/// at segment_start, padded by repeating from its start (or truncated with
/// drop_last) to `samples` x world_size, dealt round-robin (rank r takes
/// positions r, r + W, ...). A buffered shuffle of a source in shards deals
/// the shards among `order_world_size` streams (buffered_shuffle), the world
/// size the epoch's order was made for (this world's unless the epoch was
/// begun by another): each rank of that world then reads its own shards.
/// Throws std::bad_alloc when the order does not fit.
std::vector<int64_t> rank_order(const Source& source, const LoaderOptions& options, int64_t epoch,
                                int64_t segment_start, int64_t samples, int64_t order_world_size);

/// Whether rank_order depends on `order_world_size`: a buffered shuffle of
/// a source in two shards or more.
bool order_deals_shards(const Source& source, const LoaderOptions& options);

}  // namespace conveyor
