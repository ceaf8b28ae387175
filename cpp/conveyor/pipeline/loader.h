#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <limits>
#include <list>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "conveyor/core/buffer_pool.h"
#include "conveyor/core/dtype.h"
#include "conveyor/core/error.h"
#include "conveyor/core/latency_histogram.h"
#include "conveyor/core/sample_transform.h"
#include "conveyor/core/thread_pool.h"
#include "conveyor/io/source.h"
#include "conveyor/ops/batch_mix.h"
#include "conveyor/pipeline/autotune.h"
#include "conveyor/pipeline/batch.h"

namespace conveyor {

/// What the loader does with a sample that fails to read or decode.
enum class OnError {
  kRaise,  ///< next() throws the sample's Error when the consumer reaches its batch.
  kSkip,   ///< The sample is left out and recorded; later samples fill the batch.
};

/// A thread count or prefetch of kAuto is chosen and adjusted by autotune
/// while the loader runs (docs/design/autotune.md); any other value pins it.
inline constexpr int kAuto = 0;

/// Options of a Loader.
struct LoaderOptions {
  int64_t batch_size = 1;
  bool shuffle = false;
  /// With shuffle: 0 shuffles the whole epoch uniformly (sources are random
  /// access); N > 0 shuffles the shard order and then through a buffer of N
  /// samples (buffered_shuffle), keeping reads local to a few shards; with
  /// world_size > 1 each rank streams shards of its own (rank_order).
  int64_t shuffle_buffer = 0;
  uint64_t seed = 0;
  bool drop_last = false;  ///< Drop the last partial batch (and, distributed, truncate instead of padding).
  int threads =
      kAuto;  ///< cpu pool size (decode, transforms); kAuto: autotune, at most the usable CPUs (core/cpu_count.h).
  int io_threads = kAuto;  ///< io pool size = reads in flight; kAuto: autotune.
  int prefetch = kAuto;    ///< Batches allowed in flight or ready ahead of the consumer; kAuto: autotune.
  /// Bytes the batch buffers may hold (prefetch + the two batches a `for`
  /// loop holds while the next is handed out), bounding an autotuned prefetch; 0 = default_memory_budget_bytes()
  /// (a quarter of the available memory). An explicit budget must hold two
  /// batches, and a pinned prefetch + 1 of them.
  int64_t memory_budget = 0;
  AutotuneOptions autotune;  ///< The control rule's knobs (its tune_* flags are set from the kAuto values).
  OnError on_error = OnError::kRaise;
  int64_t rank = 0;  ///< This process's share of each epoch (as DistributedSampler).
  int64_t world_size = 1;
  /// Processes of this job on this node that share its cores (torchrun's
  /// LOCAL_WORLD_SIZE, read by the Python layer): autotune's limit of cpu
  /// threads is then the usable CPUs (usable_cpu_count()) divided among
  /// them, at least 1, so that k ranks on one node do not each take all of
  /// it. >= 1.
  int local_processes = 1;
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

/// Where an epoch stands in its global order, as Loader.state_dict() saves
/// it: the same on every rank. `position` counts the global order's
/// positions handed out (all ranks'): with W ranks each at position p of its
/// share, segment_start + p * W. A state saved before positions were global
/// has no world size; its position is the rank's own.
struct SavedPosition {
  int64_t epoch = 0;
  int64_t position = 0;
  int64_t batch = 0;                  ///< Batches handed out.
  std::optional<int64_t> world_size;  ///< None: an older state (position is the rank's).
  int64_t segment_start = 0;          ///< Global positions an earlier world size consumed.
  /// The world size the epoch's order was made for, where the order depends
  /// on it (order_deals_shards) and it is not 1: another than world_size
  /// after an elastic resume. None: 1 (as in a state saved before orders
  /// depended on it).
  std::optional<int64_t> order_world_size;
  /// The source's epoch_size() (every rank's samples, before padding): a
  /// state of another data set (files added or removed) is refused, as its
  /// positions would skip or repeat samples. None: a state saved before
  /// states said it (not checked).
  std::optional<int64_t> samples;
};

/// Where this rank starts an epoch: Loader::start_epoch's arguments.
struct EpochStart {
  int64_t epoch = 0;
  int64_t position = 0;  ///< In this rank's order.
  int64_t batch = 0;     ///< The number of the first batch.
  int64_t segment_start = 0;
  int64_t order_world_size = 0;  ///< The world size the epoch's order is made for (0: this loader's).
};

/// Per-stage counters since the current epoch started (or were reset).
struct LoaderStats {
  int64_t epoch = 0;
  int64_t samples_read = 0;
  int64_t samples_processed = 0;
  int64_t batches_delivered = 0;
  int64_t skipped = 0;
  double read_seconds = 0;      ///< Summed over io threads.
  double process_seconds = 0;   ///< Decode + transforms, summed over cpu threads.
  double read_cpu_seconds = 0;  ///< CPU time the reads used (their threads' CPU clocks; 0 where there is none).
  /// Part of read_seconds the reads spent waiting for a lock shared with the
  /// rest of the process (Python's GIL for a Python dataset or store;
  /// core/cpu_time.h thread_lock_wait_ns()); 0 for native reads.
  double read_lock_wait_seconds = 0;
  /// Time the reads waited for a slot under a store's limit on requests in
  /// flight (HttpStore's per-host limit; core/cpu_time.h
  /// thread_queue_wait_ns()), summed over io threads; not in read_seconds
  /// (but a read that waits for another's read of a shard run counts all of
  /// that read's time, its queue wait included).
  double read_queue_wait_seconds = 0;
  double process_cpu_seconds = 0;  ///< CPU time decode + transforms used, summed over cpu threads.
  double wait_seconds = 0;         ///< Time the consumer spent blocked in next(): input stall.
  double wall_seconds = 0;         ///< Since the epoch started.
  int64_t batches_ready = 0;       ///< Complete batches waiting for the consumer (queue depth).
  int64_t batches_in_flight = 0;
  int64_t buffers_allocated = 0;  ///< Pool high-water mark.
  int64_t buffers_leased = 0;
  /// Samples processed (not skipped) per part of the source (one entry but
  /// for a mixture: Source::parts()).
  std::vector<int64_t> samples_per_part;

