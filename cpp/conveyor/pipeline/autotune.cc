#include "conveyor/pipeline/autotune.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <limits>
#include <utility>
#include <vector>

#if __has_include(<unistd.h>)
#include <unistd.h>
#endif

#include "conveyor/core/cpu_count.h"
#include "conveyor/core/cpu_time.h"
#include "conveyor/core/error.h"
#include "conveyor/core/number_format.h"

namespace conveyor {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();
// Settings never exceed this, whatever the measurements say (a guard against
// an absurd budget or demand, not a tuning knob).
constexpr int kMaxSetting = 1 << 20;
// The cores kept for the rest of the process are its smoothed CPU use,
// rounded to the nearest integer, but changed only when the estimate moves
// this far past the rounding boundary (kept 1 while others stay in
// [0.25, 1.75]): noise around x.5 does not flip the cpu limit.
constexpr double kCoresHysteresis = 0.25;
// Windows with consumer steps (after the epoch's first batch) before the
// estimate of the other cores is trusted.
constexpr int kOtherCoresWindows = 2;
// Reads whose smoothed lock wait (the GIL) is at least this share of their
// latency are lock-bound: they queue for the lock more than they wait for
// storage.
constexpr double kLockBoundShare = 0.5;
// Reads whose smoothed wait for a store's slot is at least this share of
// their latency are store-bound: the store's limit on requests in flight,
// not the io threads, bounds the reads under way.
constexpr double kStoreBoundShare = 0.5;

std::string ms(double seconds) { return format_general(seconds * 1e3, 3) + " ms"; }
std::string rate(double per_second) {
  return std::isinf(per_second) ? std::string("unbounded") : format_fixed(per_second, 0) + "/s";
}

// ceil(x), saturated to [1, kMaxSetting]; a hair below an integer counts as it
// (3.0000000001 from rounding must not ask for a 4th thread).
int ceil_setting(double x) {
  if (!(x > 1)) return 1;  // Also NaN.
  if (x >= kMaxSetting) return kMaxSetting;
  return static_cast<int>(std::ceil(x - 1e-9));
}

const char* knob_name(int which) {
  static const char* const names[] = {"cpu threads", "io threads", "prefetch"};
  return names[which];
}

}  // namespace

void AutotuneController::Mean::add(double window_sum, double window_count, double decay, double min_count_for_jump) {
  if (window_count >= min_count_for_jump && count > 0) {
    const double mean = window_sum / window_count;
    const double smoothed = value();
    if (mean > 2 * smoothed || mean < smoothed / 2) {
      sum = window_sum;
      count = window_count;
      return;
    }
  }
  sum = sum * decay + window_sum;
  count = count * decay + window_count;
}

AutotuneController::AutotuneController(int64_t batch_size, AutotuneOptions options)
    : batch_size_(batch_size), options_(options) {
  auto check = [](bool ok, const char* name, const char* rule, double value) {
    check_config(ok, std::string("autotune option ") + name + " must be " + rule + ", got " + format_general(value));
  };
  check(batch_size >= 1, "batch_size", ">= 1", static_cast<double>(batch_size));
  check(options.stall_target > 0 && options.stall_target < 1, "stall_target", "in (0, 1)", options.stall_target);
  check(options.headroom >= 1, "headroom", ">= 1", options.headroom);
  check(options.shrink_band >= 1, "shrink_band", ">= 1", options.shrink_band);
  check(options.smoothing_seconds > 0, "smoothing_seconds", "> 0", options.smoothing_seconds);
  check(options.shrink_dwell_seconds >= 0, "shrink_dwell_seconds", ">= 0", options.shrink_dwell_seconds);
  check(options.lock_bound_shrink_dwell_seconds >= 0, "lock_bound_shrink_dwell_seconds", ">= 0",
        options.lock_bound_shrink_dwell_seconds);
  check(options.regret_seconds >= 0, "regret_seconds", ">= 0", options.regret_seconds);
  check(options.max_backoff_seconds >= 0, "max_backoff_seconds", ">= 0", options.max_backoff_seconds);
  check(options.max_gain >= 1, "max_gain", ">= 1", options.max_gain);
  check(options.first_window_seconds > 0, "first_window_seconds", "> 0", options.first_window_seconds);
  check(options.max_window_seconds >= options.first_window_seconds, "max_window_seconds", ">= first_window_seconds",
        options.max_window_seconds);
  check(options.max_io_threads >= 1, "max_io_threads", ">= 1", options.max_io_threads);
  // NaN fails every comparison above except the != ones; std::isfinite catches it.
  for (double v :
       {options.stall_target, options.headroom, options.shrink_band, options.smoothing_seconds,
        options.shrink_dwell_seconds, options.lock_bound_shrink_dwell_seconds, options.regret_seconds,
        options.max_backoff_seconds, options.max_gain, options.first_window_seconds, options.max_window_seconds}) {
    check_config(std::isfinite(v), "autotune options must be finite numbers");
  }
  for (Knob& knob : knobs_) knob.backoff = 4 * options.shrink_dwell_seconds;
  window_ = options.first_window_seconds;
}

