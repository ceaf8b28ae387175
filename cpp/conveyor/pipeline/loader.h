#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "conveyor/core/buffer_pool.h"
#include "conveyor/core/dtype.h"
#include "conveyor/core/error.h"
#include "conveyor/core/sample_transform.h"
#include "conveyor/core/thread_pool.h"
#include "conveyor/io/source.h"
#include "conveyor/ops/batch_mix.h"
#include "conveyor/pipeline/batch.h"

namespace conveyor {

/// What the loader does with a sample that fails to read or decode.
enum class OnError {
  kRaise,  ///< next() throws the sample's Error when the consumer reaches its batch.
  kSkip,   ///< The sample is left out and recorded; later samples fill the batch.
};

/// Default number of io threads: reads wait on storage, not on the CPU.
inline constexpr int kDefaultIoThreads = 32;

/// Options of a Loader. Zero means "default" for the thread counts.
struct LoaderOptions {
  int64_t batch_size = 1;
  bool shuffle = false;
  /// With shuffle: 0 shuffles the whole epoch uniformly (sources are random
  /// access); N > 0 shuffles the shard order and then through a buffer of N
  /// samples (buffered_shuffle), keeping reads local to a few shards.
  int64_t shuffle_buffer = 0;
  uint64_t seed = 0;
  bool drop_last = false;  ///< Drop the last partial batch (and, distributed, truncate instead of padding).
  int threads = 0;     ///< cpu pool size (decode, transforms); 0 = one per CPU this process may use (core/cpu_count.h).
  int io_threads = 0;  ///< io pool size (reads); 0 = kDefaultIoThreads.
  int prefetch = 2;    ///< Batches allowed in flight or ready ahead of the consumer.
  OnError on_error = OnError::kRaise;
  int64_t rank = 0;  ///< This process's share of each epoch (as DistributedSampler).
  int64_t world_size = 1;
  BufferAllocator allocator = BufferAllocator::aligned();  ///< Batch memory (e.g. pinned).
  /// MixUp / CutMix applied to each complete batch in place, on the cpu pool,
  /// before hand-off (ops/batch_mix.h); its random choices come from
  /// (seed, epoch, batch index). Batches then carry soft_labels().
  std::optional<BatchMixSpec> batch_mix;
};

/// A sample left out under OnError::kSkip.
struct SkippedSample {
  int64_t position = 0;  ///< Position in the epoch's order.
  std::string key;
  std::string cause;
};

/// Per-stage counters since the current epoch started (or were reset).
struct LoaderStats {
  int64_t epoch = 0;
  int64_t samples_read = 0;
  int64_t samples_processed = 0;
  int64_t batches_delivered = 0;
  int64_t skipped = 0;
  double read_seconds = 0;     ///< Summed over io threads.
  double process_seconds = 0;  ///< Decode + transforms, summed over cpu threads.
  double wait_seconds = 0;     ///< Time the consumer spent blocked in next(): input stall.
  double wall_seconds = 0;     ///< Since the epoch started.
  int64_t batches_ready = 0;   ///< Complete batches waiting for the consumer (queue depth).
  int64_t batches_in_flight = 0;
  int64_t buffers_allocated = 0;  ///< Pool high-water mark.
  int64_t buffers_leased = 0;
};

/// Result of Loader::next().
struct NextResult {
  enum class Status { kBatch, kEnd, kTimeout };
  Status status = Status::kEnd;
  std::shared_ptr<Batch> batch;  ///< Set when status == kBatch.
};

namespace detail {
struct EpochRun;
struct SampleError;
struct SlotTicket;
}  // namespace detail

/// The pipeline executor. For each sample of an epoch it reads the record on
/// the io pool, then decodes and transforms it on the cpu pool straight into
/// the sample's slot of a pooled batch buffer (or, for a transform without a
/// fixed shape, into a pooled buffer of the sample's own: Batch::samples()); batches are delivered strictly
/// in order, at most `prefetch` ahead of the consumer. The epoch's order and
/// every random choice depend only on (seed, epoch, sample), never on thread
/// timing, so output is identical for any thread counts.
///
/// Thread-safety: one consumer thread calls start_epoch()/next(); stop(),
/// stats() and skipped() may be called from any thread.
///
/// fork(): a Loader belongs to the process that created it. In a child of
/// fork() its threads do not exist, so start_epoch(), next(), stats() and
/// skipped() throw Error{kConfig, "this Loader was created before fork();
/// create a new Loader in the child process"}, and stop(), close() and the
/// destructor return at once, leaking what the threads used. A new Loader works.
class Loader {
 public:
  /// Starts the threads. Throws Error{kConfig} for invalid options, naming
  /// them: also when batch_size x bytes per sample overflows, when the epoch's
  /// order cannot fit in the machine's memory, or when the OS refuses a thread
  /// (the threads already started are joined first).
  Loader(std::shared_ptr<const Source> source, std::shared_ptr<const SampleTransform> transform, LoaderOptions options);
  /// close(): stops the epoch and joins every thread.
  ~Loader();

