#include "conveyor/io/given_order_source.h"

#include <utility>

#include "conveyor/core/error.h"

namespace conveyor {

GivenOrderSource::GivenOrderSource(std::shared_ptr<const Source> inner, int64_t epoch_size)
    : inner_((check_config(inner != nullptr, "GivenOrderSource: no source"), std::move(inner))),
      epoch_size_(epoch_size) {
  check_config(epoch_size_ >= 1, "the sampler is empty (its length is " + std::to_string(epoch_size_) + ")");
}

void GivenOrderSource::set_order(int64_t epoch, std::vector<int64_t> order) {
  const std::string where = " of epoch " + std::to_string(epoch);
  check_config(static_cast<int64_t>(order.size()) == epoch_size_, "the sampler gave " + std::to_string(order.size()) +
                                                                      " indices for epoch " + std::to_string(epoch) +
                                                                      ", its length is " + std::to_string(epoch_size_));
  const int64_t n = inner_->size();
  for (size_t i = 0; i < order.size(); ++i) {
    check_config(order[i] >= 0 && order[i] < n, "the sampler gave index " + std::to_string(order[i]) + " at position " +
                                                    std::to_string(i) + where + "; the source has " +
                                                    std::to_string(n) + " samples");
  }
  std::lock_guard lock(mutex_);
  epoch_ = epoch;
  order_ = std::move(order);
}

std::vector<int64_t> GivenOrderSource::epoch_order(uint64_t /*seed*/, uint64_t epoch, bool /*shuffle*/) const {
  std::lock_guard lock(mutex_);
  check_config(epoch_ >= 0 && static_cast<uint64_t>(epoch_) == epoch,
               "no sampler order was set for epoch " + std::to_string(epoch));
  return order_;
}

}  // namespace conveyor
