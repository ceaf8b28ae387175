#include "conveyor/pipeline/autotune.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <deque>
#include <limits>
#include <queue>
#include <string>
#include <tuple>
#include <vector>

#include "conveyor/core/error.h"

namespace conveyor {
namespace {

// --- a deterministic simulated pipeline ----------------------------------------
//
// A discrete-time model of the Loader (time in microseconds, steps of 100 us):
// up to `prefetch` batches are open at once and every slot of an open batch is
// queued for a read at once; `io_threads` reads run at a time, each taking the
// read latency; read samples queue for `cpu_threads` processors that share
// `physical_cores` (more threads than cores slow each one down); batches
// complete in order; the consumer takes one batch, works `consumer_step`, asks
// for the next and waits when it is not ready. Latencies and process times
// vary (uniform, +-50% and +-25%) from a fixed-seed generator: no real time,
// no threads, the same run every time.
//
// Optionally a lock shared by the reads and the consumer, granted first come
// first served (Python's GIL): after its storage latency a read queues for it
// and holds it `read_lock_hold`; each consumer step starts by queueing for it
// and holding it `consumer_lock_hold`, so reads queued ahead lengthen the
// step, as GIL-bound reads slow a training loop.

constexpr int64_t kStepUs = 100;
constexpr int64_t kBatchBytes = int64_t{1} << 20;

struct SimConfig {
  int64_t batch_size = 32;
  double read_latency = 0.005;    // Mean seconds per read.
  double process_time = 0.0008;   // Mean seconds per sample on a core of its own.
  double consumer_step = 0.010;   // Seconds the consumer works on each batch (its lock wait excluded).
  double read_lock_hold = 0;      // Seconds a read holds the shared lock; 0: reads do not take it.
  double consumer_lock_hold = 0;  // Seconds of each consumer step spent holding the lock.
  int physical_cores = 8;
  AutotuneLimits limits{8, int64_t{1} << 30, kBatchBytes};
  AutotuneOptions options;
};

class SimPipeline {
 public:
  explicit SimPipeline(SimConfig config)
      : config_(config),
        controller_(config.batch_size, config.options),
        settings_(controller_.initial_settings(config.limits)) {
    window_end_ = seconds_to_us(controller_.next_window_seconds());
  }

  void set_read_latency(double seconds) { config_.read_latency = seconds; }
  void set_consumer_step(double seconds) { config_.consumer_step = seconds; }
  void set_usable_cores(int cores) { config_.limits.usable_cores = cores; }
  void set_settings(AutotuneSettings settings) { settings_ = settings; }

  /// Runs the simulation up to `seconds` of simulated time.
  void run_until(double seconds) {
    const int64_t end = seconds_to_us(seconds);
    while (now_ < end) step();
  }

  double now() const { return static_cast<double>(now_) / 1e6; }
  double total_wait() const { return static_cast<double>(total_wait_us_) / 1e6; }
  int64_t consumed() const { return consumed_; }
  const AutotuneSettings& settings() const { return settings_; }
  const AutotuneController& controller() const { return controller_; }
  /// (time, settings, reason) of every change.
  const std::vector<std::tuple<double, AutotuneSettings, std::string>>& changes() const { return changes_; }
  int changes_after(double seconds) const {
    return static_cast<int>(
        std::count_if(changes_.begin(), changes_.end(), [&](const auto& c) { return std::get<0>(c) > seconds; }));
  }
  /// Largest values the controller ever chose.
  const AutotuneSettings& max_settings() const { return max_settings_; }
  /// Decisions that broke a limit (cores, memory budget, >= 1).
  int limit_violations() const { return limit_violations_; }

 private:
  struct Batch {
    int issued = 0;
    int done = 0;
  };
  struct Processing {
    int64_t batch;
    double remaining_us;
    int64_t started;
  };

  static int64_t seconds_to_us(double s) { return static_cast<int64_t>(s * 1e6 + 0.5); }

  // SplitMix64: a deterministic uniform in [0, 1).
  double uniform() {
    uint64_t z = (rng_ += 0x9E3779B97F4A7C15ULL);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
    z ^= z >> 31;
    return static_cast<double>(z >> 11) / 9007199254740992.0;
  }

  Batch& batch(int64_t index) { return batches_[static_cast<size_t>(index - front_)]; }

  void issue() {
    const auto b = static_cast<int>(config_.batch_size);
    for (;;) {
      int64_t target = -1;
      for (size_t i = 0; i < batches_.size(); ++i) {
        if (batches_[i].issued < b) {
          target = front_ + static_cast<int64_t>(i);
          break;
        }
      }
      if (target < 0) {
        if (static_cast<int>(batches_.size()) >= settings_.prefetch) return;
        batches_.emplace_back();
        target = front_ + static_cast<int64_t>(batches_.size()) - 1;
      }
      ++batch(target).issued;
      read_queue_.push_back(target);
    }
  }

  // Grants the shared lock to a request arriving at `at` for `hold` (both
  // us); returns when it is granted.
  double take_lock(double at, double hold) {
    const double granted = std::max(at, lock_free_at_);
    lock_free_at_ = granted + hold;
    return granted;
  }

  // Starts and completes reads; a zero-latency read completes at once. A
  // read that takes the lock queues for it when its storage latency is over
  // and completes when it releases it.
  void run_reads() {
    const double hold = config_.read_lock_hold * 1e6;
    for (;;) {
      while (static_cast<int>(reading_.size()) < settings_.io_threads && !read_queue_.empty()) {
        const int64_t latency = seconds_to_us(config_.read_latency * (0.5 + uniform()));
        reading_.push({static_cast<double>(now_ + latency), now_, read_queue_.front(), 0, hold <= 0});
        read_queue_.pop_front();
      }
      bool completed = false;
      while (!reading_.empty() && reading_.top().done_at <= static_cast<double>(now_)) {
        Read r = reading_.top();
        reading_.pop();
        if (!r.locked) {
          const double granted = take_lock(r.done_at, hold);
          r.lock_wait = granted - r.done_at;
          r.done_at = granted + hold;
          r.locked = true;
          reading_.push(r);
          continue;
        }
        read_latencies_.push_back((r.done_at - static_cast<double>(r.started)) / 1e6);
        window_.read_lock_wait_seconds += r.lock_wait / 1e6;
        cpu_queue_.push_back(r.batch);
        completed = true;
      }
      if (!completed) return;
    }
  }