AutotuneSettings AutotuneController::initial_settings(const AutotuneLimits& limits) const {
  const int64_t budget_batches = limits.batch_bytes > 0 ? limits.memory_budget_bytes / limits.batch_bytes : 1;
  AutotuneSettings s;
  // An epoch starts with the consumer waiting for its first batch: every
  // usable core decodes it (the first measured demand then shrinks the pool
  // to what the consumer needs).
  s.cpu_threads = std::max(1, limits.usable_cores);
  // Reads cost a blocked thread, not a core: a few in flight find the read
  // latency quickly; the first measured demand then sets the real number.
  // Reads that wait on a network start a whole batch's at once (up to 256
  // threads before anything is measured): 16 at a time made the first batch
  // of 64 wait four read latencies (0.4 s at 100 ms).
  constexpr int64_t kFirstReads = 16;
  constexpr int64_t kMostFirstRemoteReads = 256;
  const int64_t first =
      options_.network_reads ? std::clamp(batch_size_, kFirstReads, kMostFirstRemoteReads) : kFirstReads;
  s.io_threads = static_cast<int>(std::min<int64_t>(first, options_.max_io_threads));
  s.prefetch = static_cast<int>(std::clamp<int64_t>(budget_batches, 1, 2));
  return s;
}

void AutotuneController::begin_epoch() {
  warming_up_ = true;
  calm_seconds_ = 0;
  window_ = options_.first_window_seconds;
}

AutotuneEstimates AutotuneController::estimates() const {
  AutotuneEstimates e;
  if (step_.known()) {
    e.demand_per_second = step_.value() > 0 ? static_cast<double>(batch_size_) / step_.value() : kInf;
  }
  e.read_seconds = read_.value();
  e.process_seconds = process_.value();
  e.stall = stall_.value();
  e.spread_seconds = spread_.value();
  if (others_windows_ >= kOtherCoresWindows) {
    e.other_cores = std::max(0.0, others_.value());
    e.cores_left_to_others = cores_taken_;
  }
  return e;
}

void AutotuneController::validate(const AutotuneWindow& w) const {
  auto non_negative = [](double v, const char* name) {
    check_config(std::isfinite(v) && v >= 0,
                 std::string("autotune window: ") + name + " must be >= 0, got " + format_general(v));
  };
  check_config(std::isfinite(w.seconds) && w.seconds > 0,
               "autotune window: seconds must be > 0, got " + format_general(w.seconds));
  non_negative(static_cast<double>(w.consumer_steps), "consumer_steps");
  non_negative(w.consumer_step_seconds, "consumer_step_seconds");
  non_negative(static_cast<double>(w.batches_taken), "batches_taken");
  non_negative(w.wait_seconds, "wait_seconds");
  non_negative(static_cast<double>(w.reads_completed), "reads_completed");
  non_negative(w.read_seconds, "read_seconds");
  non_negative(w.read_p90_seconds, "read_p90_seconds");
  non_negative(static_cast<double>(w.samples_processed), "samples_processed");
  non_negative(w.process_seconds, "process_seconds");
  non_negative(w.process_p90_seconds, "process_p90_seconds");
  non_negative(static_cast<double>(w.batches_ready), "batches_ready");
  non_negative(w.whole_process_cpu_seconds, "whole_process_cpu_seconds");
  non_negative(w.loader_cpu_seconds, "loader_cpu_seconds");
  non_negative(w.consumer_run_delay_seconds, "consumer_run_delay_seconds");
  non_negative(w.read_lock_wait_seconds, "read_lock_wait_seconds");
  non_negative(w.read_queue_wait_seconds, "read_queue_wait_seconds");
  check_config(w.read_lock_wait_seconds <= w.read_seconds,
               "autotune window: read_lock_wait_seconds must be <= read_seconds, got " +
                   format_general(w.read_lock_wait_seconds) + " > " + format_general(w.read_seconds));
  auto at_least_one = [](int64_t v, const char* name) {
    check_config(v >= 1, std::string("autotune window: ") + name + " must be >= 1, got " + std::to_string(v));
  };
  at_least_one(w.current.cpu_threads, "cpu_threads");
  at_least_one(w.current.io_threads, "io_threads");
  at_least_one(w.current.prefetch, "prefetch");
  at_least_one(w.limits.usable_cores, "usable_cores");
  at_least_one(w.limits.batch_bytes, "batch_bytes");
  non_negative(static_cast<double>(w.limits.memory_budget_bytes), "memory_budget_bytes");
}

