// The Loader with autotune: pools resized under load (by the controller and
// by set_parallelism from other threads) keep every batch bit-identical to a
// fixed-thread run; the controller's decisions respect the usable cores and
// the memory budget. No assertion on wall time: delays only make the
// pipeline's timing vary, and waits are event-based with generous limits.

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <optional>
#include <random>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include "conveyor/core/cpu_count.h"
#include "conveyor/core/cpu_time.h"
#include "conveyor/core/error.h"
#include "conveyor/pipeline/loader.h"

namespace conveyor {
namespace {

constexpr int kSampleBytes = 32;

// Sleeps up to `max_us` (uniform), or exactly `fixed_us` when set.
void delay(int fixed_us, int max_us) {
  if (fixed_us > 0) std::this_thread::sleep_for(std::chrono::microseconds(fixed_us));
  if (max_us <= 0) return;
  thread_local std::mt19937 gen(std::random_device{}());
  std::this_thread::sleep_for(std::chrono::microseconds(gen() % static_cast<unsigned>(max_us)));
}

// Sample i is the 8 bytes of i; a read takes `read_us` plus up to `jitter_us`.
class SleepySource : public Source {
 public:
  SleepySource(int64_t n, int read_us, int jitter_us) : n_(n), read_us_(read_us), jitter_us_(jitter_us) {}
  int64_t size() const override { return n_; }
  Record read(int64_t index) const override {
    delay(read_us_, jitter_us_);
    std::vector<uint8_t> bytes(8);
    std::memcpy(bytes.data(), &index, 8);
    return Record{Bytes::from_vector(std::move(bytes)), index % 7, key(index)};
  }
  std::string key(int64_t index) const override { return "sample-" + std::to_string(index); }

 private:
  int64_t n_;
  int read_us_, jitter_us_;
};

// The sample index, then bytes from the sample's random stream.
class RandomBytesTransform : public SampleTransform {
 public:
  explicit RandomBytesTransform(int jitter_us = 0) : jitter_us_(jitter_us) {}
  SampleSpec output_spec() const override { return {{kSampleBytes}, DType::kUInt8}; }
  void apply(std::span<const uint8_t> input, SampleRng& rng, void* out) const override {
    delay(0, jitter_us_);
    auto* bytes = static_cast<uint8_t*>(out);
    std::memcpy(bytes, input.data(), 8);
    for (int i = 8; i < kSampleBytes; i += 8) {
      const uint64_t r = rng.next_u64();
      std::memcpy(bytes + i, &r, 8);
    }
  }

