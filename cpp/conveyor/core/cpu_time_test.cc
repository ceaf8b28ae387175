#include "conveyor/core/cpu_time.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <thread>

#if defined(__linux__)
#include <pthread.h>
#include <sched.h>
#endif

namespace conveyor {
namespace {

// Spins until the calling thread has used `ns` of CPU (bounded by a
// generous wall-clock limit in case the clock does not move).
void burn(int64_t ns) {
  const int64_t start = thread_cpu_ns();
  const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  volatile uint64_t sink = 0;
  while (thread_cpu_ns() - start < ns && std::chrono::steady_clock::now() < give_up) {
    for (int i = 0; i < 1000; ++i) sink = sink + static_cast<uint64_t>(i);
  }
}

TEST(CpuTimeTest, ThreadTimeCountsOnlyTheCallingThread) {
  if (thread_cpu_ns() < 0) GTEST_SKIP() << "no thread CPU clock on this platform";
  const int64_t before = thread_cpu_ns();
  // Another thread burns CPU: this thread's clock does not see it.
  std::thread other([] { burn(20'000'000); });
  other.join();
  const int64_t mine = thread_cpu_ns() - before;
  EXPECT_GE(mine, 0);
  EXPECT_LT(mine, 20'000'000);
}

TEST(CpuTimeTest, ProcessTimeCountsEveryThread) {
  if (process_cpu_ns() < 0) GTEST_SKIP() << "no process CPU clock on this platform";
  const int64_t before = process_cpu_ns();
  std::thread other([] { burn(20'000'000); });
  other.join();
  EXPECT_GE(process_cpu_ns() - before, 20'000'000);
}

TEST(CpuTimeTest, ClocksOnlyMoveForward) {
  const int64_t t0 = thread_cpu_ns(), p0 = process_cpu_ns(), s0 = steady_ns();
  burn(1'000'000);
  EXPECT_GE(thread_cpu_ns(), t0);
  EXPECT_GE(process_cpu_ns(), p0);
  // Wall time passes at least as fast as this thread's CPU time.
  if (t0 >= 0) {
    EXPECT_GE(steady_ns() - s0, thread_cpu_ns() - t0 - 1'000'000);
  }
}

TEST(CpuTimeTest, SleepingIsNotWaitingForACore) {
  const int64_t before = thread_run_delay_ns();
  if (before < 0) GTEST_SKIP() << "no run-queue delay on this platform";
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  const int64_t delay = thread_run_delay_ns() - before;
  EXPECT_GE(delay, 0);
  EXPECT_LT(delay, 50'000'000);
}

#if defined(__linux__)
TEST(CpuTimeTest, RunDelayGrowsWhileAnotherThreadHoldsTheOnlyCore) {
  if (thread_run_delay_ns() < 0) GTEST_SKIP() << "no run-queue delay on this platform";
  cpu_set_t allowed;
  ASSERT_EQ(pthread_getaffinity_np(pthread_self(), sizeof(allowed), &allowed), 0);
  int core = 0;
  while (core < CPU_SETSIZE && !CPU_ISSET(core, &allowed)) ++core;
  ASSERT_LT(core, CPU_SETSIZE);
  cpu_set_t one;
  CPU_ZERO(&one);
  CPU_SET(core, &one);
  ASSERT_EQ(pthread_setaffinity_np(pthread_self(), sizeof(one), &one), 0);
  // A thread on the same single core that never blocks: while it runs, this
  // one is ready and waits.
  std::atomic<bool> started{false}, stop{false};
  std::thread rival([&] {
    pthread_setaffinity_np(pthread_self(), sizeof(one), &one);
    started = true;
    volatile uint64_t sink = 0;
    while (!stop) sink = sink + 1;
  });
  while (!started) std::this_thread::yield();
  const int64_t before = thread_run_delay_ns();
  burn(30'000'000);
  const int64_t delay = thread_run_delay_ns() - before;
  stop = true;
  rival.join();
  pthread_setaffinity_np(pthread_self(), sizeof(allowed), &allowed);
  // The scheduler shares the core: for 30 ms of this thread's CPU the rival
  // gets about as much, which this thread spends waiting.
  EXPECT_GE(delay, 5'000'000);
}
#endif

TEST(CpuTimeTest, LockWaitIsCountedPerThread) {
  const int64_t before = thread_lock_wait_ns();
  add_thread_lock_wait_ns(1500);
  add_thread_lock_wait_ns(-7);  // Ignored: a clock step must not make it shrink.
  add_thread_lock_wait_ns(0);
  EXPECT_EQ(thread_lock_wait_ns() - before, 1500);
  int64_t other_before = -1, other_after = -1;
  std::thread other([&] {
    other_before = thread_lock_wait_ns();
    add_thread_lock_wait_ns(40);
    other_after = thread_lock_wait_ns();
  });
  other.join();
  EXPECT_EQ(other_before, 0);
  EXPECT_EQ(other_after, 40);
  EXPECT_EQ(thread_lock_wait_ns() - before, 1500);
}

}  // namespace
}  // namespace conveyor
