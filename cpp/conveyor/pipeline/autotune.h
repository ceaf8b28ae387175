#pragma once

#include <cstdint>
#include <deque>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "conveyor/core/latency_histogram.h"

namespace conveyor {

/// The three settings the autotune controller chooses (each >= 1).
struct AutotuneSettings {
  int cpu_threads = 1;  ///< cpu pool size: decode and transforms.
  int io_threads = 1;   ///< io pool size = reads in flight (each io thread blocks on one read).
  int prefetch = 1;     ///< Batches allowed in flight or ready ahead of the consumer.

  friend bool operator==(const AutotuneSettings&, const AutotuneSettings&) = default;
};

/// What the settings may not exceed, computed by the caller (they may change
/// between windows, e.g. when the process's CPU affinity or quota changes).
struct AutotuneLimits {
  int usable_cores = 1;             ///< Cores this process may use (affinity, cgroup quota), >= 1.
  int64_t memory_budget_bytes = 0;  ///< Batch buffers may hold at most this: prefetch x batch_bytes <= budget.
  int64_t batch_bytes = 1;          ///< Bytes of one batch buffer, >= 1.
};

/// One measurement window, as the Loader saw it. Sums and counts cover only
/// the window (deltas of the Loader's counters), so a window with no event
/// simply contributes nothing to an estimate.
struct AutotuneWindow {
  double seconds = 0;  ///< Window duration (> 0).

  // The consumer. A "step" is the time from next() returning a batch to the
  // consumer's following call of next(): its demand, free of any waiting.
  int64_t consumer_steps = 0;        ///< Steps that ended in this window.
  double consumer_step_seconds = 0;  ///< Their summed duration.
  int64_t batches_taken = 0;         ///< Batches next() returned in this window.
  double wait_seconds = 0;           ///< Time the consumer was blocked in next(): input stall.

  // Per-sample service times, measured around the read and the process call
  // only (not the time a task waits in a pool's queue).
  int64_t reads_completed = 0;  ///< Reads that finished in this window (failed ones too).
  double read_seconds = 0;      ///< Summed over the reads completed.
  double read_p90_seconds = 0;  ///< 90th percentile of those reads; 0 = not measured.
  /// Part of read_seconds spent waiting for a lock the reads share with the
  /// rest of the process (Python's GIL), <= read_seconds.
  double read_lock_wait_seconds = 0;
  /// Time the same reads waited for a slot under a store's limit on requests
  /// in flight (HttpStore's per-host limit); not part of read_seconds.
  double read_queue_wait_seconds = 0;
  int64_t samples_processed = 0;   ///< Samples whose decode + transforms finished in this window.
  double process_seconds = 0;      ///< Decode + transforms, summed over the samples processed.
  double process_p90_seconds = 0;  ///< 0 = not measured.

  int64_t batches_ready = 0;  ///< Complete batches waiting for the consumer at the window's end.

  // CPU time (seconds of CPU, summed over threads) in this window: the whole
  // process's, and the loader's own (its threads' CPU time in reads and in
  // decode + transforms). The difference is what the rest of the process
  // (the model, the training loop) uses; both 0 = not measured (no limit).
  double whole_process_cpu_seconds = 0;  ///< The whole process (CLOCK_PROCESS_CPUTIME_ID).
  double loader_cpu_seconds = 0;  ///< The loader's reads + processing (CLOCK_THREAD_CPUTIME_ID around each task).
  /// Time the consumer's thread was ready to run but waited for a core
  /// (thread_run_delay_ns() at each next()): CPU the rest of the process
  /// wanted and did not get. 0 = not measured.
  double consumer_run_delay_seconds = 0;