 private:
  int jitter_us_;
};

// Windows of a millisecond or so and a short dwell: many decisions per test.
AutotuneOptions fast_autotune() {
  AutotuneOptions o;
  o.first_window_seconds = 0.001;
  o.max_window_seconds = 0.004;
  o.smoothing_seconds = 0.01;
  o.shrink_dwell_seconds = 0.02;
  o.regret_seconds = 0.05;
  return o;
}

LoaderOptions options(int threads, int io_threads, int prefetch) {
  LoaderOptions o;
  o.batch_size = 8;
  o.shuffle = true;
  o.seed = 99;
  o.threads = threads;
  o.io_threads = io_threads;
  o.prefetch = prefetch;
  o.autotune = fast_autotune();
  return o;
}

using Bytes2D = std::vector<std::vector<uint8_t>>;

// Every batch of `epoch` (images and labels, as bytes). `each` runs after
// each batch, with the batch released.
template <typename F>
Bytes2D run_epoch(Loader& loader, int64_t epoch, F each, int64_t start_position = 0, int64_t start_batch = 0) {
  Bytes2D out;
  loader.start_epoch(epoch, start_position, start_batch);
  for (;;) {
    NextResult next = loader.next();
    if (next.status == NextResult::Status::kEnd) break;
    const auto* data = static_cast<const uint8_t*>(next.batch->data());
    std::vector<uint8_t> bytes(data, data + next.batch->size() * kSampleBytes);
    for (int64_t label : next.batch->labels()) bytes.push_back(static_cast<uint8_t>(label));
    out.push_back(std::move(bytes));
    next.batch.reset();
    each();
  }
  return out;
}

Bytes2D run_epoch(Loader& loader, int64_t epoch) {
  return run_epoch(loader, epoch, [] {});
}

TEST(LoaderAutotuneTest, AutoIsTheDefault) {
  const LoaderOptions o;
  EXPECT_EQ(o.threads, kAuto);
  EXPECT_EQ(o.io_threads, kAuto);
  EXPECT_EQ(o.prefetch, kAuto);
  Loader loader(std::make_shared<SleepySource>(10, 0, 0), std::make_shared<RandomBytesTransform>(), o);
  const LoaderStats s = loader.stats();
  EXPECT_TRUE(s.threads_auto && s.io_threads_auto && s.prefetch_auto);
  // The controller's starting point: every usable core (the epoch's first
  // batch is always awaited), 16 reads, 2 batches.
  EXPECT_EQ(s.threads, usable_cpu_count());
  EXPECT_EQ(s.io_threads, 16);
  EXPECT_EQ(s.prefetch, 2);
  EXPECT_EQ(s.usable_cores, usable_cpu_count());
  EXPECT_GE(s.memory_budget, int64_t{64} << 20);
}

// A read that waits `queue_us` as if for a store's slot (HttpStore's
// per-host limit), and says so, then takes `read_us`.
class QueuedSource : public SleepySource {
 public:
  QueuedSource(int64_t n, int read_us, int queue_us) : SleepySource(n, read_us, 0), queue_us_(queue_us) {}
  Record read(int64_t index) const override {
    const int64_t started = steady_ns();
    std::this_thread::sleep_for(std::chrono::microseconds(queue_us_));
    add_thread_queue_wait_ns(steady_ns() - started);
    return SleepySource::read(index);
  }

