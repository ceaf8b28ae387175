#include "conveyor/core/thread_pool.h"

#include <pthread.h>

#include <utility>

#include "conveyor/core/error.h"

namespace conveyor {

ThreadPool::ThreadPool(int num_threads, std::string name) {
  check_config(num_threads >= 1, "thread pool size must be >= 1, got " + std::to_string(num_threads));
  threads_.reserve(static_cast<size_t>(num_threads));
  for (int i = 0; i < num_threads; ++i) {
    threads_.emplace_back([this] { run(); });
    // Linux limits thread names to 15 characters; a failure is harmless.
    std::string thread_name = (name + "-" + std::to_string(i)).substr(0, 15);
    pthread_setname_np(threads_.back().native_handle(), thread_name.c_str());
  }
}

ThreadPool::~ThreadPool() {
  std::deque<std::function<void()>> discarded;
  {
    std::lock_guard lock(mu_);
    stopping_ = true;
    discarded.swap(tasks_);
  }
  cv_.notify_all();
  for (auto& thread : threads_) thread.join();
  // `discarded` is destroyed here, outside the lock: a task's captures may
  // run arbitrary destructors.
}

void ThreadPool::submit(std::function<void()> task) {
  {
    std::lock_guard lock(mu_);
    if (stopping_) return;
    tasks_.push_back(std::move(task));
  }
  cv_.notify_one();
}

size_t ThreadPool::queued() const {
  std::lock_guard lock(mu_);
  return tasks_.size();
}

int ThreadPool::default_cpu_threads() {
  unsigned n = std::thread::hardware_concurrency();
  return n == 0 ? 1 : static_cast<int>(n);
}

void ThreadPool::run() {
  for (;;) {
    std::function<void()> task;
    {
      std::unique_lock lock(mu_);
      cv_.wait(lock, [this] { return stopping_ || !tasks_.empty(); });
      if (stopping_) return;
      task = std::move(tasks_.front());
      tasks_.pop_front();
    }
    task();
  }
}

}  // namespace conveyor