// What one update() works on: the window's model (the smoothed estimates
// and the limits derived from them), the settings as they change, and why.
struct AutotuneController::Step {
  const AutotuneWindow& w;
  double batch = 1;  // batch_size_ as a double.
  double stall = 0;  // This window's stall fraction.
  bool feedback_allowed = false;
  bool demand_known = false;
  bool first_batch = false;  // The demand is assumed (the epoch's first batch is awaited), not measured.
  double demand = 0;         // Samples per second the consumer asks for (inf: no time between next() calls).
  double read = 0;           // Smoothed read latency.
  double process = 0;        // Smoothed decode + transforms time.
  double jitter = 0;         // Smoothed latency spread.
  double lock_wait = 0;      // The part of `read` spent queueing for the GIL.
  bool reads_lock_bound = false;
  double queue_wait = 0;  // Each read's wait for a store's slot (not in `read`).
  bool reads_store_bound = false;
  bool tunable[3] = {false, false, false};
  int value[3] = {1, 1, 1};  // The settings as this update changes them.
  int limit[3] = {1, 1, 1};
  std::string cpu_limit_why;
  double prefetch_cap = 1;  // Prefetch as far as it may go: its limit, or the pinned value.
  double flow = 0;          // The rate to provision for: the demand, within what the limits can deliver.
  bool need_known[3] = {false, false, false};
  bool touched[3] = {false, false, false};
  std::vector<std::string> reasons;
  std::string note;  // Why nothing grew although the consumer waits.
};

AutotuneDecision AutotuneController::update(const AutotuneWindow& w) {
  validate(w);
  now_ += w.seconds;
  Step s{w};
  s.batch = static_cast<double>(batch_size_);
  smooth(s);
  model(s);
  apply_limits(s);
  const bool grew = feed_forward(s);
  feedback(s, grew);
  // Calm for a dwell time: the stall corrections relax towards pure Little's law.
  const AutotuneOptions& o = options_;
  if (calm_seconds_ >= o.shrink_dwell_seconds) {
    for (Knob& k : knobs_) k.gain = std::max(1.0, k.gain * std::exp(-w.seconds / (2 * o.shrink_dwell_seconds + 1e-9)));
  }

  AutotuneDecision d;
  d.settings = {s.value[kCpu], s.value[kIo], s.value[kPrefetch]};
  d.changed = !(d.settings == w.current);
  if (!s.reasons.empty()) {
    for (size_t i = 0; i < s.reasons.size(); ++i) d.reason += (i ? "; " : "") + s.reasons[i];
    last_reason_ = d.reason;
  } else {
    d.reason = s.note;
  }
  window_ = std::min(o.max_window_seconds, 2 * window_);
  d.next_window_seconds = window_;
  return d;
}

void AutotuneController::smooth(Step& s) {
  const AutotuneWindow& w = s.w;
  const AutotuneOptions& o = options_;
  const double decay = std::exp(-w.seconds / o.smoothing_seconds);
  step_.add(w.consumer_step_seconds, static_cast<double>(w.consumer_steps), decay, 2);
  // A step needs 4 reads in the window, or as many as can be in flight: with
  // one io thread and reads that jumped from 1 to 30 ms, a 100 ms window
  // completes 3, and waiting for 4 would leave the pool at one thread.
  read_.add(w.read_seconds, static_cast<double>(w.reads_completed), decay, std::min(4, w.current.io_threads));
  read_lock_wait_.add(w.read_lock_wait_seconds, static_cast<double>(w.reads_completed), decay,
                      std::min(4, w.current.io_threads));
  read_queue_wait_.add(w.read_queue_wait_seconds, static_cast<double>(w.reads_completed), decay,
                       std::min(4, w.current.io_threads));
  process_.add(w.process_seconds, static_cast<double>(w.samples_processed), decay, 4);
  stall_.add(w.wait_seconds, w.seconds, decay, kInf);
  double spread = 0;
  bool spread_measured = false;
  if (w.read_p90_seconds > 0 && w.reads_completed > 0) {
    spread += std::max(0.0, w.read_p90_seconds - w.read_seconds / static_cast<double>(w.reads_completed));
    spread_measured = true;
  }
  if (w.process_p90_seconds > 0 && w.samples_processed > 0) {
    spread += std::max(0.0, w.process_p90_seconds - w.process_seconds / static_cast<double>(w.samples_processed));
    spread_measured = true;
  }
  if (spread_measured) spread_.add(spread, 1, decay, kInf);

  s.stall = std::min(1.0, w.wait_seconds / w.seconds);
  // The window in which the epoch's first batch arrives still shows the fill.
  s.feedback_allowed = !warming_up_;
  if (w.batches_taken > 0) warming_up_ = false;
  // The rest of the process: the CPU time it used per second of window, plus
  // the time its consumer thread waited for a core (what it wanted and did
  // not get while loader threads time-shared its core). Not while the
  // epoch's first batch is awaited (the consumer is idle then, not by
  // choice). A window may come out slightly negative (a task's CPU time
  // counts when it ends, the process's as it runs): it averages out.
  if (s.feedback_allowed) {
    others_.add(w.whole_process_cpu_seconds - w.loader_cpu_seconds + w.consumer_run_delay_seconds, w.seconds, decay,
                kInf);
    if (w.consumer_steps > 0 && others_windows_ < kOtherCoresWindows) ++others_windows_;
  }
  if (s.stall <= o.stall_target / 4 && w.batches_ready >= 1) {
    calm_seconds_ += w.seconds;
  } else {
    calm_seconds_ = 0;
  }
}

