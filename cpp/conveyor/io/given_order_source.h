#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "conveyor/io/source.h"

namespace conveyor {

/// A view of `inner` whose epochs follow orders given from outside: a
/// DataLoader sampler's indices, drawn once per epoch by the caller (the
/// Python layer) and set before the epoch starts. Each epoch has
/// epoch_size() positions; any index may repeat (a sampler with
/// replacement). Reads, keys, parts and labels are `inner`'s. An inner
/// source's own epoch order (a mixture's) is not used: the indices are
/// indices of `inner`.
///
/// Thread-safety: read() and key() as `inner`'s; set_order() and
/// epoch_order() are serialised by a mutex.
class GivenOrderSource final : public Source {
 public:
  /// `epoch_size` (the sampler's length) must be >= 1: Error{kConfig}
  /// otherwise. Shares ownership of `inner` (not null).
  GivenOrderSource(std::shared_ptr<const Source> inner, int64_t epoch_size);

  /// Sets the order of `epoch`, replacing any earlier epoch's (one is kept).
  /// Throws Error{kConfig} when `order` has another length than epoch_size()
  /// ("the sampler gave 9 indices for epoch 2, its length is 10") or an index
  /// outside [0, size()) ("the sampler gave index 12 at position 3 of epoch
  /// 2; the source has 10 samples").
  void set_order(int64_t epoch, std::vector<int64_t> order);

  int64_t size() const override { return inner_->size(); }
  Record read(int64_t index) const override { return inner_->read(index); }
  std::shared_ptr<ReadPlan> plan_reads(std::span<const int64_t> order) const override {
    return inner_->plan_reads(order);
  }
  Record read_planned(int64_t index, ReadPlan& plan) const override { return inner_->read_planned(index, plan); }
  std::string key(int64_t index) const override { return inner_->key(index); }
  int64_t epoch_size() const override { return epoch_size_; }
  /// The order set for `epoch`. Throws Error{kConfig} when none was set for it.
  std::vector<int64_t> epoch_order(uint64_t seed, uint64_t epoch, bool shuffle) const override;
  int parts() const override { return inner_->parts(); }
  bool local_reads() const override { return inner_->local_reads(); }
  bool network_reads() const override { return inner_->network_reads(); }
  bool read_is_at_hand(int64_t index, ReadPlan* plan) const override { return inner_->read_is_at_hand(index, plan); }
  int part_of(int64_t index) const override { return inner_->part_of(index); }
  std::optional<int64_t> max_label() const override { return inner_->max_label(); }

 private:
  std::shared_ptr<const Source> inner_;
  int64_t epoch_size_;
  mutable std::mutex mutex_;
  int64_t epoch_ = -1;  // The epoch `order_` belongs to; -1: none set.
  std::vector<int64_t> order_;
};

}  // namespace conveyor
