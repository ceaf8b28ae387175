#include "conveyor/core/cpu_time.h"

#include <chrono>
#include <cstdlib>
#include <ctime>

#if defined(__linux__)
#include <fcntl.h>
#include <unistd.h>
#endif

namespace conveyor {
namespace {

thread_local int64_t lock_wait_ns = 0;
thread_local int64_t queue_wait_ns = 0;

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

int64_t thread_run_delay_ns() noexcept {
#if defined(__linux__)
  // "<ns on a core> <ns waiting on a run queue> <time slices>\n".
  const int fd = ::open("/proc/thread-self/schedstat", O_RDONLY | O_CLOEXEC);
  if (fd < 0) return -1;
  char text[128];
  const ssize_t n = ::read(fd, text, sizeof(text) - 1);
  ::close(fd);
  if (n <= 0) return -1;
  text[n] = '\0';
  char* end = nullptr;
  std::strtoll(text, &end, 10);
  if (end == text) return -1;
  const char* delay = end;
  const long long ns = std::strtoll(delay, &end, 10);
  if (end == delay || ns < 0) return -1;
  return static_cast<int64_t>(ns);
#else
  return -1;
#endif
}

int64_t steady_ns() noexcept {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

int64_t thread_lock_wait_ns() noexcept { return lock_wait_ns; }

void add_thread_lock_wait_ns(int64_t ns) noexcept {
  if (ns > 0) lock_wait_ns += ns;
}

int64_t thread_queue_wait_ns() noexcept { return queue_wait_ns; }

void add_thread_queue_wait_ns(int64_t ns) noexcept {
  if (ns > 0) queue_wait_ns += ns;
}

}  // namespace conveyor