void AutotuneController::model(Step& s) {
  const AutotuneWindow& w = s.w;
  const AutotuneOptions& o = options_;
  s.demand_known = step_.known();
  s.demand = !s.demand_known ? 0 : step_.value() > 0 ? s.batch / step_.value() : kInf;
  s.read = read_.value();
  s.process = process_.value();
  s.jitter = spread_.value();
  // Reads that mostly queue for a lock the rest of the process needs (the
  // GIL of a Python dataset): spare ones only lengthen that queue and take
  // the lock from the training loop, so they are shed after a short calm
  // (lock_bound_shrink_dwell_seconds). Their number is still sized on the
  // whole latency: a read waiting for the lock holds its thread, and when
  // the training loop, not the reads, holds the lock, fewer reads would
  // not wait less. When the reads queue behind each other, each shed
  // shortens the latency and the next one goes further.
  s.lock_wait = std::min(s.read, read_lock_wait_.value());
  s.reads_lock_bound = s.read > 0 && s.lock_wait >= kLockBoundShare * s.read;
  // Reads that wait for a slot under the store's limit (a modest server,
  // or S3 throttling with 503 SlowDown): the store admits no more, so more
  // io threads would only wait in its queue. Against a modest server the
  // stall and the first batch's slow connects grew them 64 -> 150.
  s.queue_wait = read_queue_wait_.value();
  s.reads_store_bound = s.queue_wait > 0 && s.queue_wait >= kStoreBoundShare * s.read;
  // Before any demand is measured, while the epoch's first batch is awaited,
  // the consumer wants data as fast as the limits allow: once a read and a
  // decode are measured, that flow sizes the reads in flight, so that the
  // first batches of slow reads (100 ms URLs) need a round or two, not one
  // round per 16 samples. Not for reads that queue for the GIL: more of
  // them only lengthen the queue.
  if (!s.demand_known && warming_up_ && read_.known() && process_.known() && !s.reads_lock_bound) {
    s.demand_known = true;
    s.demand = kInf;
    s.first_batch = true;
  }

  const AutotuneSettings& cur = w.current;
  s.tunable[kCpu] = o.tune_cpu_threads;
  s.tunable[kIo] = o.tune_io_threads;
  s.tunable[kPrefetch] = o.tune_prefetch;
  s.value[kCpu] = cur.cpu_threads;
  s.value[kIo] = cur.io_threads;
  s.value[kPrefetch] = cur.prefetch;
  const int64_t budget_batches = w.limits.memory_budget_bytes / w.limits.batch_bytes;
  // The cores the rest of the process uses are not the loader's: the cpu
  // threads get at most usable - others (rounded, with hysteresis), at least 1.
  if (others_windows_ >= kOtherCoresWindows) {
    const double others = std::clamp(others_.value(), 0.0, static_cast<double>(w.limits.usable_cores));
    if (std::abs(others - cores_taken_) > 0.5 + kCoresHysteresis) cores_taken_ = static_cast<int>(std::lround(others));
  }
  s.limit[kCpu] = std::clamp(w.limits.usable_cores - cores_taken_, 1, w.limits.usable_cores);
  s.cpu_limit_why =
      "usable cores " + std::to_string(w.limits.usable_cores) +
      (cores_taken_ > 0 ? " - " + format_fixed(std::max(0.0, others_.value()), 2) + " wanted by the rest of the process"
                        : std::string());
  s.limit[kPrefetch] = static_cast<int>(std::clamp<int64_t>(budget_batches, 1, kMaxSetting));
  // Reads need a slot of a batch buffer: more io threads than slots would idle.
  s.prefetch_cap = o.tune_prefetch ? s.limit[kPrefetch] : cur.prefetch;
  s.limit[kIo] = static_cast<int>(
      std::clamp<double>(std::min<double>(o.max_io_threads, s.prefetch_cap * s.batch), 1, kMaxSetting));

  // The flow to provision for: the demand, but never more than the pipeline
  // could deliver at its limits (an insatiable consumer gets every core, and
  // only the reads and buffers those cores can use).
  s.flow = s.demand;
  if (s.process > 0) s.flow = std::min(s.flow, (o.tune_cpu_threads ? s.limit[kCpu] : cur.cpu_threads) / s.process);
  if (s.read > 0) s.flow = std::min(s.flow, (o.tune_io_threads ? s.limit[kIo] : cur.io_threads) / s.read);
  if (s.read + s.process > 0) s.flow = std::min(s.flow, s.prefetch_cap * s.batch / (s.read + s.process));
  s.need_known[kCpu] = s.demand_known && process_.known();
  s.need_known[kIo] = s.demand_known && read_.known();
  s.need_known[kPrefetch] = s.demand_known;
}

