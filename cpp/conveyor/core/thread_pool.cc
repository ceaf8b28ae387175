#include "conveyor/core/thread_pool.h"

#if defined(__linux__) || defined(__APPLE__)
#include <pthread.h>
#endif

#include <algorithm>
#include <iterator>
#include <limits>
#include <system_error>
#include <utility>

#include "conveyor/core/cpu_count.h"
#include "conveyor/core/error.h"

namespace conveyor {

void set_current_thread_name(const std::string& name) {
#if defined(__linux__)
  pthread_setname_np(pthread_self(), name.substr(0, 15).c_str());  // Linux allows 15 characters.
#elif defined(__APPLE__)
  pthread_setname_np(name.substr(0, 63).c_str());  // macOS names only the calling thread.
#else
  (void)name;
#endif
}

ThreadPool::ThreadPool(int num_threads, std::string name, ThreadStarter start)
    : name_(std::move(name)), start_(std::move(start)) {
  check_config(num_threads >= 1, "thread pool size must be >= 1, got " + std::to_string(num_threads));
  if (!start_) start_ = [](std::function<void()> body) { return std::thread(std::move(body)); };
  std::lock_guard resize_lock(resize_mu_);
  try {
    grow_to(num_threads, num_threads);
  } catch (...) {
    // Leaving the started threads joinable would terminate the process: join
    // them and report, as Python's Thread.start() does.
    stop_and_join();
    throw;
  }
}

ThreadPool::~ThreadPool() { shutdown(); }

void ThreadPool::shutdown() noexcept {
  std::lock_guard resize_lock(resize_mu_);
  stop_and_join();
}

void ThreadPool::resize(int num_threads) {
  check_config(num_threads >= 1, "thread pool size must be >= 1, got " + std::to_string(num_threads));
  std::lock_guard resize_lock(resize_mu_);
  join_exited();
  {
    std::lock_guard lock(mu_);
    if (stopping_) return;
    const bool shrinking = num_threads < target_;
    target_ = num_threads;
    if (shrinking) {
      cv_.notify_all();  // Idle surplus threads exit now, busy ones after their task.
      return;
    }
  }
  grow_to(num_threads, num_threads);
}

void ThreadPool::grow_to(int target, int asked) {
  threads_.reserve(static_cast<size_t>(target));
  for (;;) {
    {
      std::lock_guard lock(mu_);
      // Threads above the target that have not exited yet count: they stay.
      if (alive_ >= target) {
        target_ = target;
        return;
      }
      target_ = target;
      ++alive_;  // Before it runs: it must not see itself as surplus.
    }
    std::string reason;
    const int number = static_cast<int>(threads_.size()) + 1;
    try {
      threads_.push_back(start_([this, thread_name = name_ + "-" + std::to_string(next_number_)] {
        set_current_thread_name(thread_name);
        run();
      }));
      ++next_number_;
      continue;
    } catch (const std::system_error& e) {
      reason = e.code().message();
    } catch (const std::exception& e) {
      reason = e.what();
    }
    // The OS refused a thread (an address-space or process limit): keep
    // working with the threads there are.
    {
      std::lock_guard lock(mu_);
      --alive_;
      target_ = std::max(1, alive_);
    }
    throw Error(ErrorKind::kConfig, "cannot start thread " + std::to_string(number) + " of " + std::to_string(asked) +
                                        " of the " + name_ + " pool (" + reason + ")");
  }
}

void ThreadPool::join_exited() {
  std::vector<std::thread::id> exited;
  {
    std::lock_guard lock(mu_);
    exited.swap(exited_);
  }
  if (exited.empty()) return;
  std::vector<std::thread> kept;
  kept.reserve(threads_.size());
  for (auto& thread : threads_) {
    if (std::find(exited.begin(), exited.end(), thread.get_id()) != exited.end()) {
      thread.join();  // It has left run(); only its thread-exit destructors may still run.
    } else {
      kept.push_back(std::move(thread));
    }
  }
  threads_.swap(kept);
}

void ThreadPool::stop_and_join() noexcept {
  std::deque<Queued> discarded;
  {
    std::lock_guard lock(mu_);
    stopping_ = true;
    discarded.swap(tasks_);
  }
  cv_.notify_all();
  for (auto& thread : threads_) thread.join();
  threads_.clear();
  // `discarded` is destroyed here, outside the lock: a task's captures may
  // run arbitrary destructors.
}

void ThreadPool::submit(std::function<void()> task) {
  {
    std::lock_guard lock(mu_);
    if (stopping_) return;
    tasks_.push_back({std::numeric_limits<int64_t>::max(), std::move(task)});
  }
  cv_.notify_one();
}

void ThreadPool::submit_first(std::function<void()> task) {
  {
    std::lock_guard lock(mu_);
    if (stopping_) return;
    tasks_.push_front({std::numeric_limits<int64_t>::min(), std::move(task)});
  }
  cv_.notify_one();
}

void ThreadPool::submit_in_order(int64_t order, std::function<void()> task) {
  {
    std::lock_guard lock(mu_);
    if (stopping_) return;
    // Usually the last: tasks mostly come in order; scan from the back.
    auto at = tasks_.end();
    while (at != tasks_.begin() && std::prev(at)->order > order) --at;
    tasks_.insert(at, {order, std::move(task)});
  }
  cv_.notify_one();
}

int ThreadPool::size() const {
  std::lock_guard lock(mu_);
  return target_;
}

int ThreadPool::running() const {
  std::lock_guard lock(mu_);
  return alive_;
}

size_t ThreadPool::queued() const {
  std::lock_guard lock(mu_);
  return tasks_.size();
}

int ThreadPool::default_cpu_threads() { return usable_cpu_count(); }

void ThreadPool::run() {
  for (;;) {
    std::function<void()> task;
    {
      std::unique_lock lock(mu_);
      cv_.wait(lock, [this] { return stopping_ || !tasks_.empty() || alive_ > target_; });
      if (stopping_) return;
      if (alive_ > target_) {
        // A shrink: this thread is surplus. Only between tasks, so no task
        // is interrupted; the next resize() or the destructor joins it.
        --alive_;
        exited_.push_back(std::this_thread::get_id());
        // submit()'s notify_one may have woken this thread for a task: pass
        // it on to one that stays.
        if (!tasks_.empty()) cv_.notify_one();
        return;
      }
      task = std::move(tasks_.front().run);
      tasks_.pop_front();
    }
    task();
  }
}

}  // namespace conveyor