  // Parallelism: chosen by autotune (or pinned), and what runs now.
  int threads = 0;             ///< cpu pool size chosen.
  int io_threads = 0;          ///< io pool size chosen (= reads in flight).
  int prefetch = 0;            ///< Prefetch chosen.
  int threads_running = 0;     ///< cpu threads alive (above `threads` while a shrink finishes a task).
  int io_threads_running = 0;  ///< io threads alive.
  bool threads_auto = false;   ///< Chosen by autotune (false: pinned).
  bool io_threads_auto = false;
  bool prefetch_auto = false;
  std::string autotune_reason;      ///< Why the last change happened ("" before any).
  int64_t autotune_changes = 0;     ///< Changes since the loader started.
  double demand_per_second = 0;     ///< Samples/s the consumer asks for (autotune's estimate; 0 = unknown).
  double read_latency_seconds = 0;  ///< Smoothed read time per sample (autotune's estimate).
  double process_time_seconds = 0;  ///< Smoothed decode + transform time per sample on one thread.
  /// How far slow samples run past the mean (p90 - mean of reads + of
  /// decode and transforms, smoothed): autotune prefetches enough batches
  /// to ride it out. 0 until measured.
  double latency_spread_seconds = 0;
  int usable_cores = 0;  ///< The limit of cpu threads (affinity, cgroup quota, shared by local processes).
  /// Where usable_cores came from: "2 usable CPUs (affinity, cgroup quota)",
  /// or with LoaderOptions::local_processes > 1 "4 usable CPUs (affinity,
  /// cgroup quota) shared by 2 processes on this node".
  std::string usable_cores_source;
  /// Cores the rest of the process (the model, the training loop) uses, as
  /// autotune estimates it (0 until known); autotune keeps them from the cpu threads.
  double other_cores = 0;
  int64_t memory_budget = 0;  ///< The limit of the batch buffers, bytes.
};

/// Result of Loader::next().
struct NextResult {
  enum class Status { kBatch, kEnd, kTimeout };
  Status status = Status::kEnd;
  std::shared_ptr<Batch> batch;  ///< Set when status == kBatch.
};

namespace detail {

/// A mean read of at most this many ns is quick (reads_are_quick)...
inline constexpr int64_t kInlineReadNs = 50'000;
/// ... and so is one of at most 1/kInlineReadShare of the mean decode + transforms.
inline constexpr int64_t kInlineReadShare = 8;

/// Whether reads are quick enough to run on the cpu thread that decodes the
/// sample, from this epoch's measurements (`reads` reads taking `read_ns` in
/// all, `processed` decodes + transforms taking `process_ns`): until both
/// are measured (an epoch's start), yes; then by the two rules above:
/// waiting for the read then costs a cpu thread less than handing the
/// sample between two threads does. Pure.
bool reads_are_quick(int64_t reads, int64_t read_ns, int64_t processed, int64_t process_ns) noexcept;

struct EpochRun;
struct SampleError;
struct SlotTicket;
}  // namespace detail

/// The pipeline executor. For each sample of an epoch it reads the record on
/// the io pool (or, for quick local reads, on the cpu thread that decodes it:
/// Source::local_reads()), then decodes and transforms it on the cpu pool straight into
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
  /// The last epoch start_epoch() runs: the one after it still fits in an
  /// int64_t (a training loop's epoch + 1).
  static constexpr int64_t kMaxEpoch = std::numeric_limits<int64_t>::max() - 1;

