#include "conveyor/pipeline/loader.h"

#include <dirent.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <functional>
#include <future>
#include <limits>
#include <map>
#include <mutex>
#include <new>
#include <numeric>
#include <random>
#include <set>
#include <thread>
#include <utility>

#include "conveyor/core/cancellation.h"
#include "conveyor/core/error.h"
#include "conveyor/io/remote.h"

namespace conveyor {
namespace {

using namespace std::chrono_literals;

constexpr int kSampleBytes = 32;

void random_delay(int max_us) {
  if (max_us <= 0) return;
  thread_local std::mt19937 gen(std::random_device{}());
  std::this_thread::sleep_for(std::chrono::microseconds(gen() % static_cast<unsigned>(max_us)));
}

// Sample i is the 8 bytes of i; reading it sleeps a random time.
class MemorySource : public Source {
 public:
  MemorySource(int64_t n, int read_delay_us = 0, std::set<int64_t> unreadable = {})
      : n_(n), read_delay_us_(read_delay_us), unreadable_(std::move(unreadable)) {}
  int64_t size() const override { return n_; }
  Record read(int64_t index) const override {
    random_delay(read_delay_us_);
    if (unreadable_.count(index)) throw Error(ErrorKind::kRead, "No such file or directory");
    std::vector<uint8_t> bytes(8);
    std::memcpy(bytes.data(), &index, 8);
    return Record{Bytes::from_vector(std::move(bytes)), index % 10, key(index)};
  }
  std::string key(int64_t index) const override { return "sample-" + std::to_string(index) + ".jpg"; }

 private:
  int64_t n_;
  int read_delay_us_;
  std::set<int64_t> unreadable_;
};

// Writes the sample index then random bytes from the sample's stream.
class IndexTransform : public SampleTransform {
 public:
  IndexTransform(int delay_us = 0, std::set<int64_t> corrupt = {}, std::atomic<int>* running = nullptr)
      : delay_us_(delay_us), corrupt_(std::move(corrupt)), running_(running) {}
  SampleSpec output_spec() const override { return {{kSampleBytes}, DType::kUInt8}; }
  void apply(std::span<const uint8_t> input, SampleRng& rng, void* out) const override {
    if (running_) ++*running_;
    random_delay(delay_us_);
    if (running_) --*running_;
    int64_t index;
    std::memcpy(&index, input.data(), 8);
    if (corrupt_.count(index)) throw Error(ErrorKind::kDecode, "corrupt JPEG data");
    auto* bytes = static_cast<uint8_t*>(out);
    std::memcpy(bytes, &index, 8);
    for (int i = 8; i < kSampleBytes; i += 8) {
      uint64_t r = rng.next_u64();
      std::memcpy(bytes + i, &r, 8);
    }
  }

 private:
  int delay_us_;
  std::set<int64_t> corrupt_;
  std::atomic<int>* running_;
};

struct Epoch {
  std::vector<std::vector<uint8_t>> batches;  // Raw bytes of each batch.
  std::vector<std::vector<int64_t>> labels;
  std::vector<int64_t> samples() const {
    std::vector<int64_t> out;
    for (const auto& b : batches) {
      for (size_t off = 0; off < b.size(); off += kSampleBytes) {
        int64_t index;
        std::memcpy(&index, b.data() + off, 8);
        out.push_back(index);
      }
    }
    return out;
  }
};

Epoch run_epoch(Loader& loader, int64_t epoch, int64_t start_position = 0) {
  Epoch result;
  loader.start_epoch(epoch, start_position);
  for (;;) {
    NextResult next = loader.next();
    if (next.status == NextResult::Status::kEnd) break;
    const Batch& b = *next.batch;
    const auto* data = static_cast<const uint8_t*>(b.data());
    result.batches.emplace_back(data, data + b.size() * kSampleBytes);
    result.labels.push_back(b.labels());
  }
  return result;
}

LoaderOptions options(int64_t batch_size, int threads, int io_threads, int prefetch) {
  LoaderOptions o;
  o.batch_size = batch_size;
  o.threads = threads;
  o.io_threads = io_threads;
  o.prefetch = prefetch;
  o.shuffle = true;
  o.seed = 1234;
  return o;
}

TEST(LoaderTest, DeliversEveryBatchInOrderDespiteRandomDelays) {
  Loader loader(std::make_shared<MemorySource>(103, 300), std::make_shared<IndexTransform>(300), options(8, 4, 8, 3));
  EXPECT_EQ(loader.num_batches(), 13);
  Epoch epoch = run_epoch(loader, 0);
  ASSERT_EQ(epoch.batches.size(), 13u);
  EXPECT_EQ(epoch.batches.back().size(), 7u * kSampleBytes);
  EXPECT_EQ(epoch.samples(), random_permutation(103, 1234, 0));
  for (size_t b = 0; b < epoch.batches.size(); ++b) {
    auto samples = epoch.samples();
    for (size_t i = 0; i < epoch.labels[b].size(); ++i) EXPECT_EQ(epoch.labels[b][i], samples[b * 8 + i] % 10);
  }
}

TEST(LoaderTest, OutputIsIdenticalForOneOrEightThreads) {
  Loader one(std::make_shared<MemorySource>(200), std::make_shared<IndexTransform>(), options(16, 1, 1, 1));
  Loader eight(std::make_shared<MemorySource>(200, 200), std::make_shared<IndexTransform>(200), options(16, 8, 32, 4));
  for (int64_t epoch : {0, 1}) {
    Epoch a = run_epoch(one, epoch), b = run_epoch(eight, epoch);
    EXPECT_EQ(a.batches, b.batches) << "epoch " << epoch;
    EXPECT_EQ(a.labels, b.labels);
  }
  EXPECT_NE(run_epoch(one, 0).batches, run_epoch(one, 1).batches);
}

TEST(LoaderTest, UnshuffledOrderAndDropLast) {
  LoaderOptions o = options(10, 2, 4, 2);
  o.shuffle = false;
  o.drop_last = true;
  Loader loader(std::make_shared<MemorySource>(25), std::make_shared<IndexTransform>(), o);
  EXPECT_EQ(loader.num_batches(), 2);
  EXPECT_EQ(loader.batches_after(0, 0), 2);
  EXPECT_EQ(loader.batches_after(5, 0), 2);  // 20 samples left: two full batches.
  EXPECT_EQ(loader.batches_after(6, 0), 1);
  EXPECT_EQ(loader.batches_after(25, 0), 0);
  EXPECT_THROW(loader.batches_after(26, 0), Error);
  Epoch epoch = run_epoch(loader, 0);
  std::vector<int64_t> expected(20);
  for (int i = 0; i < 20; ++i) expected[static_cast<size_t>(i)] = i;
  EXPECT_EQ(epoch.samples(), expected);
}

TEST(LoaderTest, BackpressureNeverAllocatesMoreThanPrefetchPlusHeld) {
  Loader loader(std::make_shared<MemorySource>(400), std::make_shared<IndexTransform>(), options(4, 4, 8, 3));
  loader.start_epoch(0);
  std::vector<std::shared_ptr<Batch>> held;
  for (int i = 0; i < 5; ++i) held.push_back(loader.next().batch);
  // The producer runs ahead as far as it is allowed to: wait (on a loaded
  // machine, however long that takes) until all `prefetch` batches are ready.
  const auto deadline = std::chrono::steady_clock::now() + 60s;
  while (loader.stats().batches_ready < 3 && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(1ms);
  }
  ASSERT_EQ(loader.stats().batches_ready, 3);
  std::this_thread::sleep_for(20ms);  // A producer ignoring backpressure would allocate more meanwhile.
  EXPECT_EQ(loader.stats().buffers_allocated, 5 + 3);
  held.clear();
  for (int i = 0; i < 50; ++i) ASSERT_EQ(loader.next().status, NextResult::Status::kBatch);
  std::this_thread::sleep_for(20ms);
  EXPECT_LE(loader.stats().buffers_allocated, 5 + 3);
}

// Records which thread read and which thread processed each sample.
struct ThreadLog {
  std::mutex mu;
  std::map<int64_t, std::thread::id> read_by, processed_by;
  std::vector<int64_t> processed;  // Sample indices in the order they were processed.
};

class LoggedSource : public MemorySource {
 public:
  LoggedSource(int64_t n, ThreadLog* log, std::chrono::microseconds delay, bool local = true,
               std::function<bool(int64_t)> cached = nullptr)
      : MemorySource(n), log_(log), delay_(delay), local_(local), cached_(std::move(cached)) {}
  bool local_reads() const override { return local_; }
  bool read_is_at_hand(int64_t index, ReadPlan* /*plan*/) const override { return cached_ && cached_(index); }
  Record read(int64_t index) const override {
    if (delay_.count() > 0) std::this_thread::sleep_for(delay_);
    std::lock_guard lock(log_->mu);
    log_->read_by[index] = std::this_thread::get_id();
    return MemorySource::read(index);
  }