  void run_processing() {
    while (static_cast<int>(processing_.size()) < settings_.cpu_threads && !cpu_queue_.empty()) {
      processing_.push_back({cpu_queue_.front(), config_.process_time * 1e6 * (0.75 + 0.5 * uniform()), now_});
      cpu_queue_.pop_front();
    }
    const double speed = std::min(1.0, config_.physical_cores / static_cast<double>(processing_.size()));
    for (size_t i = 0; i < processing_.size();) {
      Processing& p = processing_[i];
      p.remaining_us -= static_cast<double>(kStepUs) * speed;
      if (p.remaining_us > 0) {
        ++i;
        continue;
      }
      process_latencies_.push_back(static_cast<double>(now_ + kStepUs - p.started) / 1e6);
      ++batch(p.batch).done;
      processing_[i] = processing_.back();
      processing_.pop_back();
    }
  }

  void run_consumer() {
    if (consumer_busy_ && now_ < busy_until_) return;
    if (consumer_busy_) {  // Its step ends: it calls next().
      ++window_.consumer_steps;
      window_.consumer_step_seconds += static_cast<double>(busy_until_ - step_started_) / 1e6;
      consumer_busy_ = false;
    }
    if (!batches_.empty() && batches_.front().done == config_.batch_size) {
      batches_.pop_front();
      ++front_;
      ++window_.batches_taken;
      consumed_ += config_.batch_size;
      consumer_busy_ = true;
      step_started_ = now_;
      double lock_wait = 0;
      if (config_.consumer_lock_hold > 0) {
        lock_wait = take_lock(static_cast<double>(now_), config_.consumer_lock_hold * 1e6) - static_cast<double>(now_);
      }
      busy_until_ = now_ + seconds_to_us(config_.consumer_step) + static_cast<int64_t>(std::ceil(lock_wait));
      issue();
    } else {
      window_.wait_seconds += static_cast<double>(kStepUs) / 1e6;
      total_wait_us_ += kStepUs;
    }
  }

  static double p90(std::vector<double>& values) {
    if (values.empty()) return 0;
    auto nth = values.begin() + static_cast<std::ptrdiff_t>(values.size() * 9 / 10);
    std::nth_element(values.begin(), nth, values.end());
    return *nth;
  }

  void end_window() {
    AutotuneWindow& w = window_;
    w.seconds = static_cast<double>(now_ - window_start_) / 1e6;
    w.reads_completed = static_cast<int64_t>(read_latencies_.size());
    for (double l : read_latencies_) w.read_seconds += l;
    w.read_p90_seconds = p90(read_latencies_);
    w.samples_processed = static_cast<int64_t>(process_latencies_.size());
    for (double p : process_latencies_) w.process_seconds += p;
    w.process_p90_seconds = p90(process_latencies_);
    for (const Batch& b : batches_) {
      if (b.done < config_.batch_size) break;
      ++w.batches_ready;
    }
    w.current = settings_;
    w.limits = config_.limits;
    const AutotuneDecision d = controller_.update(w);
    const AutotuneSettings& s = d.settings;
    if (s.cpu_threads < 1 || s.io_threads < 1 || s.prefetch < 1 || s.cpu_threads > config_.limits.usable_cores ||
        s.prefetch * kBatchBytes > std::max(config_.limits.memory_budget_bytes, kBatchBytes)) {
      ++limit_violations_;
    }
    max_settings_.cpu_threads = std::max(max_settings_.cpu_threads, s.cpu_threads);
    max_settings_.io_threads = std::max(max_settings_.io_threads, s.io_threads);
    max_settings_.prefetch = std::max(max_settings_.prefetch, s.prefetch);
    if (d.changed) changes_.emplace_back(now(), s, d.reason);
    settings_ = s;
    window_ = {};
    read_latencies_.clear();
    process_latencies_.clear();
    window_start_ = now_;
    window_end_ = now_ + seconds_to_us(d.next_window_seconds);
  }

  void step() {
    issue();
    run_reads();
    run_processing();
    run_consumer();
    now_ += kStepUs;
    if (now_ >= window_end_) end_window();
  }

  struct Read {
    double done_at;   // us: storage done (not yet `locked`), else the read is done.
    int64_t started;  // us.
    int64_t batch;
    double lock_wait;  // us queued for the lock.
    bool locked;       // Past the lock (or needs none).
    bool operator>(const Read& other) const { return done_at > other.done_at; }
  };