double AutotuneController::need(const Step& s, int which) const {
  // Little's law: busy servers = arrival rate x service time.
  switch (which) {
    case kCpu:
      return s.flow * s.process;
    case kIo:
      return s.flow * s.read;
    default:
      return s.flow * (s.read + s.process) / s.batch;  // Batches in flight.
  }
}

int AutotuneController::target(const Step& s, int which, double factor) const {
  if (std::isinf(s.flow)) {
    // Nothing takes time (yet): every thread, and a slot for each plus a reserve.
    if (which != kPrefetch) return s.limit[which];
    return std::clamp(ceil_setting((s.value[kCpu] + s.value[kIo]) / s.batch) + 2, 1, s.limit[which]);
  }
  int t = ceil_setting(need(s, which) * factor * knobs_[which].gain);
  // Prefetch also holds the batch being consumed and a reserve against the
  // variability of production: enough for 2 x the latency spread of demand.
  if (which == kPrefetch) t = ceil_setting(t + 1.0 + std::ceil(2 * s.jitter * s.flow / s.batch - 1e-9));
  return std::clamp(t, 1, s.limit[which]);
}

std::string AutotuneController::explain(const Step& s, int which) const {
  const double n = need(s, which);
  switch (which) {
    case kCpu:
      return " (rate " + rate(s.flow) + " x process " + ms(s.process) + " = " + format_general(n, 2) + " threads)";
    case kIo:
      return " (rate " + rate(s.flow) + " x read " + ms(s.read) +
             (s.reads_lock_bound ? ", " + ms(s.lock_wait) + " of it queueing for the GIL," : std::string()) + " = " +
             format_general(n, 2) + " reads)";
    default:
      return " (rate " + rate(s.flow) + " x (read + process) " + ms(s.read + s.process) + " = " + format_general(n, 2) +
             " batches in flight; spread " + ms(s.jitter) + ")";
  }
}

void AutotuneController::set(Step& s, int which, int v, const std::string& why, const std::string& detail) {
  s.reasons.push_back(why + ": " + knob_name(which) + " " + std::to_string(s.value[which]) + " -> " +
                      std::to_string(v) + detail);
  s.value[which] = v;
  s.touched[which] = true;
  knobs_[which].last_change = now_;
}

void AutotuneController::apply_limits(Step& s) {
  // Always, at once.
  for (int i = 0; i < 3; ++i) {
    if (!s.tunable[i] || s.value[i] <= s.limit[i]) continue;
    std::string why;
    if (i == kCpu) {
      why = s.cpu_limit_why;
    } else if (i == kPrefetch) {
      why = "memory budget " + format_general(s.w.limits.memory_budget_bytes / 1048576.0, 3) + " MiB / " +
            format_general(s.w.limits.batch_bytes / 1048576.0, 3) + " MiB per batch";
    } else {
      why = "io limit " + std::to_string(s.limit[i]);
    }
    set(s, i, s.limit[i], why);
  }
}

bool AutotuneController::feed_forward(Step& s) {
  // Little's law with hysteresis: grow when below the target with
  // `headroom`, shrink when above the target with headroom x band; either
  // lands in the band's centre (headroom x sqrt(band)), so the next change
  // needs the need to move by sqrt(band).
  const AutotuneOptions& o = options_;
  const double centre = o.headroom * std::sqrt(o.shrink_band);
  bool grew = false;
  for (int i = 0; i < 3; ++i) {
    if (!s.tunable[i] || s.touched[i] || !s.need_known[i]) continue;
    Knob& k = knobs_[i];
    if (target(s, i, o.headroom) > s.value[i]) {
      if (i == kIo && s.reads_store_bound) continue;
      set(s, i, target(s, i, centre), s.first_batch ? "first batch" : "demand", explain(s, i));
      k.last_grow = now_;
      grew = true;
      continue;
    }
    // Lock-bound reads (see model()) go after a short calm, a quarter at a time.
    const bool shed = i == kIo && s.reads_lock_bound;
    const double shrink_dwell = shed ? o.lock_bound_shrink_dwell_seconds : o.shrink_dwell_seconds;
    if (calm_seconds_ < shrink_dwell || now_ - k.last_change < shrink_dwell) continue;
    if (target(s, i, o.headroom * o.shrink_band) >= s.value[i]) continue;  // Inside the dead band.
    int v = std::max(target(s, i, centre), shed ? (s.value[i] + 3) / 4 : (s.value[i] + 1) / 2);
    if (now_ < k.floor_until) v = std::max(v, k.floor);
    if (v >= s.value[i]) continue;
    k.before_shrink = s.value[i];
    k.last_shrink = now_;
    set(s, i, v, "idle", explain(s, i));
  }
  return grew;
}