 private:
  ThreadLog* log_;
  std::chrono::microseconds delay_;
  bool local_;
  std::function<bool(int64_t)> cached_;  // A remote source's samples a cache holds.
};

class LoggedTransform : public IndexTransform {
 public:
  LoggedTransform(ThreadLog* log, std::chrono::microseconds delay) : log_(log), delay_(delay) {}
  void apply(std::span<const uint8_t> input, SampleRng& rng, void* out) const override {
    if (delay_.count() > 0) std::this_thread::sleep_for(delay_);
    int64_t index;
    std::memcpy(&index, input.data(), 8);
    {
      std::lock_guard lock(log_->mu);
      log_->processed_by[index] = std::this_thread::get_id();
      log_->processed.push_back(index);
    }
    IndexTransform::apply(input, rng, out);
  }

 private:
  ThreadLog* log_;
  std::chrono::microseconds delay_;
};

TEST(LoaderTest, QuickReadsRunOnTheCpuThreadThatDecodesTheSample) {
  // Reads from memory against 2 ms of processing (a margin for sanitizers'
  // slow first reads: inline needs reads <= 1/8 of it): handing each record from
  // an io thread to a cpu thread would cost more than the read.
  ThreadLog log;
  Loader loader(std::make_shared<LoggedSource>(96, &log, 0us), std::make_shared<LoggedTransform>(&log, 2000us),
                options(8, 2, 16, 2));
  const Epoch epoch = run_epoch(loader, 0);
  ASSERT_EQ(epoch.samples().size(), 96u);
  ASSERT_EQ(log.read_by.size(), 96u);
  // Which reads the rule sends inline follows the measured times, so a read
  // that a loaded machine delays sends the next few to the io pool (TSan
  // beside a CPU burner did): the rule is checked exactly below; here, that
  // the reads it keeps inline run on the decoding thread.
  int inline_reads = 0;
  for (const auto& [sample, reader] : log.read_by) inline_reads += reader == log.processed_by.at(sample);
  EXPECT_GT(inline_reads, 0);
}

TEST(LoaderTest, ReadsAreQuickWhileUnmeasuredThenByTheirShareOfTheDecode) {
  EXPECT_TRUE(detail::reads_are_quick(0, 0, 0, 0));           // An epoch's start.
  EXPECT_TRUE(detail::reads_are_quick(5, 5'000'000, 0, 0));   // Decodes not measured yet.
  EXPECT_TRUE(detail::reads_are_quick(10, 500'000, 10, 0));   // 50 us reads: quick whatever the decode.
  EXPECT_FALSE(detail::reads_are_quick(10, 510'000, 10, 0));  // 51 us against nothing.
  // 300 us reads against 2 ms decodes: 1/6.7 of them, not quick; against 2.4 ms, 1/8: quick.
  EXPECT_FALSE(detail::reads_are_quick(10, 3'000'000, 10, 20'000'000));
  EXPECT_TRUE(detail::reads_are_quick(10, 3'000'000, 10, 24'000'000));
}

TEST(LoaderTest, ReadsThatMayWaitOnANetworkStayOnTheIoPool) {
  // Quick as they are, reads of a source that is not local (URLs, Python
  // code) may block on retries: never on a cpu thread.
  ThreadLog log;
  Loader loader(std::make_shared<LoggedSource>(96, &log, 0us, false), std::make_shared<LoggedTransform>(&log, 1000us),
                options(8, 2, 16, 2));
  ASSERT_EQ(run_epoch(loader, 0).samples().size(), 96u);
  for (const auto& [sample, reader] : log.read_by) EXPECT_NE(reader, log.processed_by.at(sample)) << sample;
}

// A MemorySource whose reads are started (Source::start_read) and answered
// by a thread of its own, as a store's event loop answers them: in a random
// order. The first attempt at a sample of `failing_once` fails (503), which
// read_after() then continues. With `answers` false, a read is answered
// only once its Cancellation is cancelled.
class StartedReadsSource final : public MemorySource {
 public:
  StartedReadsSource(int64_t n, std::set<int64_t> unreadable = {}, std::set<int64_t> failing_once = {},
                     bool answers = true)
      : MemorySource(n, 0, std::move(unreadable)), failing_once_(std::move(failing_once)), answers_(answers) {}
  ~StartedReadsSource() override {
    {
      std::lock_guard lock(mu_);
      stopping_ = true;
    }
    cv_.notify_all();
    thread_.join();
  }
  bool start_read(int64_t index, const Cancellation* cancellation, std::function<void(AsyncRead)> done) const override {
    std::lock_guard lock(mu_);
    pending_.push_back({index, cancellation, std::move(done)});
    ++started;
    most_in_flight = std::max(most_in_flight, static_cast<int>(pending_.size()) + continuing_);
    cv_.notify_all();
    return true;
  }
  bool starts_reads() const override { return true; }
  Record read_after(int64_t index, const RemoteAttempt& attempt) const override {
    ++continued;
    {
      // A read continued (its retries) still counts among those in flight.
      std::lock_guard lock(mu_);
      ++continuing_;
      most_in_flight = std::max(most_in_flight, static_cast<int>(pending_.size()) + continuing_);
    }
    std::this_thread::sleep_for(std::chrono::microseconds(continue_delay_us));
    {
      std::lock_guard lock(mu_);
      --continuing_;
    }
    EXPECT_TRUE(attempt.failure.has_value());
    if (attempt.failure && attempt.failure->kind == FetchFailure::Kind::kCancelled) {
      throw Error(ErrorKind::kCancelled, "the remote read was cancelled (the loader stopped)", key(index));
    }
    return read(index);
  }
  int in_flight() const {
    std::lock_guard lock(mu_);
    return static_cast<int>(pending_.size());
  }
  mutable int started = 0;         // Guarded by mu_ (read once the loader is done).
  mutable int most_in_flight = 0;  // Guarded by mu_: started and continued at once.
  int continue_delay_us = 0;       // How long read_after() takes.
  mutable std::atomic<int> continued{0};
  mutable std::atomic<int> answered{0};

 private:
  struct Pending {
    int64_t index;
    const Cancellation* cancellation;
    std::function<void(AsyncRead)> done;
  };
  void serve() {
    std::mt19937 random(7);
    std::unique_lock lock(mu_);
    while (true) {
      cv_.wait_for(lock, 1ms, [&] { return stopping_ || !pending_.empty(); });
      if (stopping_) return;
      if (pending_.empty()) continue;
      size_t pick = random() % pending_.size();
      if (!answers_) {
        const auto cancelled = std::find_if(pending_.begin(), pending_.end(), [](const Pending& p) {
          return p.cancellation != nullptr && p.cancellation->cancelled();
        });
        if (cancelled == pending_.end()) {
          // Nothing to answer yet: look again in a while, without the lock.
          lock.unlock();
          std::this_thread::sleep_for(1ms);
          lock.lock();
          continue;
        }
        pick = static_cast<size_t>(cancelled - pending_.begin());
      }
      Pending next = std::move(pending_[pick]);
      pending_.erase(pending_.begin() + static_cast<std::ptrdiff_t>(pick));
      const bool fails = !answers_ || failing_once_.erase(next.index) > 0 || unreadable(next.index);
      lock.unlock();
      AsyncRead end;
      if (fails) {
        end.attempt = std::make_shared<RemoteAttempt>();
        end.attempt->failure = answers_ ? FetchFailure{FetchFailure::Kind::kStatus, 503, "Service Unavailable"}
                                        : FetchFailure{FetchFailure::Kind::kCancelled, 0, "the loader stopped"};
      } else {
        end.record = read(next.index);
      }
      ++answered;
      next.done(std::move(end));  // May start the next read: without the lock.
      lock.lock();
    }
  }
  bool unreadable(int64_t index) const {
    try {
      read(index);
      return false;
    } catch (const Error&) {
      return true;
    }
  }

  mutable std::set<int64_t> failing_once_;  // Guarded by mu_.
  const bool answers_;
  mutable std::mutex mu_;
  mutable std::condition_variable cv_;
  mutable std::vector<Pending> pending_;
  mutable int continuing_ = 0;
  bool stopping_ = false;
  std::thread thread_{[this] { serve(); }};  // Last: started once the rest exists.
};

TEST(LoaderTest, StartedReadsAnsweredInAnyOrderGiveTheSameBatchesAtMostIoThreadsInFlight) {
  auto source = std::make_shared<StartedReadsSource>(103);
  {
    Loader loader(source, std::make_shared<IndexTransform>(), options(8, 2, 3, 3));
    const Epoch epoch = run_epoch(loader, 0);
    EXPECT_EQ(epoch.samples(), random_permutation(103, 1234, 0));
    for (size_t b = 0; b < epoch.batches.size(); ++b) {
      for (size_t i = 0; i < epoch.labels[b].size(); ++i) {
        EXPECT_EQ(epoch.labels[b][i], epoch.samples()[b * 8 + i] % 10);
      }
    }
    EXPECT_EQ(loader.stats().samples_read, 103);
  }
  EXPECT_EQ(source->started, 103);
  EXPECT_EQ(source->answered.load(), 103);
  EXPECT_EQ(source->continued.load(), 0);
  EXPECT_EQ(source->most_in_flight, 3);  // io_threads, and no more.
}

TEST(LoaderTest, AStartedReadThatFailedIsContinuedOnAnIoThreadAndItsErrorNamesTheSample) {
  LoaderOptions o = options(4, 2, 4, 2);
  o.shuffle = false;
  auto source = std::make_shared<StartedReadsSource>(40, std::set<int64_t>{}, std::set<int64_t>{5, 17});
  Loader loader(source, std::make_shared<IndexTransform>(), o);
  std::vector<int64_t> in_order(40);
  std::iota(in_order.begin(), in_order.end(), 0);
  EXPECT_EQ(run_epoch(loader, 0).samples(), in_order);
  EXPECT_EQ(source->continued.load(), 2);

  // Reads that go on after a failed attempt hold their place among the
  // io_threads in flight (their retries back off without more requests).
  std::set<int64_t> all;
  for (int64_t i = 0; i < 40; ++i) all.insert(i);
  auto every_one_fails = std::make_shared<StartedReadsSource>(40, std::set<int64_t>{}, all);
  every_one_fails->continue_delay_us = 2000;
  {
    Loader retrying(every_one_fails, std::make_shared<IndexTransform>(), o);
    EXPECT_EQ(run_epoch(retrying, 0).samples(), in_order);
  }
  EXPECT_EQ(every_one_fails->continued.load(), 40);
  EXPECT_LE(every_one_fails->most_in_flight, 4);

  Loader failing(std::make_shared<StartedReadsSource>(8, std::set<int64_t>{2}), std::make_shared<IndexTransform>(), o);
  failing.start_epoch(0);
  try {
    failing.next();
    FAIL() << "expected a read error";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kRead);
    EXPECT_STREQ(e.what(), "sample-2.jpg: No such file or directory");
  }
}

TEST(LoaderTest, SkippingAStartedReadsSampleGivesTheBatchesOfReadsOnTheIoPool) {
  // A skip shifts later positions to other slots: the reads waiting for
  // the old ones never start, and the batches are those of the io pool.
  LoaderOptions o = options(4, 2, 2, 3);
  o.on_error = OnError::kSkip;
  const std::set<int64_t> unreadable{3, 11, 12, 30};
  Loader on_the_io_pool(std::make_shared<MemorySource>(40, 0, unreadable), std::make_shared<IndexTransform>(), o);
  auto source = std::make_shared<StartedReadsSource>(40, unreadable);
  Loader started(source, std::make_shared<IndexTransform>(), o);
  const Epoch expected = run_epoch(on_the_io_pool, 0);
  EXPECT_EQ(expected.samples().size(), 36u);
  EXPECT_EQ(run_epoch(started, 0).samples(), expected.samples());
  EXPECT_EQ(started.skipped().size(), 4u);
}

TEST(LoaderTest, ReadsWaitingToStartFollowIoThreadsAsTheyChange) {
  auto source = std::make_shared<StartedReadsSource>(400);
  {
    LoaderOptions o = options(8, 2, 2, 8);
    Loader loader(source, std::make_shared<IndexTransform>(), o);
    loader.start_epoch(0);
    for (int i = 0; i < 10; ++i) ASSERT_EQ(loader.next().status, NextResult::Status::kBatch);
    loader.set_parallelism(0, 6, 0);
    int batches = 10;
    while (loader.next().status == NextResult::Status::kBatch) ++batches;
    EXPECT_EQ(batches, 50);
  }
  EXPECT_EQ(source->started, 400);
  EXPECT_EQ(source->most_in_flight, 6);
}

TEST(LoaderTest, StopEndsStartedReadsThatNeverAnswerAndThoseWaitingToStart) {
  auto source = std::make_shared<StartedReadsSource>(1000, std::set<int64_t>{}, std::set<int64_t>{}, false);
  {
    Loader loader(source, std::make_shared<IndexTransform>(), options(8, 2, 4, 4));
    loader.start_epoch(0);
    auto consumer = std::async(std::launch::async, [&] { return loader.next(); });
    // 4 started (io_threads), the rest of 4 batches waiting for room.
    const auto deadline = std::chrono::steady_clock::now() + 20s;
    while (source->in_flight() < 4 && std::chrono::steady_clock::now() < deadline) std::this_thread::sleep_for(1ms);
    ASSERT_EQ(source->in_flight(), 4);
    loader.stop();
    ASSERT_EQ(consumer.wait_for(5s), std::future_status::ready);
    EXPECT_EQ(consumer.get().status, NextResult::Status::kEnd);
    EXPECT_EQ(loader.stats().buffers_leased, 0);
    EXPECT_EQ(source->answered.load(), 4);
    loader.close();
  }
  EXPECT_EQ(source->started, 4);
  EXPECT_EQ(source->in_flight(), 0);
}

TEST(LoaderTest, ARemoteSampleACacheHoldsIsReadOnTheThreadThatDecodesIt) {
  // A URL whose object a cache folder holds reads a local file
  // (Source::read_is_at_hand): on the decoding thread, as a quick local read;
  // the others still wait on the io pool.
  ThreadLog log;
  auto source = std::make_shared<LoggedSource>(96, &log, 0us, false, [](int64_t i) { return i % 2 == 0; });
  Loader loader(source, std::make_shared<LoggedTransform>(&log, 1000us), options(8, 2, 16, 2));
  ASSERT_EQ(run_epoch(loader, 0).samples().size(), 96u);
  for (const auto& [sample, reader] : log.read_by) {
    EXPECT_EQ(reader == log.processed_by.at(sample), sample % 2 == 0) << sample;
  }
}

// A MemorySource that plans its reads: records each order it is given and
// counts the reads made under a plan.
class PlanningSource final : public MemorySource {
 public:
  using MemorySource::MemorySource;
  struct Plan final : ReadPlan {};
  std::shared_ptr<ReadPlan> plan_reads(std::span<const int64_t> order) const override {
    std::lock_guard lock(mu_);
    orders.emplace_back(order.begin(), order.end());
    return std::make_shared<Plan>();
  }
  Record read_planned(int64_t index, ReadPlan& plan) const override {
    EXPECT_NE(dynamic_cast<Plan*>(&plan), nullptr);
    ++planned_reads;
    return read(index);
  }
  mutable std::vector<std::vector<int64_t>> orders;
  mutable std::atomic<int64_t> planned_reads{0};

 private:
  mutable std::mutex mu_;
};

// A remote LoggedSource with a read plan whose even samples are in memory.
class ReadyPlanSource final : public LoggedSource {
 public:
  using LoggedSource::LoggedSource;
  struct Plan final : ReadPlan {};
  std::shared_ptr<ReadPlan> plan_reads(std::span<const int64_t> /*order*/) const override {
    return std::make_shared<Plan>();
  }
  Record read_planned(int64_t index, ReadPlan& /*plan*/) const override { return read(index); }
  bool read_is_at_hand(int64_t index, ReadPlan* plan) const override {
    EXPECT_NE(dynamic_cast<Plan*>(plan), nullptr);
    return index % 2 == 0;
  }
};

TEST(LoaderTest, ARemoteSampleItsReadPlanHoldsInMemoryIsReadOnTheThreadThatDecodesIt) {
  // A sample of a run read already (Source::read_is_at_hand) is a
  // slice of memory: read on the decoding thread, as a cached one; the
  // others still wait on the io pool.
  ThreadLog log;
  auto source = std::make_shared<ReadyPlanSource>(96, &log, 0us, false);
  Loader loader(source, std::make_shared<LoggedTransform>(&log, 1000us), options(8, 2, 16, 2));
  ASSERT_EQ(run_epoch(loader, 0).samples().size(), 96u);
  for (const auto& [sample, reader] : log.read_by) {
    EXPECT_EQ(reader == log.processed_by.at(sample), sample % 2 == 0) << sample;
  }
}

TEST(LoaderTest, EachEpochsReadsFollowTheSourcesPlanOfWhatTheEpochReads) {
  // The plan sees the positions the epoch reads, in order: a resumed epoch's
  // from its start position on; and every read goes through it.
  auto source = std::make_shared<PlanningSource>(40);
  LoaderOptions o = options(4, 2, 4, 2);
  Loader loader(source, std::make_shared<IndexTransform>(), o);
  const std::vector<int64_t> whole = run_epoch(loader, 3).samples();
  const std::vector<int64_t> resumed = run_epoch(loader, 3, 12).samples();
  ASSERT_EQ(source->orders.size(), 2u);
  EXPECT_EQ(source->orders[0], whole);
  EXPECT_EQ(source->orders[1], resumed);
  EXPECT_EQ(std::vector<int64_t>(whole.begin() + 12, whole.end()), resumed);
  EXPECT_EQ(source->planned_reads.load(), 40 + 28);
}

TEST(LoaderTest, OneCpuThreadProcessesSamplesInTheEpochsOrder) {
  // The first batch's samples come before the second's: reads done inline
  // keep the issue order, where io threads racing would shuffle it.
  ThreadLog log;
  LoaderOptions o = options(16, 1, 16, 3);
  o.shuffle = false;
  // 3 ms per sample: reads stay inline even when the first ones are slow
  // (a sanitizer's first calls), as they are quicker than 1/8 of that.
  Loader loader(std::make_shared<LoggedSource>(160, &log, 0us), std::make_shared<LoggedTransform>(&log, 3000us), o);
  ASSERT_EQ(run_epoch(loader, 0).samples().size(), 160u);
  std::vector<int64_t> ascending(160);
  std::iota(ascending.begin(), ascending.end(), int64_t{0});
  EXPECT_EQ(log.processed, ascending);
}

TEST(LoaderTest, SlowReadsGoToTheIoPool) {
  // 3 ms reads, quick processing: only the reads started before anything was
  // measured (at most one per cpu thread) run on a cpu thread.
  ThreadLog log;
  Loader loader(std::make_shared<LoggedSource>(64, &log, 3000us), std::make_shared<LoggedTransform>(&log, 0us),
                options(8, 2, 16, 2));
  ASSERT_EQ(run_epoch(loader, 0).samples().size(), 64u);
  int inline_reads = 0;
  for (const auto& [sample, reader] : log.read_by) inline_reads += reader == log.processed_by.at(sample) ? 1 : 0;
  EXPECT_LE(inline_reads, 2);
}

TEST(LoaderTest, ErrorSurfacesWithTheSampleKeyAndEndsTheEpoch) {
  LoaderOptions o = options(4, 2, 4, 2);
  o.shuffle = false;
  Loader loader(std::make_shared<MemorySource>(40), std::make_shared<IndexTransform>(0, std::set<int64_t>{9}), o);
  loader.start_epoch(0);
  EXPECT_EQ(loader.next().status, NextResult::Status::kBatch);
  EXPECT_EQ(loader.next().status, NextResult::Status::kBatch);
  try {
    loader.next();
    FAIL() << "expected the error of sample 9";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kDecode);
    EXPECT_STREQ(e.what(), "sample-9.jpg: corrupt JPEG data");
    EXPECT_EQ(e.key(), "sample-9.jpg");
  }
  EXPECT_EQ(loader.next().status, NextResult::Status::kEnd);
  // The loader stays usable.
  loader.start_epoch(1);
  EXPECT_EQ(loader.next().status, NextResult::Status::kBatch);
}

TEST(LoaderTest, ReadErrorNamesTheSample) {
  LoaderOptions o = options(4, 2, 4, 2);
  o.shuffle = false;
  Loader loader(std::make_shared<MemorySource>(8, 0, std::set<int64_t>{2}), std::make_shared<IndexTransform>(), o);
  loader.start_epoch(0);
  try {
    loader.next();
    FAIL() << "expected a read error";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kRead);
    EXPECT_STREQ(e.what(), "sample-2.jpg: No such file or directory");
  }
}

TEST(LoaderTest, SkipFillsBatchesFromTheNextGoodSamplesDeterministically) {
  const std::set<int64_t> corrupt{0, 5, 6, 7, 31, 38, 39};
  const std::set<int64_t> unreadable{12, 13};
  auto run = [&](int threads, int io_threads, int delay) {
    LoaderOptions o = options(5, threads, io_threads, 3);
    o.on_error = OnError::kSkip;
    Loader loader(std::make_shared<MemorySource>(40, delay, unreadable),
                  std::make_shared<IndexTransform>(delay, corrupt), o);
    Epoch epoch = run_epoch(loader, 3);
    auto skipped = loader.skipped();
    return std::make_pair(epoch, skipped);
  };
  auto [a, skipped_a] = run(1, 1, 0);
  auto [b, skipped_b] = run(4, 16, 300);
  EXPECT_EQ(a.batches, b.batches);
  // 31 good samples: six full batches and one of 1.
  ASSERT_EQ(a.batches.size(), 7u);
  EXPECT_EQ(a.batches.back().size(), 1u * kSampleBytes);
  std::vector<int64_t> expected;
  for (int64_t s : random_permutation(40, 1234, 3)) {
    if (!corrupt.count(s) && !unreadable.count(s)) expected.push_back(s);
  }
  EXPECT_EQ(a.samples(), expected);
  ASSERT_EQ(skipped_a.size(), 9u);
  ASSERT_EQ(skipped_b.size(), 9u);
  for (size_t i = 0; i < skipped_a.size(); ++i) {
    EXPECT_EQ(skipped_a[i].key, skipped_b[i].key);
    EXPECT_EQ(skipped_a[i].position, skipped_b[i].position);
  }
  EXPECT_EQ(skipped_a[0].cause.empty(), false);
}

TEST(LoaderTest, ResumeFromABatchEndMatchesAnUninterruptedRun) {
  LoaderOptions o = options(6, 3, 8, 2);
  o.on_error = OnError::kSkip;
  auto make = [&](int threads) {
    LoaderOptions oo = o;
    oo.threads = threads;
    return std::make_unique<Loader>(std::make_shared<MemorySource>(50),
                                    std::make_shared<IndexTransform>(0, std::set<int64_t>{3, 20}), oo);
  };
  auto full = make(1);
  Epoch all = run_epoch(*full, 2);
  auto first = make(2);
  first->start_epoch(2);
  std::shared_ptr<Batch> b;
  for (int i = 0; i < 3; ++i) b = first->next().batch;
  const int64_t position = b->end_position();
  first.reset();
  auto resumed = make(4);
  Epoch rest = run_epoch(*resumed, 2, position);
  std::vector<std::vector<uint8_t>> expected(all.batches.begin() + 3, all.batches.end());
  EXPECT_EQ(rest.batches, expected);
}

TEST(LoaderTest, ASavedPositionResumesWhereItWasTakenAtAnyWorldSize) {
  // 30 samples, 2 ranks of 15 each in batches of 4.
  LoaderOptions o = options(4, 1, 1, 2);
  o.world_size = 2;
  o.rank = 1;
  Loader loader(std::make_shared<MemorySource>(30), std::make_shared<IndexTransform>(0), o);
  const SavedPosition saved = loader.saved_position({5, 8, 2, 4});
  EXPECT_EQ(saved.epoch, 5);
  EXPECT_EQ(saved.position, 4 + 8 * 2);
  EXPECT_EQ(saved.batch, 2);
  EXPECT_EQ(saved.world_size, 2);
  EXPECT_EQ(saved.segment_start, 4);
  EXPECT_EQ(saved.samples, 30);
  const EpochStart same = loader.resume_point(saved);
  EXPECT_EQ(same.epoch, 5);
  EXPECT_EQ(same.position, 8);
  EXPECT_EQ(same.batch, 2);
  EXPECT_EQ(same.segment_start, 4);
  // Saved by 3 ranks: what they left of the global order is dealt from its start.
  const EpochStart elastic = loader.resume_point({5, 19, 7, 3, 1});
  EXPECT_EQ(elastic.position, 0);
  EXPECT_EQ(elastic.batch, 7);
  EXPECT_EQ(elastic.segment_start, 19);
  // An older state (no world size): the rank's own position.
  const EpochStart older = loader.resume_point({5, 8, 2, std::nullopt, 0});
  EXPECT_EQ(older.position, 8);
  EXPECT_EQ(older.segment_start, 0);
  const auto error = [&](const SavedPosition& bad) {
    try {
      loader.resume_point(bad);
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), ErrorKind::kConfig);
      return e.cause();
    }
    return std::string("no error");
  };
  EXPECT_EQ(error({-1, 0, 0, 2, 0}), "state['epoch'] must be >= 0, got -1");
  EXPECT_EQ(error({0, 3, 0, 2, 4}), "state['position'] must be >= 4, got 3");
  EXPECT_EQ(error({0, 5, 0, 2, 4}),
            "state['position'] = 5 is not a whole number of steps of 2 ranks from state['segment_start'] = 4");
  EXPECT_EQ(error({0, 0, 0, 2, 31}), "state['segment_start'] must be <= 30, got 31");
  EXPECT_EQ(error({0, 8, 3, 2, 0}),
            "state['batch'] = 3 batches of 4 need more than position 4 of the epoch: was it saved with a smaller "
            "batch_size? Load it into a loader with that batch_size");
  EXPECT_EQ(error({0, 8, 5, 2, 0}), "state['batch'] must be <= 4, got 5");
  EXPECT_EQ(error({0, 0, 0, 0, 0}), "state['world_size'] must be >= 1, got 0");
  EXPECT_EQ(error({0, 0, 0, 2, 0, std::nullopt, 31}),
            "state was saved over 31 samples per epoch, this loader's source has 30: its positions would skip or "
            "repeat samples. Resume over the same data, or start the next epoch without load_state_dict "
            "(set_epoch(state['epoch'] + 1))");
  // Saved by another world: its positions end with its padded share of the
  // 29 samples after the segment (3 ranks of 10), and each batch took one.
  EXPECT_EQ(error({0, 32, 0, 3, 1}), "state['position'] must be <= 31, got 32");
  EXPECT_EQ(loader.resume_point({0, 31, 5, 3, 1}).segment_start, 30);
  // Another world's loader may have padded where this one truncates.
  LoaderOptions truncating = o;
  truncating.drop_last = true;
  Loader dropping(std::make_shared<MemorySource>(30), std::make_shared<IndexTransform>(0), truncating);
  EXPECT_EQ(dropping.resume_point({0, 31, 5, 3, 1}).segment_start, 30);
  EXPECT_EQ(error({0, 19, 20, 3, 1}), "state['batch'] must be <= 19, got 20");
  EXPECT_EQ(error({0, 19, std::numeric_limits<int64_t>::max(), 3, 1}),
            "state['batch'] must be <= 19, got " + std::to_string(std::numeric_limits<int64_t>::max()));
}

TEST(LoaderTest, DistributedRanksShareTheEpochDisjointly) {
  for (bool drop_last : {false, true}) {
    std::vector<int64_t> all;
    std::vector<int64_t> lengths;
    for (int64_t rank = 0; rank < 3; ++rank) {
      LoaderOptions o = options(4, 2, 4, 2);
      o.rank = rank;
      o.world_size = 3;
      o.drop_last = drop_last;
      Loader loader(std::make_shared<MemorySource>(31), std::make_shared<IndexTransform>(), o);
      EXPECT_EQ(loader.num_samples(), drop_last ? 10 : 11);
      loader.start_epoch(0);
      std::vector<int64_t> mine;
      for (;;) {
        NextResult n = loader.next();
        if (n.status == NextResult::Status::kEnd) break;
        for (int64_t i = 0; i < n.batch->size(); ++i) {
          int64_t index;
          std::memcpy(&index, static_cast<const uint8_t*>(n.batch->data()) + i * kSampleBytes, 8);
          mine.push_back(index);
        }
      }
      lengths.push_back(static_cast<int64_t>(mine.size()));
      all.insert(all.end(), mine.begin(), mine.end());
    }
    auto perm = random_permutation(31, 1234, 0);
    if (drop_last) {
      EXPECT_EQ(lengths, (std::vector<int64_t>{8, 8, 8}));  // drop_last also drops partial batches.
    } else {
      EXPECT_EQ(lengths, (std::vector<int64_t>{11, 11, 11}));
      std::sort(all.begin(), all.end());
      std::vector<int64_t> expected(perm.begin(), perm.end());
      expected.insert(expected.end(), perm.begin(), perm.begin() + 2);  // Wrap-around padding.
      std::sort(expected.begin(), expected.end());
      EXPECT_EQ(all, expected);
    }
  }
}

int count_threads() {
  int n = 0;
  if (DIR* dir = opendir("/proc/self/task")) {
    while (readdir(dir) != nullptr) ++n;
    closedir(dir);
  }
  return n - 2;  // "." and "..".
}

// count_threads() once two reads 5 ms apart agree (at most 1 s): a thread
// joined just before may still be listed, and a listing taken while a task
// goes may skip another.
int steady_thread_count() {
  int n = count_threads();
  for (int i = 0; i < 200; ++i) {
    std::this_thread::sleep_for(5ms);
    const int again = count_threads();
    if (again == n) return n;
    n = again;
  }
  return n;
}

// count_threads(), re-read for a while until it is `expected`: a joined
// thread's task can stay listed in /proc/self/task for a moment after
// pthread_join returns. A real leak stays and is returned.
int settled_thread_count(int expected) {
  const auto deadline = std::chrono::steady_clock::now() + 10s;
  int n = count_threads();
  while (n != expected && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(1ms);
    n = count_threads();
  }
  return n;
}

TEST(LoaderTest, StopWhileConsumerBlockedAndTasksQueuedReturnsPromptly) {
  std::thread([] {}).join();  // Sanitizer runtimes start a helper thread with the first thread.
  const int baseline = steady_thread_count();
  std::atomic<int> running{0};
  {
    // Each sample takes 20 ms on one cpu thread: the queue stays full.
    Loader loader(std::make_shared<MemorySource>(10000),
                  std::make_shared<IndexTransform>(20000, std::set<int64_t>{}, &running), options(64, 1, 4, 4));
    loader.start_epoch(0);
    auto consumer = std::async(std::launch::async, [&] { return loader.next(); });
    while (running.load() == 0) std::this_thread::yield();
    loader.stop();  // Waits only for the sample being processed.
    ASSERT_EQ(consumer.wait_for(5s), std::future_status::ready);
    EXPECT_EQ(consumer.get().status, NextResult::Status::kEnd);
    EXPECT_EQ(loader.stats().buffers_leased, 0);
    EXPECT_EQ(settled_thread_count(baseline + 1 + 4), baseline + 1 + 4);
  }
  EXPECT_EQ(settled_thread_count(baseline), baseline);
}

TEST(LoaderTest, NextTimesOutWhenNoBatchIsReady) {
  std::atomic<int> running{0};
  Loader loader(std::make_shared<MemorySource>(100),
                std::make_shared<IndexTransform>(50000, std::set<int64_t>{}, &running), options(50, 1, 1, 1));
  loader.start_epoch(0);
  EXPECT_EQ(loader.next(std::chrono::milliseconds(1)).status, NextResult::Status::kTimeout);
}

TEST(LoaderTest, BatchOutlivesTheLoader) {
  std::shared_ptr<Batch> batch;
  {
    Loader loader(std::make_shared<MemorySource>(10), std::make_shared<IndexTransform>(), options(4, 2, 2, 2));
    loader.start_epoch(0);
    batch = loader.next().batch;
  }
  int64_t first;
  std::memcpy(&first, batch->data(), 8);
  EXPECT_EQ(first, random_permutation(10, 1234, 0)[0]);
}

TEST(LoaderTest, RejectsInvalidOptions) {
  auto make = [](LoaderOptions o) {
    Loader loader(std::make_shared<MemorySource>(10), std::make_shared<IndexTransform>(), o);
  };
  LoaderOptions o = options(0, 1, 1, 1);
  try {
    make(o);
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kConfig);
    EXPECT_STREQ(e.what(), "batch_size must be >= 1, got 0");
  }
  o = options(1, 1, 1, 1);
  o.rank = 3;
  o.world_size = 2;
  EXPECT_THROW(make(o), Error);
  o = options(1, 1, 1, -1);
  try {
    make(o);
    FAIL();
  } catch (const Error& e) {
    EXPECT_STREQ(e.what(), "prefetch must be >= 0 (0: auto), got -1");
  }
}

}  // namespace
}  // namespace conveyor

