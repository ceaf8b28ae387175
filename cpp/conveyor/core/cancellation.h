#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <map>
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

  /// Runs a callback when cancel() is called (at once if it already was),
  /// for as long as this object lives: what lets a wait on something else
  /// (a remote transfer's reply) end at cancel() without polling. The
  /// callback runs under the Cancellation's lock, so it must be short and
  /// must not call this Cancellation; destroying the Subscription waits for
  /// a callback under way, so the callback may use what outlives it only.
  /// Do not destroy it while holding a lock the callback takes.
  class Subscription {
   public:
    Subscription(const Cancellation& cancellation, std::function<void()> callback);
    ~Subscription();
    Subscription(const Subscription&) = delete;
    Subscription& operator=(const Subscription&) = delete;

   private:
    const Cancellation& cancellation_;
    uint64_t id_;
  };

 private:
  std::atomic<bool> cancelled_{false};
  mutable std::mutex mu_;
  mutable std::condition_variable cv_;
  mutable std::map<uint64_t, std::function<void()>> callbacks_;  // Guarded by mu_.
  mutable uint64_t next_id_ = 0;                                 // Guarded by mu_.
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
