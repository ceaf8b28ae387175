#pragma once

#include <cstdint>

namespace conveyor {

/// CPU time the calling thread has used, in nanoseconds (POSIX
/// CLOCK_THREAD_CPUTIME_ID); -1 where the platform has no such clock.
/// Thread-safety: may be called from any thread (it measures that thread).
int64_t thread_cpu_ns() noexcept;

/// CPU time the whole process has used (all its threads, user + system), in
/// nanoseconds (POSIX CLOCK_PROCESS_CPUTIME_ID); -1 where there is no such
/// clock. Thread-safety: may be called from any thread.
int64_t process_cpu_ns() noexcept;

/// Time the calling thread has spent ready to run but waiting for a core
/// (on a run queue), in nanoseconds: the CPU it wanted and did not get
/// because other threads held the cores. Linux: the second field of
/// /proc/thread-self/schedstat (the kernel's sched_info); -1 elsewhere or
/// when the file cannot be read. Costs an open and a read (a few µs).
/// Thread-safety: may be called from any thread (it measures that thread).
int64_t thread_run_delay_ns() noexcept;

/// The steady (monotonic) clock in nanoseconds, for durations: the clock
/// the Loader times reads and steps with, and the GIL waits are timed with,
/// so that a wait inside a read is never longer than the read.
/// Thread-safety: may be called from any thread.
int64_t steady_ns() noexcept;

/// Time the calling thread has waited for a lock it shares with the rest of
/// the process, in nanoseconds: the sum of what add_thread_lock_wait_ns()
/// added on this thread (0 if nothing). The Python bindings add the wait of
/// each GIL acquisition a loader thread makes to call Python; autotune reads
/// it around each read to tell reads that mostly queue for the GIL (where
/// spare reads in flight take the GIL from the training loop) from reads
/// that wait for storage.
/// Thread-safety: a per-thread counter; each thread sees its own.
int64_t thread_lock_wait_ns() noexcept;

/// Adds `ns` (>= 0; negative values are ignored) to the calling thread's
/// thread_lock_wait_ns().
void add_thread_lock_wait_ns(int64_t ns) noexcept;

/// Time the calling thread's reads waited in a store's queue for a slot
/// under a limit on requests in flight (HttpStore's per-host limit), in
/// nanoseconds: the sum of what add_thread_queue_wait_ns() added on this
/// thread (0 if nothing). Not the read's service time: autotune leaves it
/// out of the latency it sizes reads in flight on, since more reads waiting
/// for the same slots would only lengthen the queue.
/// Thread-safety: a per-thread counter; each thread sees its own.
int64_t thread_queue_wait_ns() noexcept;

/// Adds `ns` (>= 0; negative values are ignored) to the calling thread's
/// thread_queue_wait_ns().
void add_thread_queue_wait_ns(int64_t ns) noexcept;

}  // namespace conveyor