namespace conveyor {
namespace {

TEST(LoaderCloseTest, JoinsEveryThreadAndRefusesNewEpochs) {
  std::thread([] {}).join();  // Sanitizer runtimes start a helper thread with the first thread.
  const int baseline = steady_thread_count();
  Loader loader(std::make_shared<MemorySource>(100), std::make_shared<IndexTransform>(), options(8, 3, 5, 2));
  loader.start_epoch(0);
  std::shared_ptr<Batch> held = loader.next().batch;
  EXPECT_EQ(settled_thread_count(baseline + 3 + 5), baseline + 3 + 5);
  loader.close();
  EXPECT_EQ(settled_thread_count(baseline), baseline);
  loader.close();  // Idempotent.
  EXPECT_EQ(loader.next().status, NextResult::Status::kEnd);
  try {
    loader.start_epoch(1);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kConfig);
    EXPECT_STREQ(e.what(), "the loader is closed");
  }
  EXPECT_EQ(held->size(), 8);  // A held batch stays valid.
}

}  // namespace
}  // namespace conveyor

namespace conveyor {
namespace {

// Sample 5 is corrupt; the first transform of sample 6 blocks until released.
class LatchedTransform : public IndexTransform {
 public:
  LatchedTransform() : IndexTransform(0, {5}) {}
  void apply(std::span<const uint8_t> input, SampleRng& rng, void* out) const override {
    int64_t index;
    std::memcpy(&index, input.data(), 8);
    if (index == 6 && calls_of_6_.fetch_add(1) == 0) {
      blocked_.set_value();
      released_.wait();
    }
    IndexTransform::apply(input, rng, out);
  }
  mutable std::atomic<int> calls_of_6_{0};
  mutable std::promise<void> blocked_;
  std::promise<void> release_;
  std::shared_future<void> released_ = release_.get_future().share();
};

// Neither reads nor names its samples.
class KeylessSource : public MemorySource {
 public:
  KeylessSource() : MemorySource(4) {}
  Record read(int64_t) const override { throw Error(ErrorKind::kRead, "unreadable"); }
  std::string key(int64_t) const override { throw std::runtime_error("no key"); }
};

TEST(LoaderKeyTest, AKeyThatThrowsFallsBackToTheSampleIndex) {
  LoaderOptions o = options(4, 1, 1, 1);
  o.shuffle = false;
  Loader loader(std::make_shared<KeylessSource>(), std::make_shared<IndexTransform>(), o);
  loader.start_epoch(0);
  try {
    loader.next();
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kRead);
    EXPECT_EQ(e.key(), "sample 0");
    EXPECT_STREQ(e.what(), "sample 0: unreadable");
  }
}

// Holds every sample until released.
class GatedTransform : public IndexTransform {
 public:
  void apply(std::span<const uint8_t> input, SampleRng& rng, void* out) const override {
    released_.wait();
    IndexTransform::apply(input, rng, out);
  }
  std::promise<void> release_;
  std::shared_future<void> released_ = release_.get_future().share();
};

TEST(LoaderTimeoutTest, AHugeOrNonFiniteTimeoutIsNoLimit) {
  auto transform = std::make_shared<GatedTransform>();
  Loader loader(std::make_shared<MemorySource>(4), transform, options(1, 1, 1, 4));
  loader.start_epoch(0);
  // milliseconds::max() as a deadline would overflow the steady clock (and
  // then time out at once): it must wait for the batch instead.
  auto first = std::async(std::launch::async, [&] { return loader.next(std::chrono::milliseconds::max()).status; });
  std::this_thread::sleep_for(std::chrono::milliseconds(20));  // Let next() start waiting.
  transform->release_.set_value();
  EXPECT_EQ(first.get(), NextResult::Status::kBatch);
  for (double seconds : {std::numeric_limits<double>::infinity(), std::numeric_limits<double>::quiet_NaN(), 1e300}) {
    EXPECT_EQ(loader.next(std::chrono::duration<double>(seconds)).status, NextResult::Status::kBatch) << seconds;
  }
  EXPECT_EQ(loader.next(std::chrono::duration<double>(0)).status, NextResult::Status::kEnd);
}

TEST(LoaderSkipTest, LastBatchWaitsForAReassignedSlotsOldTask) {
  LoaderOptions o = options(4, 2, 2, 2);
  o.shuffle = false;
  o.on_error = OnError::kSkip;
  auto transform = std::make_shared<LatchedTransform>();
  Loader loader(std::make_shared<MemorySource>(7), transform, o);
  loader.start_epoch(0);
  transform->blocked_.get_future().wait();  // Sample 6's first task is writing slot 2 of batch 1.
  NextResult first = loader.next();
  ASSERT_EQ(first.status, NextResult::Status::kBatch);
  // Sample 5 failed, so sample 6 moved to slot 1 and the epoch has no more
  // samples; slot 2's old task still runs, so batch 1 must not be handed out.
  EXPECT_EQ(loader.next(std::chrono::milliseconds(50)).status, NextResult::Status::kTimeout);
  transform->release_.set_value();
  NextResult last = loader.next();
  ASSERT_EQ(last.status, NextResult::Status::kBatch);
  ASSERT_EQ(last.batch->size(), 2);
  int64_t indices[2];
  for (int i = 0; i < 2; ++i)
    std::memcpy(&indices[i], static_cast<const uint8_t*>(last.batch->data()) + i * kSampleBytes, 8);
  EXPECT_EQ(indices[0], 4);
  EXPECT_EQ(indices[1], 6);
  EXPECT_EQ(loader.next().status, NextResult::Status::kEnd);
  ASSERT_EQ(loader.skipped().size(), 1u);
  EXPECT_EQ(loader.skipped()[0].key, "sample-5.jpg");
}

TEST(LoaderTest, DropLastReturnsThePartialBatchsBuffer) {
  LoaderOptions o = options(4, 2, 2, 2);
  o.drop_last = true;
  Loader loader(std::make_shared<MemorySource>(10), std::make_shared<IndexTransform>(), o);
  loader.start_epoch(0);
  while (loader.next().status == NextResult::Status::kBatch) {
  }
  EXPECT_EQ(loader.stats().buffers_leased, 0);
}

}  // namespace
}  // namespace conveyor