  AutotuneSettings current;  ///< The settings in force during the window.
  AutotuneLimits limits;     ///< The limits for the next window.
};

/// Knobs of the control rule (docs/design/autotune.md explains each).
struct AutotuneOptions {
  double stall_target = 0.01;       ///< Grow when the consumer waits more than this fraction of a window.
  double headroom = 1.25;           ///< Grow when demand x service time x headroom exceeds a setting.
  double shrink_band = 1.25;        ///< Shrink only if the target with headroom x band is still lower.
  double smoothing_seconds = 0.3;   ///< Time constant of the exponential smoothing.
  double shrink_dwell_seconds = 1;  ///< Calm time (and time since its last change) before a setting shrinks.
  /// The same for io threads whose reads are lock-bound (they queue for the GIL).
  double lock_bound_shrink_dwell_seconds = 0.2;
  double regret_seconds = 2;           ///< A stall this soon after a shrink undoes it and backs off.
  double max_backoff_seconds = 64;     ///< Longest time a regretted shrink is forbidden.
  double max_gain = 4;                 ///< Cap of the stall correction factor of each setting.
  double first_window_seconds = 0.01;  ///< Windows start this short and double...
  double max_window_seconds = 0.1;     ///< ... up to this.
  int max_io_threads = 1024;  ///< Reads in flight at most: 1 000 images/s at 100 ms per request need 100; a few hundred
                              ///< ms of latency at several thousand images/s, a few hundred more.
  bool tune_cpu_threads = true;  ///< false: cpu threads are pinned (the user gave a number).
  bool tune_io_threads = true;
  bool tune_prefetch = true;
  /// The source's reads wait on a network (Source::network_reads()): the
  /// first settings put a batch's reads in flight (initial_settings).
  bool network_reads = false;
};

/// What the controller decided after a window.
struct AutotuneDecision {
  AutotuneSettings settings;  ///< Settings for the next window.
  bool changed = false;       ///< settings differ from the window's current ones.
  /// Why they changed, e.g. "stall 7.2% > 1%: cpu threads 2 -> 3 (...)"; when
  /// unchanged, empty, or why nothing grew although the consumer waits.
  std::string reason;
  double next_window_seconds = 0.01;  ///< When the caller should measure and call update() again.
};

/// The controller's smoothed view of the pipeline (for stats and traces).
struct AutotuneEstimates {
  double demand_per_second = 0;  ///< Samples per second the consumer asks for; 0 = not known yet.
  double read_seconds = 0;       ///< Mean read latency per sample; 0 = not known yet.
  double process_seconds = 0;    ///< Mean decode + transform time per sample on one thread.
  double stall = 0;              ///< Smoothed fraction of time the consumer waits.
  /// Cores the rest of the process wants (its CPU time minus the loader's,
  /// plus the consumer's wait for a core, per second, smoothed); 0 until
  /// known (two windows with consumer steps).
  double other_cores = 0;
  /// Cores kept from the cpu threads for the rest of the process: other_cores
  /// rounded, with hysteresis (docs/design/autotune.md); 0 until known.
  int cores_left_to_others = 0;
  /// How far the slow reads and decodes run past the mean (p90 - mean of
  /// reads + of decode and transforms), smoothed; 0 until measured.
  double spread_seconds = 0;
};

/// Chooses cpu threads, reads in flight and prefetch so that the consumer
/// waits at most `stall_target` of the time, with the fewest threads and
/// within the memory budget (docs/design/autotune.md: model, rule, stability).
///
/// Little's law gives the feed-forward targets (demand x service time x
/// headroom); the observed stall corrects them; hysteresis, a dwell time and
/// an exponential back-off on regretted shrinks keep it from oscillating.
/// The cores the rest of the process uses (measured CPU time) are not given
/// to cpu threads: at most usable cores - others, rounded with hysteresis.
///
/// A pure decision object: no threads, no clock (time is the sum of the
/// window durations it is fed), no I/O; the same windows give the same
/// decisions. Thread-safety: none; the caller serialises calls.
class AutotuneController {
 public:
  /// Throws Error{kConfig} naming the option when `options` or `batch_size` is invalid.
  AutotuneController(int64_t batch_size, AutotuneOptions options = {});

  /// Settings to start with before any measurement: a cpu thread per usable
  /// core (the consumer always waits for an epoch's first batch), 16 reads
  /// in flight (with network_reads, a batch's, from 16 to 256), two batches of
  /// prefetch (all within `limits`).
  AutotuneSettings initial_settings(const AutotuneLimits& limits) const;

  /// Feeds one window and returns the settings for the next one. Throws
  /// Error{kConfig} for an invalid window (non-positive duration, negative
  /// counts or times, settings < 1, limits < 1).
  AutotuneDecision update(const AutotuneWindow& window);

  /// A new epoch starts: the pipeline refills, so its first stall is not a
  /// lack of capacity. Windows restart short; estimates are kept.
  void begin_epoch();

  /// Length of the window the caller should measure next (the first one
  /// before any update()).
  double next_window_seconds() const noexcept { return window_; }
  /// Reason of the last change ("" before any).
  const std::string& last_reason() const noexcept { return last_reason_; }
  AutotuneEstimates estimates() const;
  /// Seconds of windows fed so far (the controller's only notion of time).
  double elapsed_seconds() const noexcept { return now_; }