  Loader(const Loader&) = delete;
  Loader& operator=(const Loader&) = delete;

  /// Samples in one epoch for this rank (after distributed padding/truncation).
  int64_t num_samples() const noexcept { return samples_per_epoch_; }
  /// Batches in one epoch for this rank (before any skipped samples).
  int64_t num_batches() const noexcept;
  const LoaderOptions& options() const noexcept { return options_; }
  SampleSpec sample_spec() const { return spec_; }

  /// Stops any running epoch and starts `epoch`, beginning at position
  /// `start_position` of its order, numbering batches from `start_batch`.
  void start_epoch(int64_t epoch, int64_t start_position = 0, int64_t start_batch = 0);

  /// Waits for the next batch. Returns kEnd after the last batch (or when no
  /// epoch runs), kTimeout when `timeout` passed first. A negative, NaN,
  /// infinite or huge `timeout` (beyond half the steady clock's range,
  /// centuries) means no limit. Under OnError::kRaise, throws the failed
  /// sample's Error (naming it) and ends the epoch.
  NextResult next(std::chrono::duration<double> timeout = std::chrono::duration<double>(-1));

  /// Ends the running epoch: queued work is dropped, running tasks finish,
  /// every in-flight buffer returns to the pool. Returns once no task runs.
  /// In a child of fork() it returns at once (nothing runs there).
  void stop();

  /// stop(), then joins every engine thread. start_epoch() then throws
  /// Error{kConfig}; stats() and skipped() keep working. Idempotent. In a
  /// child of fork(), returns at once (see the class comment).
  void close();

  LoaderStats stats() const;
  /// Samples skipped so far in the current epoch, in order.
  std::vector<SkippedSample> skipped() const;

 private:
  void issue_locked(detail::EpochRun& run);
  void issue_unguarded_locked(detail::EpochRun& run);
  void read_task(const std::shared_ptr<detail::EpochRun>& run, detail::SlotTicket task);
  void process_task(const std::shared_ptr<detail::EpochRun>& run, detail::SlotTicket task, Record record);
  void finish_task(detail::EpochRun& run, detail::SlotTicket task, int64_t label, std::vector<BoundingBox> boxes,
                   const detail::SampleError* error);
  // Batch mix: starts the mix of every complete batch whose positions can no
  // longer change (every batch before it is complete too).
  void start_batch_mixes_locked(detail::EpochRun& run);
  // Variable-shape samples (transform without fixed_shape()): runs the
  // transform into a buffer of sample_pool_, returns the sample's boxes.
  std::vector<BoundingBox> apply_variable_sample(Record& record, SampleRng& rng, SampleOutput& output);
  void mix_task(const std::shared_ptr<detail::EpochRun>& run, int64_t batch_index);
  void stop_locked(std::unique_lock<std::mutex>& lock);
  // True in a child of fork() (this Loader was copied, not created, there).
  bool forked() const noexcept;
  // Throws the fork() error when forked().
  void check_not_forked() const;
  std::vector<int64_t> epoch_order(int64_t epoch) const;

  const uint64_t fork_generation_;  // First: registers the fork handler before any thread starts.
  const std::shared_ptr<const Source> source_;
  const std::shared_ptr<const SampleTransform> transform_;
  const LoaderOptions options_;
  const SampleSpec spec_;
  const int64_t sample_bytes_;  // spec_.num_bytes(); 0 for variable-shape samples.
  const int64_t samples_per_epoch_;

  // The lock and the condition variable live on the heap so that a Loader
  // destroyed in a child of fork() can leak them (see ~Loader).
  std::unique_ptr<std::mutex> mu_storage_ = std::make_unique<std::mutex>();
  std::unique_ptr<std::condition_variable> cv_storage_ = std::make_unique<std::condition_variable>();
  std::mutex& mu_ = *mu_storage_;
  std::condition_variable& cv_ = *cv_storage_;
  std::shared_ptr<detail::EpochRun> run_;

  std::atomic<int64_t> samples_read_{0};
  std::atomic<int64_t> samples_processed_{0};
  std::atomic<int64_t> read_ns_{0};
  std::atomic<int64_t> process_ns_{0};
  int64_t wait_ns_ = 0;                                  // Guarded by mu_.
  int64_t batches_delivered_ = 0;                        // Guarded by mu_.
  std::chrono::steady_clock::time_point epoch_started_;  // Guarded by mu_.

  BufferPool pool_;
  SizedBufferPool sample_pool_;  // Per-sample buffers of variable-shape batches.
  bool closed_ = false;          // Guarded by mu_.
  // Reset by close() once no task runs; read without the lock by tasks, which
  // only run before that.
  std::unique_ptr<ThreadPool> cpu_pool_;
  std::unique_ptr<ThreadPool> io_pool_;
};

}  // namespace conveyor