namespace conveyor {
namespace {

// One byte per sample: the smallest sample, so that batch sizes near
// INT64_MAX still give a buffer size that fits.
class OneByteTransform : public SampleTransform {
 public:
  SampleSpec output_spec() const override { return {{1}, DType::kUInt8}; }
  void apply(std::span<const uint8_t> input, SampleRng&, void* out) const override {
    *static_cast<uint8_t*>(out) = input[0];
  }
};

// Samples of 2^40 bytes each (never made: the loader is only built).
class HugeSampleTransform : public SampleTransform {
 public:
  SampleSpec output_spec() const override { return {{int64_t{1} << 40}, DType::kUInt8}; }
  void apply(std::span<const uint8_t>, SampleRng&, void*) const override {}
};

TEST(LoaderSizeTest, BatchBufferThatOverflowsIsAConfigErrorAtConstruction) {
  try {
    Loader loader(std::make_shared<MemorySource>(int64_t{1} << 24), std::make_shared<HugeSampleTransform>(),
                  options(int64_t{1} << 62, 1, 1, 1));
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kConfig);
    EXPECT_STREQ(e.what(), "the batch buffer (rows x bytes per sample) overflows: 16777216 x 1099511627776");
  }
}

TEST(LoaderSizeTest, CountsNearInt64MaxDoNotWrap) {
  const int64_t max = std::numeric_limits<int64_t>::max();
  Loader loader(std::make_shared<MemorySource>(10), std::make_shared<OneByteTransform>(), options(max, 1, 1, 1));
  EXPECT_EQ(loader.num_batches(), 1);
  EXPECT_EQ(loader.num_samples(), 10);
}

TEST(LoaderSizeTest, ABatchSizePastTheEpochTakesRoomForTheEpochOnly) {
  // batch_size 10^7 over 10 samples took 10^7 rows (and slots) per batch.
  std::atomic<size_t> largest{0};
  LoaderOptions o = options(10'000'000, 1, 1, 1);
  const BufferAllocator aligned = BufferAllocator::aligned();
  o.allocator = {[&, aligned](size_t bytes) -> void* {
                   largest = std::max(largest.load(), bytes);
                   return aligned.allocate(bytes);
                 },
                 aligned.deallocate};
  Loader loader(std::make_shared<MemorySource>(10), std::make_shared<IndexTransform>(), o);
  Epoch epoch = run_epoch(loader, 0);
  ASSERT_EQ(epoch.batches.size(), 1u);
  EXPECT_EQ(epoch.batches[0].size(), 10u * kSampleBytes);  // The epoch, in one batch.
  EXPECT_EQ(largest.load(), 10u * kSampleBytes);
  // With drop_last, that one partial batch is dropped, as before.
  o.drop_last = true;
  Loader dropping(std::make_shared<MemorySource>(10), std::make_shared<IndexTransform>(), o);
  EXPECT_EQ(dropping.num_batches(), 0);
  EXPECT_TRUE(run_epoch(dropping, 0).batches.empty());
}

TEST(LoaderSizeTest, ABatchBufferThatCannotBeAllocatedIsAnErrorFromNext) {
  std::atomic<int> allocations{0};
  LoaderOptions o = options(4, 1, 1, 1);
  const BufferAllocator aligned = BufferAllocator::aligned();
  // The first buffer is allocated; every later one fails, as a too large batch would.
  o.allocator = {[&, aligned](size_t bytes) -> void* {
                   if (allocations.fetch_add(1) > 0) throw std::bad_alloc();
                   return aligned.allocate(bytes);
                 },
                 aligned.deallocate};
  Loader loader(std::make_shared<MemorySource>(10), std::make_shared<IndexTransform>(), o);
  loader.start_epoch(0);
  NextResult first = loader.next();  // Held: its buffer cannot serve the next batch.
  ASSERT_EQ(first.status, NextResult::Status::kBatch);
  try {
    loader.next();
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kInternal);
    EXPECT_STREQ(e.what(),
                 "out of memory for the next batch (its buffer is 128 bytes: batch_size 4 x 32 bytes per sample)");
  }
  EXPECT_EQ(loader.next().status, NextResult::Status::kEnd);
  EXPECT_EQ(loader.stats().buffers_leased, 1);
  // An allocator returning null fails the same way.
  LoaderOptions null_allocator = options(4, 1, 1, 1);
  null_allocator.allocator = {[](size_t) -> void* { return nullptr; }, [](void*, size_t) {}};
  Loader empty(std::make_shared<MemorySource>(10), std::make_shared<IndexTransform>(), null_allocator);
  empty.start_epoch(0);
  EXPECT_THROW(empty.next(), Error);
}

