#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "conveyor/io/source.h"

namespace conveyor {

/// When a mixture's epoch ends (MixSource).
enum class MixStop {
  kFirstExhausted,  ///< When the part that runs out first has given each sample once.
  kAllExhausted,    ///< When every part has given each sample at least once (smaller parts repeat).
  kNever,           ///< After a given number of positions (parts repeat as needed).
};

/// Several sources drawn from with fixed weights, as one source whose order
/// is random access (docs/design/decisions.md, decision 15): which part feeds a position is a
/// function of (seed, epoch, position) alone, so a mixture shuffles, shards
/// across ranks and resumes exactly (also at another world size) like a
/// single source, with the same output for any thread count.
///
/// Each epoch draws exactly draws()[k] samples from part k — its weight's
/// share of the epoch, rounded by largest remainder — in an interleaving that
/// is a random permutation of the epoch's positions. Within a part, draws go
/// through the part's own order (shuffled per epoch when the loader shuffles)
/// and wrap around when a part gives more draws than it has samples. So the
/// shares are exact in every epoch (stratified), not i.i.d. draws that match
/// the weights only on average.
///
/// Sample indices: part k's samples, once for each time the epoch goes
/// through them (its cycles: draws / size rounded up), concatenated over the
/// parts: index offset_k + c * size_k + i is part k's sample i in cycle c. A
/// repeated sample thus has its own index, so its own random augmentation.
/// read() and key() are the part's, with the part's label offset added to
/// labels >= 0. Labels never wrap: an offset that, added to a part's largest
/// label (Source::max_label), would pass INT64_MAX is refused at
/// construction; for a part whose labels are only known once read, a label
/// that would pass it is an Error{kRead} naming the sample.
///
/// Thread-safety: immutable after construction; read() is as thread-safe as
/// the parts' (Source's contract).
class MixSource final : public Source {
 public:
  /// `parts` (at least one, none empty) with `weights` (one per part,
  /// positive and finite; normalised); `epoch_size` must be > 0 for
  /// MixStop::kNever and 0 (derived) otherwise; `label_offsets` is empty or
  /// one per part, each >= 0 and not passing INT64_MAX when added to its
  /// part's largest label. Throws Error{kConfig} naming the bad argument.
  /// Shares ownership of the parts.
  MixSource(std::vector<std::shared_ptr<const Source>> parts, std::vector<double> weights, MixStop stop,
            int64_t epoch_size = 0, std::vector<int64_t> label_offsets = {});

  int64_t size() const override { return offsets_.back(); }
  Record read(int64_t index) const override;
  std::string key(int64_t index) const override;
  int64_t epoch_size() const override { return epoch_size_; }
  std::vector<int64_t> epoch_order(uint64_t seed, uint64_t epoch, bool shuffle) const override;
  int parts() const override { return static_cast<int>(parts_.size()); }
  bool local_reads() const override;    ///< Every part's reads are local.
  bool network_reads() const override;  ///< Some part's reads wait on a network.
  bool read_is_at_hand(int64_t index, ReadPlan* plan) const override;
  int part_of(int64_t index) const override;
  /// The largest of the parts' largest labels, offsets added; nullopt when a
  /// part's labels are only known once read.
  std::optional<int64_t> max_label() const override;

  /// Where sample `index` comes from: its part and its index in that part
  /// (the part's own read(i) gives its record, label offset aside).
  std::pair<int, int64_t> locate(int64_t index) const;

  /// Samples drawn from each part in every epoch (they sum to epoch_size()).
  const std::vector<int64_t>& draws() const noexcept { return draws_; }

 private:
  std::vector<std::shared_ptr<const Source>> parts_;
  std::vector<int64_t> offsets_;  // offsets_[k]: part k's first index; offsets_.back() == size().
  std::vector<int64_t> sizes_;    // Samples of each part.
  std::vector<int64_t> label_offsets_;
  std::vector<int64_t> draws_;
  int64_t epoch_size_ = 0;
};

}  // namespace conveyor
