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
    cancelled_.store(true, std::memory_order_release);
  }
  cv_.notify_all();
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