TEST(LoaderSizeTest, AnAllocatorErrorKeepsItsKindAndCause) {
  LoaderOptions o = options(4, 1, 1, 1);
  o.allocator = {[](size_t) -> void* { throw Error(ErrorKind::kConfig, "pinned memory is disabled"); },
                 [](void*, size_t) {}};
  Loader loader(std::make_shared<MemorySource>(10), std::make_shared<IndexTransform>(), o);
  loader.start_epoch(0);
  try {
    loader.next();
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kConfig);
    EXPECT_STREQ(e.what(), "pinned memory is disabled");
  }
  EXPECT_EQ(loader.next().status, NextResult::Status::kEnd);
}

}  // namespace
}  // namespace conveyor

namespace conveyor {
namespace {

// 2^40 samples that are never read: too many to hold the epoch's order.
class HugeSource : public Source {
 public:
  int64_t size() const override { return int64_t{1} << 40; }
  Record read(int64_t) const override { throw Error(ErrorKind::kRead, "never read"); }
  std::string key(int64_t index) const override { return std::to_string(index); }
};

TEST(LoaderSizeTest, ASourceWhoseOrderCannotBeAllocatedIsAConfigErrorAtConstruction) {
  try {
    Loader loader(std::make_shared<HugeSource>(), std::make_shared<IndexTransform>(), options(4, 1, 1, 1));
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kConfig);
    EXPECT_STREQ(e.what(), "the source has 1099511627776 samples: its epoch order (8 TiB) cannot be allocated");
  }
  LoaderOptions o = options(4, 1, 1, 1);
  o.world_size = int64_t{1} << 62;  // Each of 10 samples padded to 2^62 positions.
  try {
    Loader loader(std::make_shared<MemorySource>(10), std::make_shared<IndexTransform>(), o);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kConfig);
    EXPECT_STREQ(e.what(),
                 "the source has 10 samples (padded for world_size 4611686018427387904): its epoch order (32 EiB) "
                 "cannot be allocated");
  }
}

}  // namespace
}  // namespace conveyor

