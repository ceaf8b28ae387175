#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace conveyor {

/// Names the calling thread (shown by top, gdb, /proc/<pid>/task/*/comm; at
/// most 15 characters on Linux). Best effort: a failure, or a platform
/// without thread names, is harmless.
void set_current_thread_name(const std::string& name);

/// A resizable set of worker threads running submitted tasks in FIFO order.
///
/// conveyor uses two: an io pool for reads (many threads, since reads wait on
/// storage) and a cpu pool for decode and transforms (one per CPU this process
/// may use: affinity mask, cgroup quota; core/cpu_count.h).
/// Tasks must not throw; the pipeline catches and routes errors itself.
///
/// resize() changes the number of threads while tasks run: growing starts
/// threads, shrinking lets the surplus threads exit once they finish the task
/// they are running (never in the middle of one); no queued task is dropped.
///
/// Thread-safety: submit(), resize(), size(), running() and queued() may be
/// called from any thread, including from a task. The destructor shuts the
/// pool down (shutdown()); it must not be called from a pool thread.
class ThreadPool {
 public:
  /// Starts one thread running `body` and returns it; throws (as std::thread
  /// does: std::system_error) when the OS refuses. Tests inject failures.
  using ThreadStarter = std::function<std::thread(std::function<void()> body)>;

  /// Starts `num_threads` (>= 1) threads named "<name>-<i>" (where the
  /// platform names threads), with `start` (default: std::thread). When a
  /// thread cannot be started, joins the ones already started and throws
  /// Error{kConfig, "cannot start thread 513 of 100000 of the <name> pool
  /// (<the system's reason>)"}.
  ThreadPool(int num_threads, std::string name, ThreadStarter start = {});
  ~ThreadPool();

  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  /// Queues `task` to run on one of the threads.
  void submit(std::function<void()> task);

  /// Queues `task` ahead of every queued task: the next free thread runs it
  /// (e.g. the work that completes an earlier batch, ahead of later samples).
  void submit_first(std::function<void()> task);

  /// Queues `task` after the queued tasks of `order` or lower and ahead of
  /// those of a higher order (submit() queues at the highest order,
  /// submit_first() at the lowest): tasks submitted out of order (e.g. the
  /// samples whose reads finished first) run in order.
  void submit_in_order(int64_t order, std::function<void()> task);

  /// Sets the number of threads to `num_threads` (>= 1, else Error{kConfig}).
  /// Growing starts the new threads before it returns; when the OS refuses
  /// one, the pool keeps the threads it has (no task is lost) and throws the
  /// constructor's Error. Shrinking returns at once: surplus threads exit
  /// after their current task and are joined by a later resize() or the
  /// destructor.
  void resize(int num_threads);

  /// Number of threads the pool is sized to (the last resize(), or the
  /// constructor's count).
  int size() const;

  /// Threads alive now: size() plus those above it still finishing a task.
  int running() const;

  /// Number of tasks queued and not yet started.
  size_t queued() const;

  /// Discards the tasks not yet started, waits for the running ones and joins
  /// every thread; submit() is a no-op from then on. Idempotent; the
  /// destructor calls it. Two pools whose tasks submit to each other are
  /// shut down both before either is destroyed: a thread of one may be
  /// inside the other's submit() until it is joined. Must not be called from
  /// a pool thread.
  void shutdown() noexcept;

  /// Default size of a cpu pool: the CPUs this process may use
  /// (usable_cpu_count(): affinity and cgroup quota), at least 1.
  static int default_cpu_threads();

 private:
  void run();
  // Starts threads until `target` run; mu_ not held. Throws the constructor's
  // Error (the threads started so far keep running).
  void grow_to(int target, int asked);
  // Joins threads that exited after a shrink; `resize_mu_` held.
  void join_exited();
  // Discards queued tasks, wakes every thread and joins it.
  void stop_and_join() noexcept;

  const std::string name_;
  ThreadStarter start_;
  // Serialises resize() and the destructor (they own `threads_`).
  std::mutex resize_mu_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  struct Queued {
    int64_t order;
    std::function<void()> run;
  };
  std::deque<Queued> tasks_;  // Guarded by mu_: sorted by order, FIFO within one order.
  bool stopping_ = false;
  int target_ = 0;                       // Guarded by mu_: threads wanted.
  int alive_ = 0;                        // Guarded by mu_: threads started and not exited.
  int64_t next_number_ = 0;              // Guarded by resize_mu_: the next thread's name suffix.
  std::vector<std::thread::id> exited_;  // Guarded by mu_: exited, not joined yet.
  std::vector<std::thread> threads_;     // Guarded by resize_mu_.
};

}  // namespace conveyor
