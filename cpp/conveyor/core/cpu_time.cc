#include "conveyor/core/cpu_time.h"

#include <ctime>

namespace conveyor {
namespace {

// clock_gettime on a CPU-time clock; -1 when the clock is missing or fails.
[[maybe_unused]] int64_t read_clock(clockid_t clock) noexcept {
  timespec ts{};
  if (clock_gettime(clock, &ts) != 0) return -1;
  return static_cast<int64_t>(ts.tv_sec) * 1000000000 + static_cast<int64_t>(ts.tv_nsec);
}

}  // namespace

int64_t thread_cpu_ns() noexcept {
#if defined(CLOCK_THREAD_CPUTIME_ID)
  return read_clock(CLOCK_THREAD_CPUTIME_ID);
#else
  return -1;
#endif
}

int64_t process_cpu_ns() noexcept {
#if defined(CLOCK_PROCESS_CPUTIME_ID)
  return read_clock(CLOCK_PROCESS_CPUTIME_ID);
#else
  return -1;
#endif
}

}  // namespace conveyor