void AutotuneController::feedback(Step& s, bool grew) {
  // The consumer waits although the model says it should not.
  const AutotuneOptions& o = options_;
  double last_grow = -kInf;
  for (const Knob& k : knobs_) last_grow = std::max(last_grow, k.last_grow);
  // Wait for the effect of the last growth: the pipeline must refill (a few
  // service times and batch periods) before a stall says anything new.
  const double batch_period = s.demand_known && !std::isinf(s.demand) && s.demand > 0 ? s.batch / s.demand : 0;
  const double dwell = std::clamp(2 * (s.read + s.process) + 2 * batch_period, o.first_window_seconds,
                                  std::max(o.first_window_seconds, o.shrink_dwell_seconds));
  if (!s.feedback_allowed || !s.demand_known || grew || s.stall <= o.stall_target || now_ - last_grow < dwell) return;
  // The stage with the least capacity is the bottleneck. Below the demand,
  // it alone explains the stall (at its limit, nothing else would help).
  // Within the headroom band, it is the most loaded stage: it queues. Above
  // the band, the stall comes from variability (bursts, a slow read holding
  // its batch back), which ready batches absorb, so prefetch goes first.
  // The model can be wrong, so the others follow, each at most up to
  // max_gain x its model target: growth from stall alone is bounded.
  double capacity[3];
  capacity[kCpu] = s.process > 0 ? std::min(s.value[kCpu], s.w.limits.usable_cores) / s.process : kInf;
  capacity[kIo] = s.read > 0 ? s.value[kIo] / s.read : kInf;
  capacity[kPrefetch] = s.read + s.process > 0 ? s.value[kPrefetch] * s.batch / (s.read + s.process) : kInf;
  std::vector<int> order = {kPrefetch, kCpu, kIo};
  std::stable_sort(order.begin(), order.end(), [&](int a, int b) { return capacity[a] < capacity[b]; });
  if (capacity[order[0]] < s.demand) {
    order.resize(1);
  } else if (capacity[order[0]] >= s.demand * o.headroom * o.shrink_band) {
    std::stable_partition(order.begin(), order.end(), [](int i) { return i == kPrefetch; });
  }
  const std::string why =
      "stall " + format_fixed(s.stall * 100, 1) + "% > " + format_general(o.stall_target * 100) + "%";
  if (order[0] == kIo && s.tunable[kIo] && s.reads_store_bound) {
    // The store is the bottleneck: nothing here would help.
    s.note = why + ": io threads held at " + std::to_string(s.value[kIo]) + ": the reads wait " + ms(s.queue_wait) +
             " each for the store's connections (read " + ms(s.read) + ")";
    return;
  }
  int chosen = -1;
  for (int i : order) {
    if (i == kIo && s.reads_store_bound) continue;
    if (s.tunable[i] && s.value[i] < s.limit[i] && knobs_[i].gain * 1.25 <= o.max_gain * (1 + 1e-9)) {
      chosen = i;
      break;
    }
  }
  if (chosen < 0) {
    const int b = order[0];
    const std::string knob = knob_name(b);
    s.note = !s.tunable[b] ? why + ": " + knob + " pinned at " + std::to_string(s.value[b])
             : s.value[b] >= s.limit[b]
                 ? why + ": " + knob + " at the limit " + std::to_string(s.limit[b]) +
                       (b == kCpu && cores_taken_ > 0 ? " (" + s.cpu_limit_why + ")" : std::string())
             : order.size() == 1 ? why + ": " + knob + " at " + format_general(o.max_gain) + " x its model target"
                                 : why + ": every setting at " + format_general(o.max_gain) + " x its model target";
    return;
  }
  Knob& k = knobs_[chosen];
  k.gain *= 1.25;
  const int v = std::min(s.limit[chosen], std::max(target(s, chosen, o.headroom), s.value[chosen] + 1));
  if (now_ - k.last_shrink <= o.regret_seconds && k.before_shrink > 0) {
    // The last shrink caused this: never below where it was, for a while
    // that doubles each time (a bounded number of such cycles).
    k.floor = k.before_shrink;
    k.floor_until = now_ + k.backoff;
    k.backoff = std::min(o.max_backoff_seconds, std::max(2 * k.backoff, o.shrink_dwell_seconds));
    k.before_shrink = 0;
  }
  set(s, chosen, v, why, explain(s, chosen));
  k.last_grow = now_;
}

// --- LoaderAutotune ----------------------------------------------------------------