  SimConfig config_;
  AutotuneController controller_;
  AutotuneSettings settings_;
  AutotuneSettings max_settings_;
  uint64_t rng_ = 12345;
  int64_t now_ = 0;
  int64_t window_start_ = 0;
  int64_t window_end_ = 0;
  AutotuneWindow window_;
  std::vector<double> read_latencies_;
  std::vector<double> process_latencies_;
  std::deque<Batch> batches_;
  int64_t front_ = 0;  // Index of batches_.front().
  std::deque<int64_t> read_queue_;
  std::priority_queue<Read, std::vector<Read>, std::greater<>> reading_;
  std::deque<int64_t> cpu_queue_;
  std::vector<Processing> processing_;
  bool consumer_busy_ = false;
  int64_t busy_until_ = 0;
  int64_t step_started_ = 0;
  double lock_free_at_ = 0;  // us.
  int64_t total_wait_us_ = 0;
  int64_t consumed_ = 0;
  std::vector<std::tuple<double, AutotuneSettings, std::string>> changes_;
  int limit_violations_ = 0;
};

// Stall and sample rate over [from, to] of simulated time.
struct Span {
  double stall;
  double rate;
};
Span run_span(SimPipeline& sim, double from, double to) {
  sim.run_until(from);
  const double wait = sim.total_wait();
  const int64_t consumed = sim.consumed();
  sim.run_until(to);
  const Span span{(sim.total_wait() - wait) / (to - from),
                  static_cast<double>(sim.consumed() - consumed) / (to - from)};
  return span;
}

std::string describe(const SimPipeline& sim) {
  std::string out;
  for (const auto& [t, s, reason] : sim.changes()) {
    out += std::to_string(t) + "s cpu " + std::to_string(s.cpu_threads) + " io " + std::to_string(s.io_threads) +
           " prefetch " + std::to_string(s.prefetch) + ": " + reason + "\n";
  }
  return out;
}

// --- convergence -------------------------------------------------------------------

class Convergence : public ::testing::TestWithParam<double> {};

TEST_P(Convergence, StallUnderTwoPercentAndReadsInFlightNearRateTimesLatency) {
  SimConfig config;
  config.read_latency = GetParam();
  SimPipeline sim(config);
  const Span span = run_span(sim, 1.0, 10.0);
  SCOPED_TRACE(describe(sim));
  EXPECT_LE(span.stall, 0.02);
  EXPECT_NEAR(span.rate, 3200, 3200 * 0.02);  // The consumer's full demand: 32 samples per 10 ms.
  const double reads = span.rate * GetParam();
  EXPECT_LE(sim.settings().io_threads, std::max(1.0, 2 * reads));
  EXPECT_GE(sim.settings().io_threads, reads / 2);
  // 3200/s x 0.85 ms = 2.7 busy threads; the dead band keeps anything from
  // ceil(2.7 x 1.25) = 4 to ceil(2.7 x 1.25 x 1.25) = 5.
  EXPECT_LE(sim.settings().cpu_threads, 5);
  EXPECT_EQ(sim.limit_violations(), 0);
}

INSTANTIATE_TEST_SUITE_P(ReadLatency, Convergence, ::testing::Values(0.0, 0.005, 0.050));

// --- adaptation --------------------------------------------------------------------

TEST(AutotuneSim, AdaptsWhenReadLatencyJumpsFrom1To30Ms) {
  SimConfig config;
  config.read_latency = 0.001;
  SimPipeline sim(config);
  EXPECT_LE(run_span(sim, 1.0, 5.0).stall, 0.02);
  const int io_before = sim.settings().io_threads;
  sim.set_read_latency(0.030);
  const Span after = run_span(sim, 7.0, 12.0);  // Back under 2% within 2 s of the jump.
  SCOPED_TRACE(describe(sim));
  EXPECT_LE(after.stall, 0.02);
  EXPECT_GT(sim.settings().io_threads, io_before);
  EXPECT_LE(sim.settings().io_threads, 2 * after.rate * 0.030);
  EXPECT_EQ(sim.limit_violations(), 0);
}

// Reads that take no storage time but queue for the GIL behind the training
// loop's Python (3 ms of each 10 ms step): their latency is nearly all lock
// wait, which more reads in flight would only lengthen. The 16 the epoch
// starts with are shed within a second, without a stall; reads as slow
// through storage alone keep them until the longer calm dwell.
TEST(AutotuneSim, ReadsQueueingForTheGilAreShedWithinASecond) {
  SimConfig config;
  config.read_latency = 0;
  config.read_lock_hold = 0.00003;
  config.consumer_lock_hold = 0.003;
  SimPipeline sim(config);
  const Span span = run_span(sim, 0.5, 1.0);
  EXPECT_LE(sim.settings().io_threads, 4) << describe(sim);
  EXPECT_LE(span.stall, 0.02);
  EXPECT_LE(run_span(sim, 1.0, 10.0).stall, 0.02);
  SCOPED_TRACE(describe(sim));
  EXPECT_LE(sim.settings().io_threads, 2);
  bool explained = false;
  for (const auto& change : sim.changes()) {
    explained = explained || std::get<2>(change).find("queueing for the GIL") != std::string::npos;
  }
  EXPECT_TRUE(explained);
  EXPECT_EQ(sim.limit_violations(), 0);

  SimConfig storage = config;  // As slow a read, all of it storage.
  storage.read_latency = sim.controller().estimates().read_seconds;
  storage.read_lock_hold = storage.consumer_lock_hold = 0;
  SimPipeline slow_storage(storage);
  slow_storage.run_until(0.9);
  EXPECT_EQ(slow_storage.settings().io_threads, 16) << describe(slow_storage);
}

// Reads with storage latency that then wait for the GIL while a
// Python-heavy training loop holds it (6 or 9 ms of each 10 ms step): their
// wait is the loop's, not each other's, so fewer reads would not wait less.
// Sized on the whole latency, they stay put: no stall, no shed-and-regrow
// cycles (sized without the wait, they cycled every few seconds, or stalled
// 6 %).
TEST(AutotuneSim, ReadsWaitingBehindAGilHeavyLoopAreNotShedIntoAStall) {
  for (const double storage : {0.0005, 0.002, 0.005}) {
    for (const double hold : {0.006, 0.009}) {
      SimConfig config;
      config.read_latency = storage;
      config.read_lock_hold = 0.00003;
      config.consumer_lock_hold = hold;
      SimPipeline sim(config);
      const Span span = run_span(sim, 1.0, 30.0);
      SCOPED_TRACE("storage " + std::to_string(storage) + " s, loop holds the lock " + std::to_string(hold) + " s\n" +
                   describe(sim));
      EXPECT_LE(span.stall, 0.02);
      EXPECT_LE(sim.changes_after(3.0), 2);
      EXPECT_EQ(sim.limit_violations(), 0);
    }
  }
}

TEST(AutotuneSim, AdaptsWhenTheConsumerGetsFaster) {
  SimConfig config;
  config.consumer_step = 0.020;
  SimPipeline sim(config);
  EXPECT_LE(run_span(sim, 1.0, 5.0).stall, 0.02);
  const int cpu_before = sim.settings().cpu_threads;
  sim.set_consumer_step(0.005);  // 6400 samples/s x 0.8 ms = 5.1 busy threads.
  const Span after = run_span(sim, 7.0, 12.0);
  SCOPED_TRACE(describe(sim));
  EXPECT_LE(after.stall, 0.02);
  EXPECT_NEAR(after.rate, 6400, 6400 * 0.02);
  EXPECT_GT(sim.settings().cpu_threads, cpu_before);
  EXPECT_LE(sim.settings().cpu_threads, 8);
}

TEST(AutotuneSim, FewerUsableCoresCapTheCpuThreadsAtOnce) {
  SimConfig config;
  config.consumer_step = 0.005;  // Wants ~6 cpu threads.
  SimPipeline sim(config);
  sim.run_until(5.0);
  ASSERT_GT(sim.settings().cpu_threads, 2);
  sim.set_usable_cores(2);
  sim.run_until(5.2);  // Two 100 ms windows.
  SCOPED_TRACE(describe(sim));
  EXPECT_EQ(sim.settings().cpu_threads, 2);
  EXPECT_EQ(sim.limit_violations(), 0);
  sim.run_until(20.0);
  EXPECT_EQ(sim.settings().cpu_threads, 2);
}

// --- frugality ------------------------------------------------------------------------

TEST(AutotuneSim, SlowConsumerSettlesOnFewerCpuThreadsThanCoresWithoutStalling) {
  SimConfig config;
  config.consumer_step = 0.200;  // 160 samples/s x 2 ms = 0.32 busy threads.
  config.process_time = 0.002;
  SimPipeline sim(config);
  sim.set_settings({8, 64, 4});  // Start from a DataLoader user's guess: every core.
  const Span span = run_span(sim, 1.0, 20.0);
  SCOPED_TRACE(describe(sim));
  EXPECT_LE(span.stall, 0.02);
  EXPECT_EQ(sim.settings().cpu_threads, 1);
  EXPECT_LE(sim.settings().io_threads, 2);
  EXPECT_LE(sim.settings().prefetch, 4);
}

// --- stability -----------------------------------------------------------------------

TEST(AutotuneSim, NoOscillationOverALongRun) {
  for (double latency : {0.0, 0.005, 0.050}) {
    SimConfig config;
    config.read_latency = latency;
    SimPipeline sim(config);
    const Span span = run_span(sim, 3.0, 120.0);
    SCOPED_TRACE("latency " + std::to_string(latency) + "\n" + describe(sim));
    EXPECT_LE(span.stall, 0.02);
    EXPECT_LE(sim.changes_after(3.0), 4);
  }
}

TEST(AutotuneSim, NoOscillationWhenTheDemandExceedsTheCores) {
  SimConfig config;
  config.consumer_step = 0.003;  // 10 667 samples/s x 0.8 ms = 9 threads > 8 cores: stalls for good.
  SimPipeline sim(config);
  const Span span = run_span(sim, 3.0, 120.0);
  SCOPED_TRACE(describe(sim));
  EXPECT_EQ(sim.settings().cpu_threads, 8);
  EXPECT_GT(span.stall, 0.02);
  EXPECT_LE(sim.changes_after(3.0), 4);
  EXPECT_EQ(sim.limit_violations(), 0);
}

// --- limits ---------------------------------------------------------------------------

TEST(AutotuneSim, MemoryBudgetCapsPrefetch) {
  SimConfig config;
  config.read_latency = 0.050;
  config.limits.memory_budget_bytes = 4 * kBatchBytes + kBatchBytes / 2;  // 4.5 batches.
  SimPipeline sim(config);
  sim.run_until(10.0);
  SCOPED_TRACE(describe(sim));
  EXPECT_EQ(sim.max_settings().prefetch, 4);
  EXPECT_LE(sim.max_settings().io_threads, 4 * 32);  // No more reads than buffer slots.
  EXPECT_EQ(sim.limit_violations(), 0);
}

// --- the controller alone -----------------------------------------------------------

AutotuneWindow window(double seconds, AutotuneSettings current, AutotuneLimits limits) {
  AutotuneWindow w;
  w.seconds = seconds;
  w.current = current;
  w.limits = limits;
  return w;
}

TEST(AutotuneController, WindowsStartShortAndDouble) {
  AutotuneController c(8);
  const AutotuneLimits limits{4, 1 << 30, 1024};
  EXPECT_DOUBLE_EQ(c.next_window_seconds(), 0.01);
  std::vector<double> windows;
  for (int i = 0; i < 6; ++i)
    windows.push_back(c.update(window(c.next_window_seconds(), {1, 1, 2}, limits)).next_window_seconds);
  EXPECT_EQ(windows, (std::vector<double>{0.02, 0.04, 0.08, 0.1, 0.1, 0.1}));
  c.begin_epoch();
  EXPECT_DOUBLE_EQ(c.next_window_seconds(), 0.01);
  EXPECT_DOUBLE_EQ(c.elapsed_seconds(), 0.01 + 0.02 + 0.04 + 0.08 + 0.1 + 0.1);
}

TEST(AutotuneController, InitialSettingsRespectTheBudget) {
  AutotuneController c(8);
  EXPECT_EQ(c.initial_settings({4, 1 << 30, 1024}), (AutotuneSettings{4, 16, 2}));  // Every core: the first batch.
  EXPECT_EQ(c.initial_settings({4, 100, 1024}), (AutotuneSettings{4, 16, 1}));      // Less than a batch: still 1.
}

TEST(AutotuneController, ReadsThatWaitOnANetworkStartWithABatchsReadsInFlight) {
  AutotuneOptions remote;
  remote.network_reads = true;
  const AutotuneLimits limits{2, 1 << 30, 1024};
  EXPECT_EQ(AutotuneController(64, remote).initial_settings(limits).io_threads, 64);
  EXPECT_EQ(AutotuneController(8, remote).initial_settings(limits).io_threads, 16);      // At least the local 16.
  EXPECT_EQ(AutotuneController(1024, remote).initial_settings(limits).io_threads, 256);  // Threads before any measure.
  remote.max_io_threads = 32;
  EXPECT_EQ(AutotuneController(64, remote).initial_settings(limits).io_threads, 32);
  EXPECT_EQ(AutotuneController(64).initial_settings(limits).io_threads, 16);  // Local reads.
}

TEST(AutotuneController, LittlesLawTargetsWithTheReason) {
  AutotuneController c(10);
  const AutotuneLimits limits{8, 1 << 30, 1024};
  AutotuneWindow w = window(0.1, {1, 1, 2}, limits);
  w.consumer_steps = 4;
  w.consumer_step_seconds = 0.1;  // 10 samples per 25 ms: 400/s.
  w.batches_taken = 4;
  w.reads_completed = 40;
  w.read_seconds = 40 * 0.010;  // 400/s x 10 ms = 4 reads -> 6 with headroom.
  w.read_p90_seconds = 0.020;   // Spread 10 ms: one batch of reserve.
  w.samples_processed = 40;
  w.process_seconds = 40 * 0.006;  // 400/s x 6 ms = 2.4 threads -> 4 with headroom.
  w.batches_ready = 1;
  const AutotuneDecision d = c.update(w);
  EXPECT_EQ(d.settings, (AutotuneSettings{4, 6, 3}));
  EXPECT_TRUE(d.changed);
  EXPECT_EQ(d.reason,
            "demand: cpu threads 1 -> 4 (rate 400/s x process 6 ms = 2.4 threads); "
            "demand: io threads 1 -> 6 (rate 400/s x read 10 ms = 4 reads); "
            "demand: prefetch 2 -> 3 (rate 400/s x (read + process) 16 ms = 0.64 batches in flight; spread 10 ms)");
  EXPECT_EQ(c.last_reason(), d.reason);
  EXPECT_DOUBLE_EQ(c.estimates().demand_per_second, 400);
  EXPECT_DOUBLE_EQ(c.estimates().read_seconds, 0.010);
  EXPECT_DOUBLE_EQ(c.estimates().process_seconds, 0.006);

  // The same window again: inside the dead band, nothing changes.
  w.current = d.settings;
  const AutotuneDecision again = c.update(w);
  EXPECT_FALSE(again.changed);
  EXPECT_EQ(again.reason, "");
  EXPECT_EQ(c.last_reason(), d.reason);
}

TEST(AutotuneController, StallGrowsTheBottleneck) {
  AutotuneController c(10);
  const AutotuneLimits limits{8, 1 << 30, 1024};
  AutotuneWindow w = window(0.1, {3, 3, 2}, limits);
  w.consumer_steps = 4;
  w.consumer_step_seconds = 0.1;
  w.batches_taken = 4;
  w.reads_completed = 40;
  w.read_seconds = 40 * 0.005;
  w.samples_processed = 40;
  w.process_seconds = 40 * 0.006;
  // Ends the warm-up (a batch was taken); the settings meet the targets with
  // headroom 1.25 (2.4 x 1.25 = 3 threads, 2 x 1.25 = 2.5 reads), so nothing changes.
  EXPECT_FALSE(c.update(w).changed);
  w.wait_seconds = 0.0072;
  const AutotuneDecision d = c.update(w);
  // Capacities: cpu 3 / 6 ms = 500/s, io 3 / 5 ms = 600/s, prefetch 20 / 11 ms
  // = 1818/s: the cpu threads grow, by one.
  EXPECT_EQ(d.settings, (AutotuneSettings{4, 3, 2}));
  EXPECT_EQ(d.reason, "stall 7.2% > 1%: cpu threads 3 -> 4 (rate 400/s x process 6 ms = 2.4 threads)");
}

// The model is wrong here: it says 2.8 threads, but the consumer stalls below
// 6 (say the process time is under-measured). Every shrink the model asks for
// is paid for at once and undone, and the next attempt waits twice as long:
// the number of such cycles grows like log(time), not like time.
TEST(AutotuneController, RegrettedShrinksBackOffExponentially) {
  AutotuneOptions options;
  options.tune_io_threads = false;
  options.tune_prefetch = false;
  AutotuneController c(10, options);
  const AutotuneLimits limits{8, 1 << 30, 1024};
  AutotuneSettings current{8, 1, 2};
  std::vector<double> shrinks;
  for (int i = 0; i < 1200; ++i) {  // 120 s of 100 ms windows.
    const bool stall = current.cpu_threads < 6;
    AutotuneWindow w = window(0.1, current, limits);
    w.consumer_steps = 4;
    w.consumer_step_seconds = 0.1;  // 400/s x 7 ms = 2.8 threads: 4 after a shrink, at 80% load.
    w.batches_taken = 4;
    w.samples_processed = 40;
    w.process_seconds = 40 * 0.007;
    w.batches_ready = stall ? 0 : 1;
    w.wait_seconds = stall ? 0.005 : 0;
    const AutotuneDecision d = c.update(w);
    if (d.settings.cpu_threads < current.cpu_threads) shrinks.push_back(c.elapsed_seconds());
    current = d.settings;
  }
  ASSERT_GE(shrinks.size(), 3u);
  EXPECT_LE(shrinks.size(), 6u);
  for (size_t i = 2; i < shrinks.size(); ++i) {
    EXPECT_GE(shrinks[i] - shrinks[i - 1], 1.9 * (shrinks[i - 1] - shrinks[i - 2]) - 2.5) << i;
  }
  EXPECT_GE(shrinks[1] - shrinks[0], 4);  // The first back-off: 4 x shrink_dwell.
}

// A stall the model cannot explain grows each setting at most to max_gain x
// its model target, then stops: no unbounded growth, no endless changes.
TEST(AutotuneController, UnexplainedStallGrowthIsBounded) {
  AutotuneController c(10);
  const AutotuneLimits limits{64, 1 << 30, 1024};
  AutotuneSettings current{4, 6, 3};
  double last_change = 0;
  int changes = 0;
  std::string reason;
  for (int i = 0; i < 1200; ++i) {
    AutotuneWindow w = window(0.1, current, limits);
    w.consumer_steps = 4;
    w.consumer_step_seconds = 0.1;
    w.batches_taken = 4;
    w.reads_completed = 40;
    w.read_seconds = 40 * 0.010;
    w.samples_processed = 40;
    w.process_seconds = 40 * 0.006;
    w.wait_seconds = 0.005;  // Whatever the settings.
    const AutotuneDecision d = c.update(w);
    if (d.changed) {
      ++changes;
      last_change = c.elapsed_seconds();
    }
    reason = d.reason;
    current = d.settings;
  }
  EXPECT_LE(changes, 3 * 7);  // 1.25^7 > 4.
  EXPECT_LT(last_change, 10);
  EXPECT_EQ(reason, "stall 5.0% > 1%: every setting at 4 x its model target");
  EXPECT_LE(current.cpu_threads, 2.4 * 1.25 * 4 + 1);
  EXPECT_LE(current.io_threads, 4 * 1.25 * 4 + 1);
}

TEST(AutotuneController, ALatencyJumpIsSeenThroughASingleReadThread) {
  // 400 samples/s with 1 ms reads: one io thread. The reads then take 30 ms:
  // a 100 ms window completes only 3, fewer than the 4 a step needs with
  // more threads; with one thread in flight they are enough, and the pool
  // grows in that window (400/s x 30 ms = 12 reads).
  AutotuneController c(10);
  const AutotuneLimits limits{2, 1 << 30, 1024};
  AutotuneSettings current{1, 1, 2};
  auto reads = [&](int64_t count, double latency) {
    AutotuneWindow w = window(0.1, current, limits);
    w.consumer_steps = w.batches_taken = 4;
    w.consumer_step_seconds = 0.1;
    w.reads_completed = w.samples_processed = count;
    w.read_seconds = static_cast<double>(count) * latency;
    w.process_seconds = static_cast<double>(count) * 0.0005;
    return w;
  };
  for (int i = 0; i < 30; ++i) current = c.update(reads(40, 0.001)).settings;
  ASSERT_EQ(current.io_threads, 1);
  const AutotuneDecision d = c.update(reads(3, 0.030));
  EXPECT_GE(d.settings.io_threads, 12);
  EXPECT_EQ(d.reason.rfind("demand: io threads 1 -> ", 0), 0u) << d.reason;
}

TEST(AutotuneController, BeforeTheFirstBatchMeasuredReadsSizeTheReadsInFlight) {
  // URLs at 100 ms, 0.5 ms of decode, 2 cores, batches of 64: the epoch's
  // first batch is awaited (no consumer step yet), so the flow is what the
  // cores allow, 4 000/s, and 4 000/s x 100 ms = 400 reads (x the band's
  // centre, 1.25 x sqrt(1.25)) are sent at once, not 16 a round.
  AutotuneController c(64);
  const AutotuneLimits limits{2, 1 << 30, 1024};
  auto first_reads = [&](double lock_wait) {
    AutotuneWindow w = window(0.1, c.initial_settings(limits), limits);
    w.wait_seconds = 0.1;
    w.reads_completed = w.samples_processed = 16;
    w.read_seconds = 16 * 0.1;
    w.read_lock_wait_seconds = 16 * lock_wait;
    w.process_seconds = 16 * 0.0005;
    return w;
  };
  const AutotuneDecision d = c.update(first_reads(0));
  EXPECT_EQ(d.settings, (AutotuneSettings{2, 560, 10}));
  EXPECT_EQ(
      d.reason,
      "first batch: io threads 16 -> 560 (rate 4000/s x read 100 ms = 4e+02 reads); "
      "first batch: prefetch 2 -> 10 (rate 4000/s x (read + process) 100 ms = 6.3 batches in flight; spread 0 ms)");

  // Reads that queue for the GIL (a Python dataset): more would only
  // lengthen the queue, so nothing grows before a demand is measured.
  AutotuneController gil(64);
  EXPECT_FALSE(gil.update(first_reads(0.09)).changed);
}

// A modest server, or S3 throttling: the store keeps the reads beyond its
// limit waiting for a connection, so more io threads would only wait longer.
TEST(AutotuneController, ReadsThatWaitForTheStoresConnectionsDoNotGrowTheIoThreads) {
  const AutotuneLimits limits{8, 1 << 30, 1024};
  // 400 samples/s wanted, reads of 10 ms: 4 reads in flight needed, 3 there.
  auto reads = [&](double queue_wait, double stall) {
    AutotuneWindow w = window(0.1, {3, 3, 2}, limits);
    w.consumer_steps = 4;
    w.consumer_step_seconds = 0.1;
    w.batches_taken = 4;
    w.reads_completed = w.samples_processed = 40;
    w.read_seconds = 40 * 0.010;
    w.read_queue_wait_seconds = 40 * queue_wait;
    w.process_seconds = 40 * 0.001;
    w.wait_seconds = stall * 0.1;
    return w;
  };
  AutotuneController free_store(10);
  EXPECT_EQ(free_store.update(reads(0, 0)).reason, "demand: io threads 3 -> 6 (rate 400/s x read 10 ms = 4 reads)");

  AutotuneController busy_store(10);
  EXPECT_FALSE(busy_store.update(reads(0.020, 0)).changed);
  const AutotuneDecision d = busy_store.update(reads(0.020, 0.5));
  EXPECT_FALSE(d.changed);
  EXPECT_EQ(
      d.reason,
      "stall 50.0% > 1%: io threads held at 3: the reads wait 20 ms each for the store's connections (read 10 ms)");

  // Before the epoch's first batch too (the slow connects of an overloaded
  // server grew them from 64 to ~150).
  AutotuneController first(64);
  AutotuneWindow w = window(0.1, first.initial_settings(limits), limits);
  w.wait_seconds = 0.1;
  w.reads_completed = w.samples_processed = 16;
  w.read_seconds = 16 * 0.1;
  w.read_queue_wait_seconds = 16 * 0.2;
  w.process_seconds = 16 * 0.0005;
  EXPECT_EQ(first.update(w).settings.io_threads, first.initial_settings(limits).io_threads);
}

TEST(AutotuneController, StallAtEveryLimitSaysSo) {
  AutotuneOptions options;
  options.tune_io_threads = false;
  options.tune_prefetch = false;
  AutotuneController c(10, options);
  const AutotuneLimits limits{2, 1 << 30, 1024};
  AutotuneWindow w = window(0.1, {2, 5, 3}, limits);
  w.consumer_steps = 4;
  w.consumer_step_seconds = 0.1;
  w.batches_taken = 4;
  w.samples_processed = 40;
  w.process_seconds = 40 * 0.006;
  c.update(w);
  w.wait_seconds = 0.05;
  const AutotuneDecision d = c.update(w);
  EXPECT_FALSE(d.changed);
  EXPECT_EQ(d.reason, "stall 50.0% > 1%: cpu threads at the limit 2");
}

// --- the rest of the process ---------------------------------------------------------

// A window of a consumer taking 400 samples/s (batch 10) that need
// `process` seconds of cpu each, while the rest of the process uses
// `others` cores (the loader's own CPU time is its processing).
AutotuneWindow busy_window(AutotuneSettings current, double process, double others) {
  AutotuneWindow w = window(0.1, current, {2, 1 << 30, 1024});
  w.consumer_steps = 4;
  w.consumer_step_seconds = 0.1;
  w.batches_taken = 4;
  w.samples_processed = 40;
  w.process_seconds = 40 * process;
  w.batches_ready = 1;
  w.loader_cpu_seconds = 40 * process;
  w.whole_process_cpu_seconds = w.loader_cpu_seconds + others * w.seconds;
  return w;
}

TEST(AutotuneController, CoresUsedByTheRestOfTheProcessAreNotTheLoaders) {
  // 400/s x 3 ms = 1.2 busy threads: Little's law wants 2 of the 2 cores,
  // but the model uses one of them.
  AutotuneController c(10);
  AutotuneSettings current{2, 1, 2};
  std::vector<AutotuneDecision> decisions;
  for (int i = 0; i < 4; ++i) {
    const AutotuneDecision d = c.update(busy_window(current, 0.003, 1.0));
    decisions.push_back(d);
    current = d.settings;
  }
  // The first window ends the epoch's warm-up; two more with consumer steps
  // make the estimate known: until then, a thread per core.
  for (int i = 0; i < 2; ++i) EXPECT_EQ(decisions[static_cast<size_t>(i)].settings.cpu_threads, 2) << i;
  EXPECT_EQ(decisions[2].settings.cpu_threads, 1);
  EXPECT_NE(decisions[2].reason.find("usable cores 2 - 1.00 wanted by the rest of the process: cpu threads 2 -> 1"),
            std::string::npos)
      << decisions[2].reason;
  EXPECT_EQ(decisions[3].settings.cpu_threads, 1);
  EXPECT_NEAR(c.estimates().other_cores, 1.0, 1e-9);
  EXPECT_EQ(c.estimates().cores_left_to_others, 1);

  // The consumer waits: the cpu threads are short, but the limit holds, and
  // the decision says why nothing grows.
  AutotuneWindow w = busy_window(current, 0.003, 1.0);
  w.wait_seconds = 0.05;
  const AutotuneDecision d = c.update(w);
  EXPECT_EQ(d.settings.cpu_threads, 1);
  EXPECT_EQ(d.reason,
            "stall 50.0% > 1%: cpu threads at the limit 1 (usable cores 2 - 1.00 wanted by the rest of the process)");
}

TEST(AutotuneController, TheTimeTheConsumerWaitsForACoreCountsAsWanted) {
  // A model step that needs a whole core gets only 0.6 of one while two
  // loader threads time-share it: by its CPU alone it looks like 0.6 core
  // (no core kept, the contention stays); the 0.4 s per second its thread
  // waited to run shows the core it wants.
  for (const double waited : {0.0, 0.4}) {
    AutotuneController c(10);
    AutotuneSettings current{2, 1, 2};
    for (int i = 0; i < 10; ++i) {
      AutotuneWindow w = busy_window(current, 0.00225, 0.6);  // 0.9 busy threads.
      w.consumer_run_delay_seconds = waited * w.seconds;
      current = c.update(w).settings;
    }
    SCOPED_TRACE("waited " + std::to_string(waited));
    EXPECT_NEAR(c.estimates().other_cores, 0.6 + waited, 1e-9);
    EXPECT_EQ(c.estimates().cores_left_to_others, waited > 0 ? 1 : 0);
    EXPECT_EQ(current.cpu_threads, waited > 0 ? 1 : 2);
  }
}

TEST(AutotuneController, NoiseInTheOtherCoresDoesNotFlipTheLimit) {
  // The rest of the process swings slowly (period 4 s, so the smoothed
  // estimate follows it): 0.85..1.15 cores keep one core for it, 0.3..0.7
  // none. Plain rounding would flip the second between 0 and 1 every 2 s.
  for (const double centre : {1.0, 0.5}) {
    const double amplitude = centre == 1.0 ? 0.15 : 0.2;
    AutotuneController c(10);
    AutotuneSettings current{2, 1, 2};
    int changes = 0;
    int kept = -1;
    for (int i = 0; i < 1000; ++i) {  // 100 s.
      const double others = centre + amplitude * std::sin(2 * 3.14159265358979 * i * 0.1 / 4);
      const AutotuneDecision d = c.update(busy_window(current, 0.00225, others));  // 0.9 busy threads.
      if (d.settings.cpu_threads != current.cpu_threads) ++changes;
      current = d.settings;
      if (i >= 10) {
        if (kept < 0) kept = c.estimates().cores_left_to_others;
        EXPECT_EQ(c.estimates().cores_left_to_others, kept) << "centre " << centre << " window " << i;
      }
    }
    SCOPED_TRACE("centre " + std::to_string(centre));
    EXPECT_EQ(kept, centre == 1.0 ? 1 : 0);
    EXPECT_EQ(changes, centre == 1.0 ? 1 : 0);  // 2 -> 1 once, or never.
    EXPECT_EQ(current.cpu_threads, centre == 1.0 ? 1 : 2);
  }
}

TEST(AutotuneController, TheLimitFollowsARealChangeOfTheOtherCores) {
  AutotuneController c(10);
  AutotuneSettings current{2, 1, 2};
  auto run = [&](double others, int windows) {
    for (int i = 0; i < windows; ++i) current = c.update(busy_window(current, 0.003, others)).settings;
  };
  run(1.0, 20);
  EXPECT_EQ(current.cpu_threads, 1);
  run(0.1, 20);  // The model stopped (e.g. evaluation on another device): the core is free again.
  EXPECT_EQ(c.estimates().cores_left_to_others, 0);
  EXPECT_EQ(current.cpu_threads, 2);  // Little's law grows it back at once.
  run(3.0, 20);                       // More than the usable cores: the loader still gets one.
  EXPECT_EQ(current.cpu_threads, 1);
}

TEST(AutotuneController, WithoutOtherCpuNothingChanges) {
  // The rest of the process idle (a consumer that sleeps, or waits on a GPU)
  // or CPU time not measured: the same decisions as before the rule.
  AutotuneController measured(10), unmeasured(10);
  AutotuneSettings a{1, 1, 2}, b{1, 1, 2};
  for (int i = 0; i < 200; ++i) {
    AutotuneWindow w = busy_window(a, 0.003 + 0.002 * (i / 50), 0.0);
    w.wait_seconds = i % 7 == 0 ? 0.02 : 0.0;
    AutotuneWindow v = w;
    v.current = b;
    v.whole_process_cpu_seconds = 0;
    v.loader_cpu_seconds = 0;
    const AutotuneDecision da = measured.update(w), db = unmeasured.update(v);
    ASSERT_EQ(da.settings, db.settings) << i;
    ASSERT_EQ(da.reason, db.reason) << i;
    a = da.settings;
    b = db.settings;
  }
  EXPECT_EQ(measured.estimates().other_cores, 0);
  EXPECT_EQ(measured.estimates().cores_left_to_others, 0);
}

TEST(AutotuneController, InsatiableConsumerGetsEveryCoreAndOnlyTheReadsTheyUse) {
  AutotuneController c(10);
  AutotuneWindow w = window(0.1, {1, 1, 2}, {4, 1 << 30, 1024});
  w.consumer_steps = 4;  // next() is called again at once: no demand limit.
  w.batches_taken = 4;
  w.reads_completed = 40;
  w.read_seconds = 40 * 0.010;
  w.samples_processed = 40;
  w.process_seconds = 40 * 0.006;
  const AutotuneDecision d = c.update(w);
  // The flow is what 4 cores deliver: 4 / 6 ms = 667/s; reads 667/s x 10 ms x 1.4.
  EXPECT_EQ(d.settings, (AutotuneSettings{4, 10, 3}));
  EXPECT_EQ(c.estimates().demand_per_second, std::numeric_limits<double>::infinity());
}

TEST(AutotuneController, PinnedSettingsAreLeftAlone) {
  AutotuneOptions options;
  options.tune_cpu_threads = false;
  options.tune_prefetch = false;
  AutotuneController c(10, options);
  AutotuneWindow w = window(0.1, {16, 1, 50}, {2, 4096, 1024});  // Above the cores and the budget: pinned.
  w.consumer_steps = 4;
  w.consumer_step_seconds = 0.1;
  w.batches_taken = 4;
  w.reads_completed = 40;
  w.read_seconds = 40 * 0.010;
  w.samples_processed = 40;
  w.process_seconds = 40 * 0.006;
  const AutotuneDecision d = c.update(w);
  EXPECT_EQ(d.settings, (AutotuneSettings{16, 6, 50}));  // io: 400/s x 10 ms x 1.4.
}

TEST(AutotuneController, InvalidOptionsNameTheOption) {
  AutotuneOptions options;
  options.headroom = 0.5;
  try {
    AutotuneController c(8, options);
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kConfig);
    EXPECT_STREQ(e.what(), "autotune option headroom must be >= 1, got 0.5");
  }
  try {
    AutotuneController c(0);
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_STREQ(e.what(), "autotune option batch_size must be >= 1, got 0");
  }
  options = {};
  options.lock_bound_shrink_dwell_seconds = -0.1;
  try {
    AutotuneController c(8, options);
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_STREQ(e.what(), "autotune option lock_bound_shrink_dwell_seconds must be >= 0, got -0.1");
  }
}

TEST(AutotuneController, InvalidWindowsNameTheField) {
  AutotuneController c(8);
  const AutotuneLimits limits{4, 1 << 30, 1024};
  auto message = [&](const AutotuneWindow& w) -> std::string {
    try {
      c.update(w);
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), ErrorKind::kConfig);
      return e.what();
    }
    return "no error";
  };
  EXPECT_EQ(message(window(0, {1, 1, 1}, limits)), "autotune window: seconds must be > 0, got 0");
  AutotuneWindow w = window(0.1, {1, 1, 1}, limits);
  w.read_seconds = -1;
  EXPECT_EQ(message(w), "autotune window: read_seconds must be >= 0, got -1");
  w.read_seconds = 0.002;
  w.read_lock_wait_seconds = 0.003;
  EXPECT_EQ(message(w), "autotune window: read_lock_wait_seconds must be <= read_seconds, got 0.003 > 0.002");
  w.read_lock_wait_seconds = -0.001;
  EXPECT_EQ(message(w), "autotune window: read_lock_wait_seconds must be >= 0, got -0.001");
  w.read_lock_wait_seconds = 0;
  w.read_seconds = 0;
  w.whole_process_cpu_seconds = -0.5;
  EXPECT_EQ(message(w), "autotune window: whole_process_cpu_seconds must be >= 0, got -0.5");
  EXPECT_EQ(message(window(0.1, {0, 1, 1}, limits)), "autotune window: cpu_threads must be >= 1, got 0");
  EXPECT_EQ(message(window(0.1, {1, 1, 1}, {0, 1, 1})), "autotune window: usable_cores must be >= 1, got 0");
  EXPECT_DOUBLE_EQ(c.elapsed_seconds(), 0);  // Rejected windows do not count.
}

}  // namespace
}  // namespace conveyor