  /// Starts the threads. Throws Error{kConfig} for invalid options, naming
  /// them: also when batch_size x bytes per sample overflows, when the epoch's
  /// order cannot fit in the machine's memory, or when the OS refuses a thread
  /// (the threads already started are joined first).
  Loader(std::shared_ptr<const Source> source, std::shared_ptr<const SampleTransform> transform, LoaderOptions options);
  /// close(): stops the epoch and joins every thread. Destroying a Loader on
  /// one of its own threads (from inside its source's read or a transform)
  /// cannot wait for that thread: it aborts the process with a message, as
  /// a std::thread destroyed while joinable does (the Python layer closes a
  /// loader collected there from another thread).
  ~Loader();

  Loader(const Loader&) = delete;
  Loader& operator=(const Loader&) = delete;

  /// Samples in one epoch for this rank (after distributed padding/truncation).
  int64_t num_samples() const noexcept { return samples_per_epoch_; }
  /// Samples for this rank in the part of an epoch left after the first
  /// `segment_start` positions of its global order (see start_epoch). Throws
  /// Error{kConfig} when `segment_start` is outside [0, source size].
  int64_t segment_samples(int64_t segment_start) const;
  /// Batches in one epoch for this rank (before any skipped samples).
  int64_t num_batches() const noexcept;
  /// Batches this rank gets from position `position` of its order on, in
  /// the part of an epoch after `segment_start` (see segment_samples): what
  /// is left of a resumed epoch (before any skipped samples). Throws
  /// Error{kConfig} when `position` is outside that part's samples. Any
  /// thread (it reads only the options).
  int64_t batches_after(int64_t position, int64_t segment_start) const;
  /// The saved position of this rank at `start` (its position and batch
  /// count in its order): global, the same on every rank. Any thread.
  SavedPosition saved_position(const EpochStart& start) const;
  /// Where this rank resumes the epoch `saved` describes: at the saved world
  /// size, exactly where it stopped (the same batches an uninterrupted run
  /// gives); at another (elastic resume), what the old ranks left of the
  /// epoch's global order is dealt among this world's ranks from its start.
  /// Throws Error{kConfig} naming the key ("state['position'] must be >= 4,
  /// got 3") when `saved` cannot come from this loader's state_dict(). Any
  /// thread (it reads only the options and the source's size).
  EpochStart resume_point(const SavedPosition& saved) const;
  const LoaderOptions& options() const noexcept { return options_; }
  SampleSpec sample_spec() const { return spec_; }

  /// Stops any running epoch and starts `epoch`, beginning at position
  /// `start_position` of this rank's order, numbering batches from `start_batch`.
  ///
  /// The epoch's global order (every rank's samples) is one permutation of
  /// the source; rank r of W takes its positions r, r + W, r + 2W, ... (padded
  /// or truncated as DistributedSampler). With `segment_start` > 0 only the
  /// global order's positions from `segment_start` on are dealt that way:
  /// what is left of an epoch that ranks of another world size had begun
  /// (elastic resume), so that over the epoch each sample is seen once: that
  /// epoch's order is the one made for their world, `order_world_size` (0:
  /// this loader's; see rank_order).
  void start_epoch(int64_t epoch, int64_t start_position = 0, int64_t start_batch = 0, int64_t segment_start = 0,
                   int64_t order_world_size = 0);

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

  /// Sets the pools and prefetch now (a value <= 0 leaves that setting as it
  /// is), e.g. for tools and tests; autotune may change the settings it
  /// tunes again. Order and output do not depend on them. Throws
  /// Error{kConfig} once closed. May be called from any thread.
  void set_parallelism(int threads, int io_threads, int prefetch);

  /// True when the calling thread is one of this loader's own, running a
  /// read, a transform or a batch mix for it. Any thread.
  bool on_own_thread() const noexcept;