namespace conveyor {
namespace {

// Calls back into the loader it is given from its apply(): what a Python
// transform or dataset that calls loader.close() or next(iter(loader)) does.
class ReenteringTransform : public IndexTransform {
 public:
  explicit ReenteringTransform(std::function<void()> call) : call_(std::move(call)) {}
  void apply(std::span<const uint8_t> input, SampleRng& rng, void* out) const override {
    call_();
    IndexTransform::apply(input, rng, out);
  }

 private:
  std::function<void()> call_;
};

TEST(LoaderReentryTest, ALoadersOwnThreadCallingBackIntoItIsRefusedNotADeadlock) {
  // Each of these once waited for the very thread that called it.
  const std::vector<std::pair<std::string, std::function<void(Loader&)>>> calls = {
      {"close()", [](Loader& l) { l.close(); }},
      {"stop()", [](Loader& l) { l.stop(); }},
      {"next()", [](Loader& l) { l.next(); }},
      {"start_epoch()", [](Loader& l) { l.start_epoch(1); }},
      {"set_parallelism()", [](Loader& l) { l.set_parallelism(1, 1, 1); }},
  };
  for (const auto& entry : calls) {
    const auto& name = entry.first;
    const auto& call = entry.second;  // Not a structured binding: clang 14 cannot capture those.
    Loader* self = nullptr;
    LoaderOptions o = options(4, 2, 2, 2);
    o.shuffle = false;  // Sample 0 fails first.
    Loader loader(std::make_shared<MemorySource>(16), std::make_shared<ReenteringTransform>([&] { call(*self); }), o);
    self = &loader;
    loader.start_epoch(0);
    try {
      loader.next();
      FAIL() << name << " was accepted";
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), ErrorKind::kConfig) << name;
      EXPECT_EQ(e.cause(), name +
                               " was called from one of the loader's own threads (in the source's read or a "
                               "transform), where it would wait for that thread to finish: call it from the code "
                               "that iterates the loader");
      EXPECT_EQ(e.key(), "sample-0.jpg");
    }
    EXPECT_NO_THROW(loader.check_not_reentered("close()"));  // From the consumer's thread: fine.
    loader.close();
  }
}