namespace {

constexpr int64_t kNsPerSecond = 1000000000;
constexpr size_t kTraceLines = 256;

bool env_flag(const char* name) {
  const char* value = std::getenv(name);
  return value != nullptr && value[0] != '\0' && std::string(value) != "0";
}

AutotuneOptions with_pins(AutotuneOptions options, const AutotuneSettings& pinned) {
  options.tune_cpu_threads = pinned.cpu_threads == 0;
  options.tune_io_threads = pinned.io_threads == 0;
  options.tune_prefetch = pinned.prefetch == 0;
  return options;
}

}  // namespace

int64_t LoaderAutotune::prefetch_budget_bytes() const {
  // Two batches are the consumer's: a `for` loop's batch and, while next()
  // hands out the following one (and starts another), the previous one still
  // bound to the loop variable.
  // Subtracted one at a time: 2 x batch_bytes_ may not fit in int64_t.
  const int64_t rest = memory_budget_bytes_ - batch_bytes_;  // Both >= 0: cannot overflow.
  return rest <= batch_bytes_ ? 0 : rest - batch_bytes_;
}

LoaderAutotune::LoaderAutotune(int64_t batch_size, int64_t batch_bytes, int64_t memory_budget_bytes,
                               AutotuneSettings pinned, AutotuneOptions options, std::function<int()> usable_cores)
    : batch_bytes_(std::max<int64_t>(1, batch_bytes)),
      memory_budget_bytes_(std::max<int64_t>(0, memory_budget_bytes)),
      tune_{pinned.cpu_threads == 0, pinned.io_threads == 0, pinned.prefetch == 0},
      usable_cores_fn_(usable_cores ? std::move(usable_cores) : std::function<int()>(usable_cpu_count)),
      log_to_stderr_(env_flag("CONVEYOR_AUTOTUNE_LOG")),
      controller_(batch_size, with_pins(options, pinned)),
      measure_cpu_(thread_cpu_ns() >= 0 && process_cpu_ns() >= 0) {
  usable_cores_ = std::max(1, usable_cores_fn_());
  AutotuneLimits limits;
  limits.usable_cores = usable_cores_;
  limits.batch_bytes = batch_bytes_;
  limits.memory_budget_bytes = prefetch_budget_bytes();
  const AutotuneSettings initial = controller_.initial_settings(limits);
  chosen_.cpu_threads = tune_[0] ? initial.cpu_threads : pinned.cpu_threads;
  chosen_.io_threads = tune_[1] ? initial.io_threads : pinned.io_threads;
  chosen_.prefetch = tune_[2] ? initial.prefetch : pinned.prefetch;
}

void LoaderAutotune::begin_epoch(int64_t now_ns, const AutotuneCounters& start) {
  controller_.begin_epoch();
  epoch_started_ns_ = now_ns;
  window_start_ns_ = now_ns;
  window_start_ = start;
  window_start_process_cpu_ns_ = measure_cpu_ ? process_cpu_ns() : 0;
  window_end_ns_ = now_ns + static_cast<int64_t>(controller_.next_window_seconds() * 1e9);
}