  /// Throws Error{kConfig} naming `call` (e.g. "close()") when on_own_thread(),
  /// where start_epoch(), next(), stop(), close() and set_parallelism() would
  /// wait for that thread to finish, i.e. forever; they call it first. A
  /// layer above calls it before changing its own state for such a call.
  /// Any thread.
  void check_not_reentered(std::string_view call) const;

  /// Autotune's trace lines since the last call (its decisions with their
  /// reasons, oldest first; at most 256 kept). Any thread.
  std::vector<std::string> autotune_trace();
  /// Samples skipped so far in the current epoch, in order.
  std::vector<SkippedSample> skipped() const;

 private:
  // Batches of `samples` samples (drop_last drops a partial one).
  int64_t batches_of(int64_t samples) const noexcept;
  // Throws the start_epoch() error when `position` is outside [0, samples].
  static void check_start_position(int64_t position, int64_t samples);
  void issue_locked(detail::EpochRun& run);
  void issue_unguarded_locked(detail::EpochRun& run);
  // Where a sample's read runs: on the cpu thread that then decodes it
  // (sample_task) when the source's reads are local (Source::local_reads) and
  // quick (detail::reads_are_quick), or its bytes are at hand
  // (read_at_hand), else on the io pool (read_task), which hands the record
  // to the cpu pool.
  bool reads_inline() const noexcept;
  // `at_hand`: issued as a read at hand (read_at_hand), read here whatever
  // the measured read times.
  void sample_task(const std::shared_ptr<detail::EpochRun>& run, detail::SlotTicket task, bool at_hand);
  // Whether a remote source's `sample` needs no request now: a URL whose
  // object a cache holds, or a sample the epoch's read plan holds in memory
  // (Source::read_is_at_hand). Its read is
  // then inline too.
  bool read_at_hand(const detail::EpochRun& run, std::optional<int64_t> sample) const noexcept;
  // A read that start_read_locked began: it holds one of async_reads_ until
  // it ends. `attempt`: its asynchronous attempt, which gave no record and
  // which the read continues (Source::read_after), started at `started_ns`
  // after `queue_wait_ns` in a store's queue; null for a read the source
  // could not start so.
  struct StartedRead {
    std::shared_ptr<RemoteAttempt> attempt;
    int64_t started_ns = 0;
    int64_t queue_wait_ns = 0;
  };
  // `started`: a read start_read_locked began, whose slot it frees.
  void read_task(const std::shared_ptr<detail::EpochRun>& run, detail::SlotTicket task,
                 std::optional<StartedRead> started = std::nullopt);
  // Reads the sample of `task`; nothing when the task has ended (its slot was
  // reassigned, the run cancelled, or the read failed: then recorded).
  std::optional<Record> read_sample(const std::shared_ptr<detail::EpochRun>& run, detail::SlotTicket task,
                                    const StartedRead* started_read = nullptr);
  // A read off the cpu threads, at most async_limit_ (io_threads) in flight,
  // the rest waiting in async_waiting_, in order: started without a thread
  // waiting for it where the source can (Source::start_read: a URL's bytes
  // land on the store's thread, which hands them to the cpu pool,
  // read_done), else on the io pool (read_task).
  void start_read_locked(detail::EpochRun& run, detail::SlotTicket task);
  // Starts the read of `sample` for `task`, which holds a slot. Throws when
  // it cannot be started.
  void start_read(const std::shared_ptr<detail::EpochRun>& run, detail::SlotTicket task, int64_t sample);
  // A started read ended: frees its slot and starts the reads waiting for
  // one. Without mu_: on the store's thread or an io thread.
  void end_started_read() noexcept;
  // A started read's task that cannot go on (a failure to submit): ends it
  // and the epoch with the error. Takes mu_; the _locked one runs under it.
  void fail_started_read(detail::EpochRun& run, detail::SlotTicket task, const std::exception& e) noexcept;
  void fail_started_read_locked(detail::EpochRun& run, detail::SlotTicket task, const std::exception& e) noexcept;
  // An asynchronous read ended, on the store's thread, which must not wait
  // for mu_ (other transfers would wait with it): counts it and hands the
  // record to the cpu pool, or what failed to the io pool, where the read
  // goes on (retries, its error) holding its slot.
  void read_done(std::shared_ptr<detail::EpochRun> run, detail::SlotTicket task, int64_t sample, int64_t started_ns,
                 AsyncRead end) noexcept;
  // Ends the tasks of `run`'s waiting reads that no longer have a sample
  // (the run failed or stopped, or a skip shifted their slots): they never
  // start. Under mu_, before issuing (their slots are free again).
  void end_stale_waiting_reads_locked(detail::EpochRun& run);
  // Starts waiting reads while io_threads has room for them; `holding_mu`:
  // the caller holds mu_.
  void start_waiting_reads(bool holding_mu) noexcept;
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
  // The one snapshot of the counters, as they are now with a wait under way
  // since `waiting_since_ns` (0: none): what autotune reads and what stats()
  // reports.
  AutotuneCounters counters_locked(int64_t waiting_since_ns) const;
  // Autotune hooks (the policy is in autotune.cc).
  // Closes autotune's window if it ended and applies a change.
  void autotune_tick_locked(int64_t waiting_since_ns);
  // Resizes the pools and the running epoch's prefetch to `settings`.
  void apply_settings_locked(const AutotuneSettings& settings);

