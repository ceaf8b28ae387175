#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <mutex>

namespace conveyor {

/// A one-way flag that ends waits early: once cancel() is called, every
/// wait_for() on it returns at once, including those already waiting. The
/// loader gives each epoch one and cancels it in stop(), so that work that
/// would otherwise sleep (a remote read backing off before its next attempt)
/// ends within microseconds instead of delaying stop()/close().
///
/// Thread-safety: every member may be called from any thread at once.
class Cancellation {
 public:
  /// Sets the flag and wakes every wait. Idempotent.
  void cancel();
  /// Whether cancel() was called.
  bool cancelled() const noexcept { return cancelled_.load(std::memory_order_acquire); }
  /// Waits `duration` or until cancel(), whichever comes first; returns
  /// cancelled().
  bool wait_for(std::chrono::nanoseconds duration) const;

 private:
  std::atomic<bool> cancelled_{false};
  mutable std::mutex mu_;
  mutable std::condition_variable cv_;
};

/// Makes `cancellation` the calling thread's current one (current_cancellation())
/// for the lifetime of this object, restoring the previous one after. The
/// loader's io task wraps each Source::read in one, so a source can see that
/// the read's epoch was stopped without a parameter on Source::read.
///
/// Ownership: `cancellation` must outlive this object. Not copyable.
class ScopedCancellation {
 public:
  explicit ScopedCancellation(const Cancellation& cancellation) noexcept;
  ~ScopedCancellation();
  ScopedCancellation(const ScopedCancellation&) = delete;
  ScopedCancellation& operator=(const ScopedCancellation&) = delete;

 private:
  const Cancellation* previous_;
};

/// The calling thread's current Cancellation (see ScopedCancellation), or
/// nullptr outside any scope (e.g. a read called directly, not by a loader).
const Cancellation* current_cancellation() noexcept;

/// Whether the calling thread's current Cancellation was cancelled (false
/// outside any scope).
bool cancellation_requested() noexcept;

/// Sleeps `duration`, ending early when the calling thread's current
/// Cancellation is cancelled; returns whether it was. Outside any scope it
/// sleeps the whole duration.
bool sleep_unless_cancelled(std::chrono::nanoseconds duration);

}  // namespace conveyor