std::optional<AutotuneSettings> LoaderAutotune::observe(int64_t now_ns, const AutotuneCounters& c,
                                                        const AutotuneSettings& current) {
  if (now_ns < window_end_ns_ || now_ns <= window_start_ns_) return std::nullopt;
  if (now_ns - usable_cores_read_ns_ >= kNsPerSecond) {
    // Affinity and quota can change while training (another job takes cores).
    usable_cores_ = std::max(1, usable_cores_fn_());
    usable_cores_read_ns_ = now_ns;
  }
  const AutotuneCounters& s = window_start_;
  AutotuneWindow w;
  w.seconds = static_cast<double>(now_ns - window_start_ns_) * 1e-9;
  w.consumer_steps = c.consumer_steps - s.consumer_steps;
  w.consumer_step_seconds = static_cast<double>(c.consumer_step_ns - s.consumer_step_ns) * 1e-9;
  w.batches_taken = c.batches_taken - s.batches_taken;
  // A wait can span windows only in part: never more than the window.
  w.wait_seconds = std::min(w.seconds, static_cast<double>(c.wait_ns - s.wait_ns) * 1e-9);
  w.reads_completed = c.reads - s.reads;
  w.read_seconds = static_cast<double>(c.read_ns - s.read_ns) * 1e-9;
  w.read_lock_wait_seconds = std::min(
      w.read_seconds, static_cast<double>(std::max<int64_t>(0, c.read_lock_wait_ns - s.read_lock_wait_ns)) * 1e-9);
  w.read_queue_wait_seconds =
      static_cast<double>(std::max<int64_t>(0, c.read_queue_wait_ns - s.read_queue_wait_ns)) * 1e-9;
  w.samples_processed = c.processed - s.processed;
  w.process_seconds = static_cast<double>(c.process_ns - s.process_ns) * 1e-9;
  w.read_p90_seconds = percentile_between(c.read_latency, s.read_latency, 0.9) * 1e-9;
  w.process_p90_seconds = percentile_between(c.process_latency, s.process_latency, 0.9) * 1e-9;
  w.batches_ready = c.batches_ready;
  if (measure_cpu_) {
    const int64_t process_cpu = process_cpu_ns();
    w.whole_process_cpu_seconds =
        static_cast<double>(std::max<int64_t>(0, process_cpu - window_start_process_cpu_ns_)) * 1e-9;
    w.loader_cpu_seconds = static_cast<double>(std::max<int64_t>(
                               0, (c.read_cpu_ns - s.read_cpu_ns) + (c.process_cpu_ns - s.process_cpu_ns))) *
                           1e-9;
    window_start_process_cpu_ns_ = process_cpu;
  }
  w.consumer_run_delay_seconds =
      static_cast<double>(std::max<int64_t>(0, c.consumer_run_delay_ns - s.consumer_run_delay_ns)) * 1e-9;
  w.current = current;
  w.limits.usable_cores = usable_cores_;
  w.limits.batch_bytes = batch_bytes_;
  w.limits.memory_budget_bytes = prefetch_budget_bytes();
  window_start_ = c;
  window_start_ns_ = now_ns;
  const AutotuneDecision d = controller_.update(w);
  window_end_ns_ = now_ns + static_cast<int64_t>(d.next_window_seconds * 1e9);
  chosen_ = d.settings;
  if (!d.changed) return std::nullopt;
  ++changes_;
  reason_ = d.reason;
  const AutotuneEstimates e = controller_.estimates();
  trace("conveyor autotune t=" + format_fixed(static_cast<double>(now_ns - epoch_started_ns_) * 1e-9, 3) +
        "s: threads " + std::to_string(d.settings.cpu_threads) + ", io_threads " +
        std::to_string(d.settings.io_threads) + ", prefetch " + std::to_string(d.settings.prefetch) + " (" + d.reason +
        "; demand " + rate(e.demand_per_second) + ", read " + ms(e.read_seconds) + ", process " +
        ms(e.process_seconds) + ", stall " + format_fixed(e.stall * 100, 1) + "%, other cores " +
        format_fixed(e.other_cores, 2) + ")");
  return d.settings;
}

void LoaderAutotune::note_set(const AutotuneSettings& settings, const std::string& reason) {
  chosen_ = settings;
  ++changes_;
  reason_ = reason;
  trace("conveyor autotune: threads " + std::to_string(settings.cpu_threads) + ", io_threads " +
        std::to_string(settings.io_threads) + ", prefetch " + std::to_string(settings.prefetch) + " (" + reason + ")");
}

AutotuneStatus LoaderAutotune::status() const {
  AutotuneStatus st;
  st.chosen = chosen_;
  st.tuned_cpu_threads = tune_[0];
  st.tuned_io_threads = tune_[1];
  st.tuned_prefetch = tune_[2];
  st.estimates = controller_.estimates();
  st.reason = reason_;
  st.changes = changes_;
  st.usable_cores = usable_cores_;
  st.memory_budget_bytes = memory_budget_bytes_;
  return st;
}

std::vector<std::string> LoaderAutotune::take_trace() {
  std::vector<std::string> lines(std::make_move_iterator(trace_.begin()), std::make_move_iterator(trace_.end()));
  trace_.clear();
  return lines;
}

void LoaderAutotune::trace(const std::string& line) {
  if (log_to_stderr_) std::fprintf(stderr, "%s\n", line.c_str());
  trace_.push_back(line);
  if (trace_.size() > kTraceLines) trace_.pop_front();
}

int64_t default_memory_budget_bytes() {
  constexpr int64_t kMiB = 1 << 20;
  int64_t available = -1;
  std::ifstream meminfo("/proc/meminfo");
  std::string line;
  while (std::getline(meminfo, line)) {
    if (line.rfind("MemAvailable:", 0) == 0) {
      const long long kib = std::strtoll(line.c_str() + 13, nullptr, 10);  // "MemAvailable:   123 kB"
      if (kib > 0) available = static_cast<int64_t>(kib) * 1024;
      break;
    }
  }
#if defined(_SC_AVPHYS_PAGES) && defined(_SC_PAGE_SIZE)
  if (available < 0) {
    const long pages = sysconf(_SC_AVPHYS_PAGES), page = sysconf(_SC_PAGE_SIZE);
    if (pages > 0 && page > 0) available = static_cast<int64_t>(pages) * static_cast<int64_t>(page);
  }
#endif
  if (available < 0) return 1024 * kMiB;
  return std::max<int64_t>(64 * kMiB, available / 4);
}

}  // namespace conveyor