 private:
  // A smoothed mean: sum of values / count, both decayed exponentially; a
  // window whose own mean is off by more than 2x restarts it (a step change
  // in latency or demand is followed at once, not over several time constants).
  struct Mean {
    double sum = 0;
    double count = 0;
    bool known() const { return count > 0; }
    double value() const { return count > 0 ? sum / count : 0; }
    void add(double window_sum, double window_count, double decay, double min_count_for_jump);
  };
  // Per setting: its stall correction and the hysteresis/back-off state.
  struct Knob {
    double gain = 1;
    double last_change = -1e300;
    double last_grow = -1e300;
    double last_shrink = -1e300;
    int before_shrink = 0;
    int floor = 1;  ///< No shrink below this until floor_until (a regretted shrink).
    double floor_until = -1e300;
    double backoff = 0;
  };
  enum Which { kCpu = 0, kIo = 1, kPrefetch = 2 };
  struct Step;  // One update()'s model and changes (autotune.cc).

  void validate(const AutotuneWindow& window) const;
  // update()'s steps, in order (docs/design/autotune.md, "The control rule").
  void smooth(Step& s);               // 1. The smoothed estimates; calm time; the rest of the process.
  void model(Step& s);                // The demand, service times, limits and the flow to provision for.
  void apply_limits(Step& s);         // 2. A setting above its limit goes down at once.
  bool feed_forward(Step& s);         // 3. Little's law with hysteresis; true when a setting grew.
  void feedback(Step& s, bool grew);  // 4. A stall the model does not explain grows the bottleneck.
  double need(const Step& s, int which) const;
  int target(const Step& s, int which, double factor) const;
  std::string explain(const Step& s, int which) const;
  void set(Step& s, int which, int v, const std::string& why, const std::string& detail = {});

  const int64_t batch_size_;
  const AutotuneOptions options_;
  double now_ = 0;
  double window_ = 0;  // The last window length asked for.
  bool warming_up_ = true;
  double calm_seconds_ = 0;
  Mean step_;
  Mean read_;
  Mean read_lock_wait_;   // The part of read_ spent queueing for the GIL.
  Mean read_queue_wait_;  // Each read's wait for a store's slot (not in read_).
  Mean process_;
  Mean stall_;
  Mean spread_;
  Mean others_;             // CPU seconds of the rest of the process per second.
  int others_windows_ = 0;  // Windows with consumer steps fed to others_.
  int cores_taken_ = 0;     // others_ rounded with hysteresis: cores kept from the cpu threads.
  Knob knobs_[3];
  std::string last_reason_;
};

/// Cumulative counters of the Loader since its epoch started (a window is the
/// difference of two of them). Times in nanoseconds.
struct AutotuneCounters {
  int64_t consumer_steps = 0;    ///< Steps ended: next() called again after it returned a batch.
  int64_t consumer_step_ns = 0;  ///< Their summed duration.
  int64_t batches_taken = 0;     ///< Batches next() returned.
  int64_t wait_ns = 0;           ///< Time blocked in next(), including a wait under way.
  int64_t reads = 0;             ///< Reads finished (failed ones too).
  int64_t read_ns = 0;
  int64_t processed = 0;  ///< Samples decoded + transformed.
  int64_t process_ns = 0;
  int64_t read_cpu_ns = 0;            ///< CPU time of the threads running reads, summed over the reads.
  int64_t read_lock_wait_ns = 0;      ///< Part of read_ns spent waiting for the GIL (thread_lock_wait_ns()).
  int64_t read_queue_wait_ns = 0;     ///< The reads' wait for a store's slot, not in read_ns (thread_queue_wait_ns()).
  int64_t process_cpu_ns = 0;         ///< CPU time of the threads running decode + transforms, summed over the samples.
  int64_t consumer_run_delay_ns = 0;  ///< The consumer thread's wait for a core between its next() calls.
  int64_t batches_ready = 0;          ///< Complete batches waiting now (not cumulative).
  LatencyHistogram::Counts read_latency{};     ///< Each read's latency (a window's p90 is read from two).
  LatencyHistogram::Counts process_latency{};  ///< Each decode + transforms' time.
};

/// What autotune reports through Loader::stats().
struct AutotuneStatus {
  AutotuneSettings chosen;         ///< The settings last chosen (or pinned).
  bool tuned_cpu_threads = false;  ///< false: pinned by the user.
  bool tuned_io_threads = false;
  bool tuned_prefetch = false;
  AutotuneEstimates estimates;      ///< The controller's smoothed view.
  std::string reason;               ///< Why the last change happened ("" before any).
  int64_t changes = 0;              ///< Decisions that changed a setting since the Loader started.
  int usable_cores = 1;             ///< The limit of cpu threads (affinity, cgroup quota).
  int64_t memory_budget_bytes = 0;  ///< The limit of the batch buffers.
};

/// The Loader's side of autotune: turns the Loader's counters into one
/// AutotuneWindow per window, asks the AutotuneController, and traces its
/// decisions. The Loader owns one when a setting is "auto" and applies the
/// settings it returns (loader.cc: a few named hooks; the policy is here).
///
/// Limits: cpu threads <= the usable cores (usable_cpu_count(): affinity and
/// cgroup quota, re-read once a second); prefetch x batch_bytes <= the memory
/// budget minus one batch (the one the consumer holds while the loader
/// prepares the next), so the buffers of the batches in flight, ready and
/// being consumed stay within the budget.
///
/// The rest of the process: each window's CPU time of the whole process
/// (process_cpu_ns(), read by observe() and begin_epoch()) minus the loader's
/// (the counters' read_cpu_ns + process_cpu_ns), and the consumer's wait for
/// a core, go to the controller, which keeps those cores from the cpu threads.
///
/// Tracing: every change is kept (the last 256, for take_trace()) and, when
/// the environment variable CONVEYOR_AUTOTUNE_LOG is set to a value other
/// than "" or "0" when the Loader is made, printed to stderr.
///
/// Thread-safety: none; the Loader calls it under its mutex.
class LoaderAutotune {
 public:
  /// `pinned`: 0 for a setting autotune chooses, else the user's value (kept).
  /// `batch_bytes` >= 1, `memory_budget_bytes` >= 0, of which two batches
  /// are the consumer's (below three batches, prefetch stays 1).
  /// `usable_cores` defaults to usable_cpu_count(). Throws Error{kConfig} for
  /// invalid `options`.
  LoaderAutotune(int64_t batch_size, int64_t batch_bytes, int64_t memory_budget_bytes, AutotuneSettings pinned,
                 AutotuneOptions options = {}, std::function<int()> usable_cores = {});