TEST(LoaderTest, TheLastEpochIsOneWhoseSuccessorStillFits) {
  Loader loader(std::make_shared<MemorySource>(8), std::make_shared<IndexTransform>(), options(4, 1, 1, 1));
  EXPECT_EQ(run_epoch(loader, Loader::kMaxEpoch).batches.size(), 2u);
  try {
    loader.start_epoch(Loader::kMaxEpoch + 1);
    FAIL() << "accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kConfig);
    EXPECT_STREQ(e.what(), "epoch 9223372036854775807 is outside [0, 9223372036854775806]");
  }
  EXPECT_THROW(loader.start_epoch(-1), Error);
}

// Float32 images of 3 x 2 x 2: what a batch mix takes.
class ImageTransform : public IndexTransform {
 public:
  SampleSpec output_spec() const override { return {{3, 2, 2}, DType::kFloat32}; }
  void apply(std::span<const uint8_t> /*input*/, SampleRng& /*rng*/, void* out) const override {
    std::memset(out, 0, 3 * 2 * 2 * sizeof(float));
  }
};

TEST(LoaderTest, ABatchMixWhoseSoftLabelsCannotFitTheBudgetIsRefusedAtConstruction) {
  // MixUp(num_classes=2**40) once failed on the first batch with bad_alloc.
  LoaderOptions o = options(4, 1, 1, 1);
  o.memory_budget = int64_t{1} << 30;
  o.batch_mix = BatchMixSpec{{{MixKind::kMixUp, 1.0}}, {}, int64_t{1} << 40, false};
  try {
    Loader(std::make_shared<MemorySource>(8), std::make_shared<ImageTransform>(), o);
    FAIL() << "accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kConfig);
    EXPECT_STREQ(e.what(),
                 "MixUp: num_classes 1099511627776 makes soft labels of 17592186044416 bytes per batch (batch_size x "
                 "num_classes float32), more than memory_budget (1073741824 bytes)");
  }
  o.batch_mix->num_classes = int64_t{1} << 62;  // The byte count itself overflows.
  EXPECT_THROW(Loader(std::make_shared<MemorySource>(8), std::make_shared<ImageTransform>(), o), Error);
  o.batch_mix->num_classes = 1000;
  Loader fits(std::make_shared<MemorySource>(8), std::make_shared<ImageTransform>(), o);
  EXPECT_EQ(run_epoch(fits, 0).batches.size(), 2u);
}

}  // namespace
}  // namespace conveyor

