#include "conveyor/core/cancellation.h"

#include <thread>

namespace conveyor {

namespace {
thread_local const Cancellation* current = nullptr;
}  // namespace

void Cancellation::cancel() {
  {
    // Under the lock: a waiter between its check and its wait cannot miss it.
    std::lock_guard lock(mu_);
    if (!cancelled_.exchange(true, std::memory_order_acq_rel)) {
      for (auto& [id, callback] : callbacks_) callback();
    }
  }
  cv_.notify_all();
}

Cancellation::Subscription::Subscription(const Cancellation& cancellation, std::function<void()> callback)
    : cancellation_(cancellation) {
  std::lock_guard lock(cancellation_.mu_);
  id_ = cancellation_.next_id_++;
  if (cancellation_.cancelled()) {
    callback();
  } else {
    cancellation_.callbacks_.emplace(id_, std::move(callback));
  }
}

Cancellation::Subscription::~Subscription() {
  std::lock_guard lock(cancellation_.mu_);
  cancellation_.callbacks_.erase(id_);
}

bool Cancellation::wait_for(std::chrono::nanoseconds duration) const {
  std::unique_lock lock(mu_);
  return cv_.wait_for(lock, duration, [this] { return cancelled(); });
}

ScopedCancellation::ScopedCancellation(const Cancellation& cancellation) noexcept : previous_(current) {
  current = &cancellation;
}

ScopedCancellation::~ScopedCancellation() { current = previous_; }

const Cancellation* current_cancellation() noexcept { return current; }

bool cancellation_requested() noexcept { return current != nullptr && current->cancelled(); }

bool sleep_unless_cancelled(std::chrono::nanoseconds duration) {
  if (current == nullptr) {
    std::this_thread::sleep_for(duration);
    return false;
  }
  return current->wait_for(duration);
}

}  // namespace conveyor