  /// True when at least one setting is chosen by autotune.
  bool enabled() const noexcept { return tune_[0] || tune_[1] || tune_[2]; }

  /// True when autotune chooses the cpu threads (constant: may be called
  /// without the Loader's mutex).
  bool tunes_cpu_threads() const noexcept { return tune_[0]; }

  /// The settings to start the pools with.
  AutotuneSettings initial_settings() const { return chosen_; }

  /// An epoch starts at `now_ns` with the counters at `start`: zero, but for
  /// the latency histograms, which count across epochs (the epoch's first
  /// window is measured from their snapshot here).
  void begin_epoch(int64_t now_ns, const AutotuneCounters& start = {});

  /// When the current window ends (steady clock, ns); the Loader calls
  /// observe() at or after it.
  int64_t window_end_ns() const noexcept { return window_end_ns_; }

  /// Closes the window when it has ended: feeds it to the controller and
  /// returns the new settings when they changed, else nothing. `current`
  /// is what the pools are set to now.
  std::optional<AutotuneSettings> observe(int64_t now_ns, const AutotuneCounters& counters,
                                          const AutotuneSettings& current);

  /// The chosen settings when a setting was set from outside (Loader::set_parallelism).
  void note_set(const AutotuneSettings& settings, const std::string& reason);

  AutotuneStatus status() const;

  /// The trace lines since the last call (oldest first; at most 256 kept).
  std::vector<std::string> take_trace();

 private:
  void trace(const std::string& line);
  // The part of the budget prefetched batches may use.
  int64_t prefetch_budget_bytes() const;

  const int64_t batch_bytes_;
  const int64_t memory_budget_bytes_;
  const bool tune_[3];
  const std::function<int()> usable_cores_fn_;
  const bool log_to_stderr_;
  AutotuneController controller_;
  AutotuneSettings chosen_;
  int usable_cores_ = 1;
  int64_t usable_cores_read_ns_ = 0;
  int64_t epoch_started_ns_ = 0;
  int64_t window_start_ns_ = 0;
  int64_t window_end_ns_ = 0;
  const bool measure_cpu_;  // Both CPU-time clocks exist on this platform.
  int64_t window_start_process_cpu_ns_ = 0;
  AutotuneCounters window_start_;
  int64_t changes_ = 0;
  std::string reason_;
  std::deque<std::string> trace_;
};

/// The default memory budget of a Loader: a quarter of the memory available
/// now (Linux: MemAvailable of /proc/meminfo; elsewhere the free physical
/// pages), at least 64 MiB; 1 GiB where neither can be asked.
int64_t default_memory_budget_bytes();

}  // namespace conveyor