#if defined(__unix__) || defined(__APPLE__)
#include <sys/wait.h>
#include <unistd.h>

namespace conveyor {
namespace {

constexpr const char* kForkError = "this Loader was created before fork(); create a new Loader in the child process";

// In the child: a bit per entry point that does not throw the fork error.
int child_checks(std::unique_ptr<Loader> loader, std::shared_ptr<Batch> held) {
  int failures = 0;
  auto refuses = [&](int bit, auto call) {
    try {
      call();
      failures |= bit;
    } catch (const Error& e) {
      if (e.kind() != ErrorKind::kConfig || std::string(e.what()) != kForkError) failures |= bit;
    }
  };
  refuses(1, [&] { loader->next(); });
  refuses(2, [&] { loader->start_epoch(1); });
  loader->stop();  // Returns: nothing runs in the child.
  refuses(8, [&] { loader->stats(); });
  refuses(16, [&] { loader->skipped(); });
  loader->close();  // Returns: no thread to join.
  held.reset();     // The batch's buffer is leaked, not returned under the pool's lock.
  loader.reset();   // Returns without joining or locking.
  return failures;
}

TEST(LoaderForkTest, ALoaderFromBeforeForkRefusesWorkInTheChildAndTheParentGoesOn) {
  auto loader = std::make_unique<Loader>(std::make_shared<MemorySource>(40), std::make_shared<IndexTransform>(),
                                         options(4, 2, 2, 2));
  loader->start_epoch(0);
  std::shared_ptr<Batch> first = loader->next().batch;
  ASSERT_NE(first, nullptr);
  const pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    alarm(60);  // A hang becomes SIGALRM, a failure of the parent's check.
    _exit(child_checks(std::move(loader), std::move(first)));
  }
  int status = 0;
  ASSERT_EQ(waitpid(pid, &status, 0), pid);
  ASSERT_TRUE(WIFEXITED(status)) << "the child was killed by signal " << WTERMSIG(status);
  EXPECT_EQ(WEXITSTATUS(status), 0) << "bit mask of entry points that did not refuse";
  int64_t batches = 1;
  while (loader->next().status == NextResult::Status::kBatch) ++batches;
  EXPECT_EQ(batches, 10);
}

// Sample i is (i % 5 + 1) rows of 8 bytes: the index, then random bytes
// from the sample's stream; samples in `corrupt` fail.
class VariableTransform : public SampleTransform {
 public:
  explicit VariableTransform(std::set<int64_t> corrupt = {}) : corrupt_(std::move(corrupt)) {}
  SampleSpec output_spec() const override { return {{-1, 8}, DType::kUInt8}; }
  bool fixed_shape() const override { return false; }
  void apply(std::span<const uint8_t>, SampleRng&, void*) const override {
    throw Error(ErrorKind::kInternal, "variable shape: apply_variable only");
  }
  void apply_variable(std::span<const uint8_t> input, SampleRng& rng, const SampleAllocator& allocate,
                      std::vector<BoundingBox>*) const override {
    int64_t index;
    std::memcpy(&index, input.data(), 8);
    random_delay(200);
    if (corrupt_.count(index)) throw Error(ErrorKind::kDecode, "corrupt JPEG data");
    auto* out = static_cast<uint8_t*>(allocate({{index % 5 + 1, 8}, DType::kUInt8}));
    std::memcpy(out, &index, 8);
    for (int64_t row = 1; row < index % 5 + 1; ++row) {
      const uint64_t r = rng.next_u64();
      std::memcpy(out + row * 8, &r, 8);
    }
  }

 private:
  std::set<int64_t> corrupt_;
};

// Every sample of an epoch as its bytes, in order.
std::vector<std::vector<uint8_t>> variable_epoch(Loader& loader, int64_t epoch, int64_t start = 0) {
  std::vector<std::vector<uint8_t>> samples;
  loader.start_epoch(epoch, start);
  for (;;) {
    NextResult next = loader.next();
    if (next.status == NextResult::Status::kEnd) break;
    const Batch& b = *next.batch;
    EXPECT_TRUE(b.variable_shape());
    EXPECT_EQ(b.data(), nullptr);
    EXPECT_EQ(static_cast<int64_t>(b.samples().size()), b.size());
    for (const SampleOutput& s : b.samples()) {
      const auto* data = static_cast<const uint8_t*>(s.buffer.data());
      samples.emplace_back(data, data + s.spec.num_bytes());
      int64_t index;
      std::memcpy(&index, data, 8);
      EXPECT_EQ(s.spec.shape, (std::vector<int64_t>{index % 5 + 1, 8}));
    }
  }
  return samples;
}

TEST(LoaderVariableShapeTest, EachSampleHasItsOwnShapeIdenticallyForAnyThreadCount) {
  Loader one(std::make_shared<MemorySource>(41), std::make_shared<VariableTransform>(), options(4, 1, 1, 1));
  Loader four(std::make_shared<MemorySource>(41, 100), std::make_shared<VariableTransform>(), options(4, 4, 8, 3));
  EXPECT_EQ(one.sample_spec().shape, (std::vector<int64_t>{-1, 8}));
  const auto a = variable_epoch(one, 2), b = variable_epoch(four, 2);
  ASSERT_EQ(a.size(), 41u);
  EXPECT_EQ(a, b);
  // Resuming after 3 batches gives the rest.
  const auto rest = variable_epoch(four, 2, 12);
  EXPECT_EQ(rest, std::vector<std::vector<uint8_t>>(a.begin() + 12, a.end()));
  // Memory: sample buffers are recycled, not one per sample ever loaded.
  for (int epoch = 3; epoch < 8; ++epoch) variable_epoch(four, epoch);
  EXPECT_LE(four.stats().buffers_allocated, (3 + 2) * 4);
}

TEST(LoaderVariableShapeTest, SkippedSamplesAreFilledFromTheNextOnes) {
  LoaderOptions o = options(4, 3, 4, 2);
  o.shuffle = false;
  o.on_error = OnError::kSkip;
  Loader loader(std::make_shared<MemorySource>(10), std::make_shared<VariableTransform>(std::set<int64_t>{2, 5}), o);
  const auto samples = variable_epoch(loader, 0);
  std::vector<int64_t> indices;
  for (const auto& s : samples) {
    int64_t index;
    std::memcpy(&index, s.data(), 8);
    indices.push_back(index);
  }
  EXPECT_EQ(indices, (std::vector<int64_t>{0, 1, 3, 4, 6, 7, 8, 9}));
  EXPECT_EQ(loader.stats().skipped, 2);

  LoaderOptions raise = options(4, 3, 4, 2);
  Loader failing(std::make_shared<MemorySource>(10), std::make_shared<VariableTransform>(std::set<int64_t>{5}), raise);
  try {
    variable_epoch(failing, 0);
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.key(), "sample-5.jpg");
    EXPECT_EQ(e.cause(), "corrupt JPEG data");
  }
}

TEST(LoaderVariableShapeTest, ABatchMixNeedsAFixedShape) {
  LoaderOptions o = options(4, 1, 1, 1);
  o.batch_mix = BatchMixSpec{{{MixKind::kCutMix, 1.0}}, {}, 3, false};
  EXPECT_THROW(Loader(std::make_shared<MemorySource>(10), std::make_shared<VariableTransform>(), o), Error);
}

}  // namespace
}  // namespace conveyor
#endif