  const uint64_t fork_generation_;  // First: registers the fork handler before any thread starts.
  const std::shared_ptr<const Source> source_;
  const std::shared_ptr<const SampleTransform> transform_;
  const LoaderOptions options_;
  const SampleSpec spec_;
  const int64_t sample_bytes_;  // spec_.num_bytes(); 0 for variable-shape samples.
  const int64_t samples_per_epoch_;
  const bool local_reads_;   // source_->local_reads(), asked once.
  const bool starts_reads_;  // source_->starts_reads(), asked once.
  // order_deals_shards(): asked once, as it lists the source's shards.
  const bool order_deals_shards_;

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
  std::atomic<int64_t> read_cpu_ns_{0};                  // Thread CPU time of reads (autotune: the loader's own CPU).
  std::atomic<int64_t> read_lock_wait_ns_{0};            // Reads' wait for the GIL (thread_lock_wait_ns()).
  std::atomic<int64_t> read_queue_wait_ns_{0};           // Reads' wait for a store's slot (not in read_ns_).
  std::atomic<int64_t> process_cpu_ns_{0};               // Thread CPU time of decode + transforms.
  LatencyHistogram read_latency_;                        // Each read's latency (autotune's spread).
  LatencyHistogram process_latency_;                     // Each decode + transforms' time.
  int64_t wait_ns_ = 0;                                  // Guarded by mu_.
  int64_t batches_delivered_ = 0;                        // Guarded by mu_.
  int64_t consumer_steps_ = 0;                           // Guarded by mu_ (autotune's demand).
  int64_t consumer_step_ns_ = 0;                         // Guarded by mu_.
  int64_t last_batch_returned_ns_ = 0;                   // Guarded by mu_; 0: no step under way.
  int64_t consumer_run_delay_ns_ = 0;                    // Guarded by mu_: the consumer's wait for a core.
  int64_t last_run_delay_ns_ = -1;                       // Guarded by mu_: at the last next(); -1: none.
  std::thread::id last_run_delay_thread_;                // Guarded by mu_: the thread that read it.
  std::chrono::steady_clock::time_point epoch_started_;  // Guarded by mu_.

  BufferPool pool_;
  std::vector<std::atomic<int64_t>> part_samples_;  // Per Source::parts(); sized once.
  const int64_t memory_budget_;
  std::unique_ptr<LoaderAutotune> autotune_;  // Guarded by mu_.
  AutotuneSettings settings_;                 // Guarded by mu_: what the pools are set to.
  // Reads begun by start_read_locked, guarded by async_mu_, which is held
  // for these alone (never while reading or waiting), so that
  // the store's thread never waits on mu_: how many are in flight (each
  // until its record is handed off or its read_task ends), the most
  // (settings_.io_threads), those waiting for room in order (with their
  // samples, taken under mu_ when issued), and the read_done calls under
  // way, which close() waits for (the pools they hand to must outlive them).
  struct WaitingRead;  // loader.cc
  std::unique_ptr<std::mutex> async_mu_storage_ = std::make_unique<std::mutex>();
  std::unique_ptr<std::condition_variable> async_cv_storage_ = std::make_unique<std::condition_variable>();
  std::mutex& async_mu_ = *async_mu_storage_;
  std::condition_variable& async_cv_ = *async_cv_storage_;
  int async_reads_ = 0;
  int async_limit_ = 0;
  std::list<WaitingRead> async_waiting_;  // A list: WaitingRead is incomplete here.
  int async_handoffs_ = 0;
  SizedBufferPool sample_pool_;  // Per-sample buffers of variable-shape batches.
  bool closed_ = false;          // Guarded by mu_.
  // Reset by close() once no task runs; read without the lock by tasks, which
  // only run before that.
  std::unique_ptr<ThreadPool> cpu_pool_;
  std::unique_ptr<ThreadPool> io_pool_;
};

}  // namespace conveyor
