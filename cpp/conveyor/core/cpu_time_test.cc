#include "conveyor/core/cpu_time.h"

#include <gtest/gtest.h>

#include <chrono>
#include <cstdint>
#include <thread>

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
  const int64_t t0 = thread_cpu_ns(), p0 = process_cpu_ns();
  burn(1'000'000);
  EXPECT_GE(thread_cpu_ns(), t0);
  EXPECT_GE(process_cpu_ns(), p0);
}

}  // namespace
}  // namespace conveyor