 private:
  int queue_us_;
};

TEST(LoaderAutotuneTest, AReadsWaitForAStoresSlotIsQueueWaitNotReadTime) {
  Loader loader(std::make_shared<QueuedSource>(40, 0, 5000), std::make_shared<RandomBytesTransform>(),
                options(2, 4, 2));
  run_epoch(loader, 0);
  const LoaderStats s = loader.stats();
  EXPECT_EQ(s.samples_read, 40);
  EXPECT_GE(s.read_queue_wait_seconds, 40 * 0.005);
  // What autotune sizes reads in flight on: the reads' time outside the
  // queue (here microseconds each), not the waits.
  EXPECT_LT(s.read_seconds, s.read_queue_wait_seconds);
}

TEST(LoaderAutotuneTest, ReadsWaitingForAStoresConnectionsDoNotGrowTheIoThreads) {
  // Reads of 20 ms that the consumer always waits for: the io threads grow,
  // unless each read also waited 40 ms for a slot under the store's limit.
  auto io_threads_after_an_epoch = [](int queue_us) {
    Loader loader(std::make_shared<QueuedSource>(160, 20000, queue_us), std::make_shared<RandomBytesTransform>(),
                  options(2, kAuto, kAuto));
    run_epoch(loader, 0);
    return loader.stats().io_threads;
  };
  EXPECT_GT(io_threads_after_an_epoch(0), 16);
  EXPECT_EQ(io_threads_after_an_epoch(40000), 16);
}

TEST(LoaderAutotuneTest, ProcessesOfOneNodeShareItsCores) {
  LoaderOptions o;
  o.local_processes = 2;
  Loader shared(std::make_shared<SleepySource>(10, 0, 0), std::make_shared<RandomBytesTransform>(), o);
  const int cores = usable_cpu_count();
  EXPECT_EQ(shared.stats().usable_cores, std::max(1, cores / 2));
  EXPECT_EQ(shared.stats().threads, std::max(1, cores / 2));
  EXPECT_EQ(shared.stats().usable_cores_source,
            std::to_string(cores) + " usable CPUs (affinity, cgroup quota) shared by 2 processes on this node");
  o.local_processes = 1000;  // More processes than cores: one each.
  Loader crowded(std::make_shared<SleepySource>(10, 0, 0), std::make_shared<RandomBytesTransform>(), o);
  EXPECT_EQ(crowded.stats().usable_cores, 1);
  o.local_processes = 0;
  EXPECT_THROW(Loader(std::make_shared<SleepySource>(10, 0, 0), std::make_shared<RandomBytesTransform>(), o), Error);
}

TEST(LoaderAutotuneTest, AutoGivesTheSameBatchesAsFixedThreadsAndResumes) {
  auto source = std::make_shared<SleepySource>(203, 200, 300);
  auto transform = std::make_shared<RandomBytesTransform>(200);
  Loader fixed(source, transform, options(2, 3, 2));
  Loader autotuned(source, transform, options(kAuto, kAuto, kAuto));
  for (int epoch = 0; epoch < 2; ++epoch) EXPECT_EQ(run_epoch(autotuned, epoch), run_epoch(fixed, epoch));
  EXPECT_GT(autotuned.stats().autotune_changes, 0);
  // Resume at batch 10 of epoch 1 on both sides: the rest of the epoch.
  Bytes2D whole = run_epoch(fixed, 1);
  Bytes2D rest = run_epoch(
      autotuned, 1, [] {}, 80, 10);
  EXPECT_EQ(rest, Bytes2D(whole.begin() + 10, whole.end()));
}

TEST(LoaderAutotuneTest, ThousandsOfResizesFromAnotherThreadKeepEveryBatch) {
  auto source = std::make_shared<SleepySource>(400, 0, 100);
  auto transform = std::make_shared<RandomBytesTransform>(100);
  Loader fixed(source, transform, options(2, 2, 2));
  const Bytes2D expected = run_epoch(fixed, 3);
  Loader loader(source, transform, options(kAuto, kAuto, kAuto));
  std::atomic<bool> done{false};
  std::atomic<int> resizes{0};
  std::thread resizer([&] {
    std::mt19937 gen(7);
    while (!done) {
      loader.set_parallelism(1 + static_cast<int>(gen() % 6), 1 + static_cast<int>(gen() % 9),
                             1 + static_cast<int>(gen() % 4));
      ++resizes;
    }
  });
  for (int round = 0; round < 3 || resizes.load() < 2000; ++round) {
    ASSERT_LT(round, 1000);
    EXPECT_EQ(run_epoch(loader, 3), expected);
  }
  done = true;
  resizer.join();
}

TEST(LoaderAutotuneTest, ResizingDuringStopAndCloseNeitherRacesNorHangs) {
  auto source = std::make_shared<SleepySource>(1000, 0, 200);
  auto transform = std::make_shared<RandomBytesTransform>(100);
  Loader loader(source, transform, options(kAuto, kAuto, kAuto));
  std::atomic<bool> done{false};
  std::atomic<int> refused{0};
  std::vector<std::thread> resizers;
  for (int t = 0; t < 2; ++t) {
    resizers.emplace_back([&, t] {
      std::mt19937 gen(t);
      while (!done) {
        try {
          loader.set_parallelism(1 + static_cast<int>(gen() % 4), 1 + static_cast<int>(gen() % 8),
                                 1 + static_cast<int>(gen() % 3));
        } catch (const Error& e) {
          EXPECT_STREQ(e.what(), "the loader is closed");
          ++refused;
          std::this_thread::yield();
        }
      }
    });
  }
  for (int epoch = 0; epoch < 20; ++epoch) {
    loader.start_epoch(epoch);
    for (int b = 0; b < epoch % 4; ++b) ASSERT_EQ(loader.next().status, NextResult::Status::kBatch);
    loader.stop();  // Mid-epoch, while the pools resize.
  }
  loader.start_epoch(20);
  ASSERT_EQ(loader.next().status, NextResult::Status::kBatch);
  loader.close();  // Mid-epoch too.
  while (refused.load() < 10) std::this_thread::yield();
  done = true;
  for (auto& t : resizers) t.join();
  EXPECT_EQ(loader.stats().threads_running, 0);  // Not reported once closed.
}

TEST(LoaderAutotuneTest, PinnedSettingsAreLeftAlone) {
  Loader loader(std::make_shared<SleepySource>(300, 300, 0), std::make_shared<RandomBytesTransform>(),
                options(1, 2, kAuto));
  run_epoch(loader, 0, [&] {
    const LoaderStats s = loader.stats();
    EXPECT_EQ(s.threads, 1);
    EXPECT_EQ(s.io_threads, 2);
  });
  const LoaderStats s = loader.stats();
  EXPECT_FALSE(s.threads_auto);
  EXPECT_FALSE(s.io_threads_auto);
  EXPECT_TRUE(s.prefetch_auto);
}

TEST(LoaderAutotuneTest, InjectedReadLatencyGrowsTheReadsInFlight) {
  // 2 ms reads, a consumer that takes batches as fast as they come: reads in
  // flight must grow past the 16 of the start, and say why.
  Loader loader(std::make_shared<SleepySource>(4000, 2000, 0), std::make_shared<RandomBytesTransform>(),
                options(kAuto, kAuto, kAuto));
  int most = 0;
  loader.start_epoch(0);
  for (int b = 0; b < 500 && most <= 16; ++b) {
    ASSERT_EQ(loader.next().status, NextResult::Status::kBatch);
    most = std::max(most, loader.stats().io_threads);
  }
  EXPECT_GT(most, 16);
  bool explained = false;
  for (const std::string& line : loader.autotune_trace()) {
    EXPECT_EQ(line.rfind("conveyor autotune t=", 0), 0u) << line;
    if (line.find("io threads 16 -> ") != std::string::npos) explained = true;
  }
  EXPECT_TRUE(explained);
}

TEST(LoaderAutotuneTest, CpuThreadsNeverExceedTheUsableCores) {
  // A consumer that takes every batch at once, samples that take CPU time:
  // the controller wants every core, and no more.
  Loader loader(std::make_shared<SleepySource>(1500, 0, 0), std::make_shared<RandomBytesTransform>(300),
                options(kAuto, kAuto, kAuto));
  const int cores = usable_cpu_count();
  int most = 0;
  run_epoch(loader, 0, [&] {
    const LoaderStats s = loader.stats();
    EXPECT_LE(s.threads, cores);
    EXPECT_LE(s.threads_running, cores);
    most = std::max(most, s.threads);
  });
  EXPECT_EQ(loader.stats().usable_cores, cores);
  EXPECT_GE(most, 1);
}

// Spins until the process has used `ns` more CPU time (any thread's).
void burn_process_cpu(int64_t ns) {
  const int64_t start = process_cpu_ns();
  volatile uint64_t sink = 0;
  while (process_cpu_ns() - start < ns) {
    for (int i = 0; i < 1000; ++i) sink = sink + static_cast<uint64_t>(i);
  }
}

TEST(LoaderAutotuneTest, TheLoadersThreadsCpuTimeIsCounted) {
  if (thread_cpu_ns() < 0) GTEST_SKIP() << "no thread CPU clock on this platform";
  // Each sample's transform spins for 200 us of its thread's CPU time.
  class SpinningTransform : public RandomBytesTransform {
   public:
    void apply(std::span<const uint8_t> input, SampleRng& rng, void* out) const override {
      const int64_t start = thread_cpu_ns();
      volatile uint64_t sink = 0;
      while (thread_cpu_ns() - start < 200'000) sink = sink + 1;
      RandomBytesTransform::apply(input, rng, out);
    }
  };
  Loader loader(std::make_shared<SleepySource>(200, 0, 0), std::make_shared<SpinningTransform>(),
                options(kAuto, kAuto, kAuto));
  run_epoch(loader, 0);
  const LoaderStats s = loader.stats();
  EXPECT_EQ(s.samples_processed, 200);
  EXPECT_GE(s.process_cpu_seconds, 200 * 200e-6);
  EXPECT_LE(s.process_cpu_seconds, s.process_seconds + 1e-3);  // CPU time <= wall time of the same calls.
  EXPECT_GE(s.read_cpu_seconds, 0);
  EXPECT_LE(s.read_cpu_seconds, s.read_seconds + 1e-3);
}

TEST(LoaderAutotuneTest, TheSpreadOfReadTimesIsMeasured) {
  // Reads of 1 ms of which one in five takes 50 ms: the p90 runs far past
  // the mean. Before the Loader measured percentiles the spread stayed 0.
  class TailSource : public SleepySource {
   public:
    TailSource() : SleepySource(400, 0, 0) {}
    Record read(int64_t index) const override {
      std::this_thread::sleep_for(std::chrono::milliseconds(index % 5 == 0 ? 50 : 1));
      return SleepySource::read(index);
    }
  };
  // Four reads in flight, pinned: each window then completes reads in the
  // source's mix (about one slow in five). With io threads tuned, a loaded
  // machine (TSan beside a burner) had autotune put every read of the epoch
  // in flight at once: the fast ones finished in one window, the slow ones
  // in the next, and neither window had a spread.
  LoaderOptions o = options(kAuto, 4, kAuto);
  o.autotune = AutotuneOptions{};  // Windows of up to 100 ms: each sees slow reads.
  Loader loader(std::make_shared<TailSource>(), std::make_shared<RandomBytesTransform>(), o);
  // The largest value seen over the epoch: the last windows of an epoch may
  // see few slow reads (fewer reads are left).
  double spread = 0;
  run_epoch(loader, 0, [&] { spread = std::max(spread, loader.stats().latency_spread_seconds); });
  // A window's p90 is a slow read (50 ms or more: sleeps only run long) and
  // its mean about 11 ms. Far from 0.
  EXPECT_GT(spread, 0.005);
}

TEST(LoaderAutotuneTest, AnEpochsFirstWindowSeesOnlyItsOwnLatencies) {
  // The latency histograms count across epochs; an epoch's first window is
  // measured from their snapshot at its start, not from empty ones (which
  // once gave it the p90 of every earlier epoch).
  LatencyHistogram reads;
  for (int i = 0; i < 1000; ++i) reads.record(1'000'000'000);  // Earlier epochs: 1 s reads.
  AutotuneCounters start;
  start.read_latency = reads.snapshot();
  for (int i = 0; i < 100; ++i) reads.record(1'000'000);  // This epoch's window: 1 ms reads.
  LoaderAutotune autotune(8, 1024, int64_t{1} << 30, AutotuneSettings{0, 0, 0}, fast_autotune(), [] { return 2; });
  const int64_t now = 1'000'000'000;
  autotune.begin_epoch(now, start);
  AutotuneCounters end = start;
  end.read_latency = reads.snapshot();
  end.reads = 100;
  end.read_ns = 100 * 1'000'000;
  autotune.observe(autotune.window_end_ns(), end, autotune.initial_settings());
  EXPECT_LT(autotune.status().estimates.spread_seconds, 0.125e-3);  // The histogram's resolution of 1 ms.
}

TEST(LoaderAutotuneTest, TheReadsLockWaitIsCountedExactly) {
  // Read i waits 1000 + i ns and reports that wait as lock wait, as the
  // bindings do for the GIL (a wait reported but not spent could exceed the
  // read's time: it did, on a fast machine); what this thread reports
  // outside the reads is not the loader's.
  class LockedSource : public SleepySource {
   public:
    LockedSource() : SleepySource(200, 0, 0) {}
    Record read(int64_t index) const override {
      const int64_t start = steady_ns();
      while (steady_ns() - start < 1000 + index) {
      }
      add_thread_lock_wait_ns(1000 + index);
      return SleepySource::read(index);
    }
  };
  Loader loader(std::make_shared<LockedSource>(), std::make_shared<RandomBytesTransform>(), options(2, 3, 2));
  add_thread_lock_wait_ns(5'000'000);
  run_epoch(loader, 0);
  const LoaderStats s = loader.stats();
  EXPECT_EQ(s.samples_read, 200);
  EXPECT_NEAR(s.read_lock_wait_seconds, (200 * 1000 + 199 * 200 / 2) * 1e-9, 1e-15);
  EXPECT_LE(s.read_lock_wait_seconds, s.read_seconds);

  Loader native(std::make_shared<SleepySource>(50, 0, 0), std::make_shared<RandomBytesTransform>(), options(2, 3, 2));
  run_epoch(native, 0);
  EXPECT_EQ(native.stats().read_lock_wait_seconds, 0);
}

// 40 windows on a made-up clock beside a "model" (this thread): in each, it
// uses `used_percent` % of the window of CPU and its thread waited
// `waited_percent` % of it for a core (the counters' run delay), while the
// loader's counters show 32 us of CPU. No idle shrink can happen (no batch is
// ever ready). Returns the settings autotune chose.
AutotuneSettings run_beside_a_model(LoaderAutotune& autotune, int64_t used_percent, int64_t waited_percent) {
  AutotuneSettings current = autotune.initial_settings();
  AutotuneCounters counters;
  int64_t now = 1'000'000'000;
  autotune.begin_epoch(now);
  for (int i = 0; i < 40; ++i) {
    const int64_t end = autotune.window_end_ns();
    burn_process_cpu((end - now) * used_percent / 100);
    counters.consumer_run_delay_ns += (end - now) * waited_percent / 100;
    now = end;
    counters.consumer_steps += 2;
    counters.consumer_step_ns += 2 * 500'000;
    counters.batches_taken += 2;
    counters.processed += 16;
    counters.process_ns += 16 * 2'000;
    counters.process_cpu_ns += 16 * 2'000;
    if (std::optional<AutotuneSettings> settings = autotune.observe(now, counters, current)) current = *settings;
  }
  return current;
}

TEST(LoaderAutotuneTest, CoresTheRestOfTheProcessUsesAreLeftToIt) {
  if (thread_cpu_ns() < 0 || process_cpu_ns() < 0) GTEST_SKIP() << "no CPU-time clocks on this platform";
  // Two usable cores (injected), a model using 0.9 of one: the limit must
  // keep that core for it.
  LoaderAutotune autotune(8, 1024, int64_t{1} << 30, AutotuneSettings{0, 0, 0}, fast_autotune(), [] { return 2; });
  ASSERT_EQ(autotune.initial_settings().cpu_threads, 2);
  const AutotuneSettings chosen = run_beside_a_model(autotune, 90, 0);
  const AutotuneStatus status = autotune.status();
  EXPECT_GE(status.estimates.other_cores, 0.75);
  EXPECT_EQ(status.estimates.cores_left_to_others, 1);
  EXPECT_EQ(chosen.cpu_threads, 1);
  bool explained = false;
  for (const std::string& line : autotune.take_trace()) {
    explained = explained || line.find("wanted by the rest of the process: cpu threads 2 -> 1") != std::string::npos;
  }
  EXPECT_TRUE(explained);
}

TEST(LoaderAutotuneTest, TheConsumersWaitForACoreCountsForTheRestOfTheProcess) {
  if (thread_cpu_ns() < 0 || process_cpu_ns() < 0) GTEST_SKIP() << "no CPU-time clocks on this platform";
  // The model gets 0.5 of a core and its thread waited 0.45 of the time for
  // one: it wants 0.95 cores, and the limit keeps one for it.
  LoaderAutotune autotune(8, 1024, int64_t{1} << 30, AutotuneSettings{0, 0, 0}, fast_autotune(), [] { return 2; });
  const AutotuneSettings chosen = run_beside_a_model(autotune, 50, 45);
  const AutotuneStatus status = autotune.status();
  EXPECT_GE(status.estimates.other_cores, 0.9);
  EXPECT_EQ(status.estimates.cores_left_to_others, 1);
  EXPECT_EQ(chosen.cpu_threads, 1);
}

// True when a trace line says the cpu threads went from `from` to fewer, by
// one of the two rules that give cores back: "idle" (Little's law needs
// fewer) or the limit of the cores "wanted by the rest of the process".
bool gave_back_cpu_threads(const std::vector<std::string>& trace, int from) {
  for (const std::string& line : trace) {
    if (line.find("cpu threads " + std::to_string(from) + " -> ") == std::string::npos) continue;
    if (line.find("idle: ") != std::string::npos ||
        line.find("wanted by the rest of the process: ") != std::string::npos) {
      return true;
    }
  }
  return false;
}

TEST(LoaderAutotuneTest, ASlowConsumerSettlesOnFewerCpuThreadsThanCores) {
  // The property that holds whatever else runs on the machine: a consumer
  // that sleeps gets fewer cpu threads than cores. Which rule gives them back
  // depends on the machine: on a quiet one Little's law ("idle"); beside
  // another process, the consumer's thread waits for a core and that wait is
  // the rest of the process wanting it ("wanted by the rest of the process").
  // Each rule's own decision is checked on injected windows:
  // AutotuneSim.SlowConsumerSettlesOnFewerCpuThreadsThanCoresWithoutStalling and
  // AutotuneController.TheTimeTheConsumerWaitsForACoreCountsAsWanted.
  const int cores = usable_cpu_count();
  if (cores < 2) GTEST_SKIP() << "needs 2 usable cores";
  Loader loader(std::make_shared<SleepySource>(100000, 0, 0), std::make_shared<RandomBytesTransform>(),
                options(kAuto, kAuto, kAuto));
  loader.start_epoch(0);
  loader.set_parallelism(cores, 0, 0);  // Start from every core: autotune must give them back.
  for (int b = 0; b < 5000 && loader.stats().threads >= cores; ++b) {
    ASSERT_EQ(loader.next().status, NextResult::Status::kBatch);
    std::this_thread::sleep_for(std::chrono::milliseconds(2));  // The consumer's step.
  }
  EXPECT_LT(loader.stats().threads, cores);
  const std::vector<std::string> trace = loader.autotune_trace();
  EXPECT_TRUE(gave_back_cpu_threads(trace, cores)) << testing::PrintToString(trace);
}

TEST(LoaderAutotuneTest, TheBudgetKeepsTwoBatchesForTheConsumer) {
  // A `for` loop holds its batch and, while the next is handed out, the
  // previous one: a budget of 3 batches leaves room to prepare 1 (was 2).
  LoaderOptions o = options(kAuto, kAuto, kAuto);
  o.memory_budget = 3 * 8 * kSampleBytes;
  Loader loader(std::make_shared<SleepySource>(10, 0, 0), std::make_shared<RandomBytesTransform>(), o);
  EXPECT_EQ(loader.stats().prefetch, 1);
  o.memory_budget = 4 * 8 * kSampleBytes;
  Loader larger(std::make_shared<SleepySource>(10, 0, 0), std::make_shared<RandomBytesTransform>(), o);
  EXPECT_EQ(larger.stats().prefetch, 2);
}

TEST(LoaderAutotuneTest, TheMemoryBudgetBoundsPrefetchAndBuffers) {
  // Batches of 8 x 32 bytes; a budget of 4 batches: at most 2 prepared
  // while the consumer holds two. Slow reads make autotune want more.
  LoaderOptions o = options(kAuto, kAuto, kAuto);
  o.memory_budget = 4 * 8 * kSampleBytes;
  Loader loader(std::make_shared<SleepySource>(800, 1000, 1000), std::make_shared<RandomBytesTransform>(), o);
  run_epoch(loader, 0, [&] {
    const LoaderStats s = loader.stats();
    EXPECT_LE(s.prefetch, 2);
    EXPECT_LE(s.buffers_allocated, 4);
  });
  EXPECT_EQ(loader.stats().memory_budget, 4 * 8 * kSampleBytes);
}

TEST(LoaderAutotuneTest, AnExplicitBudgetMustHoldTheBatchesItNeeds) {
  auto make = [](int prefetch, int64_t budget) {
    LoaderOptions o = options(1, 1, prefetch);
    o.memory_budget = budget;
    Loader loader(std::make_shared<SleepySource>(10, 0, 0), std::make_shared<RandomBytesTransform>(), o);
  };
  try {
    make(kAuto, 300);
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kConfig);
    EXPECT_STREQ(e.what(),
                 "memory_budget 300 bytes cannot hold 2 batches of 256 bytes (one being prepared, one with the "
                 "consumer)");
  }
  try {
    make(4, 1024);
    FAIL();
  } catch (const Error& e) {
    EXPECT_STREQ(e.what(), "memory_budget 1024 bytes cannot hold 5 batches of 256 bytes (prefetch 4 + the consumer's)");
  }
  make(4, 1280);  // Fits.
  try {
    make(kAuto, -1);
    FAIL();
  } catch (const Error& e) {
    EXPECT_STREQ(e.what(), "memory_budget must be >= 0 (0: default), got -1");
  }
}

}  // namespace
}  // namespace conveyor
