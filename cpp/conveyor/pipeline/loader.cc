#include "conveyor/pipeline/loader.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <iterator>
#include <limits>
#include <new>
#include <optional>
#include <span>
#include <stdexcept>
#include <utility>

#include "conveyor/core/cancellation.h"
#include "conveyor/core/checked_size.h"
#include "conveyor/core/cpu_count.h"
#include "conveyor/core/cpu_time.h"
#include "conveyor/core/error.h"
#include "conveyor/core/fork_guard.h"
#include "conveyor/core/number_format.h"
#include "conveyor/core/rng.h"
#include "conveyor/pipeline/epoch_order.h"
#include "conveyor/pipeline/epoch_run.h"

namespace conveyor {

using detail::EpochRun;
using detail::NextStep;
using detail::queue_order;
using detail::SampleError;
using detail::SlotTicket;

// A read waiting for room among those in flight (start_read_locked), with
// the sample its task had when it was issued.
struct Loader::WaitingRead {
  std::shared_ptr<EpochRun> run;
  SlotTicket task;
  int64_t sample = 0;
};

namespace {

// A failure to submit work (a thread that cannot start, a full queue's
// allocation): the epoch ends with it.
SampleError cannot_start(const std::exception& e) {
  return {ErrorKind::kInternal, std::string("cannot start more work: ") + e.what(), {}};
}

LoaderOptions validated(LoaderOptions options, const Source& source) {
  check_config(options.batch_size >= 1, "batch_size must be >= 1, got " + std::to_string(options.batch_size));
  check_config(options.prefetch >= 0, "prefetch must be >= 0 (0: auto), got " + std::to_string(options.prefetch));
  check_config(options.shuffle_buffer >= 0,
               "shuffle_buffer must be >= 0, got " + std::to_string(options.shuffle_buffer));
  check_config(options.threads >= 0, "threads must be >= 0 (0: auto), got " + std::to_string(options.threads));
  check_config(options.io_threads >= 0, "io_threads must be >= 0 (0: auto), got " + std::to_string(options.io_threads));
  check_config(options.memory_budget >= 0,
               "memory_budget must be >= 0 (0: default), got " + std::to_string(options.memory_budget));
  check_config(options.world_size >= 1, "world_size must be >= 1, got " + std::to_string(options.world_size));
  check_config(options.local_processes >= 1,
               "local_processes must be >= 1, got " + std::to_string(options.local_processes));
  check_config(options.rank >= 0 && options.rank < options.world_size, "rank must be in [0, world_size), got rank " +
                                                                           std::to_string(options.rank) + " of " +
                                                                           std::to_string(options.world_size));
  check_config(source.size() > 0, "the source has no samples");
  check_config(options.shuffle_buffer == 0 || source.parts() == 1,
               "shuffle_buffer does not apply to a mixture of sources (its order is random access)");
  return options;
}

// The batch mix as the user wrote it: MixUp, CutMix, or RandomChoice of them.
std::string mix_name(const BatchMixSpec& spec) {
  return spec.options.size() == 1 ? std::string(mix_kind_name(spec.options.front().kind)) : "RandomChoice";
}

// A batch's soft labels (batch_size x num_classes float32; 0 without a
// batch mix): memory each batch holds beside its images.
int64_t soft_label_bytes(const LoaderOptions& options) {
  if (!options.batch_mix) return 0;
  const std::string what = mix_name(*options.batch_mix) + ": the soft labels of a batch";
  // A num_classes below 1 is check_batch_mix's to name.
  const int64_t classes = std::max<int64_t>(0, options.batch_mix->num_classes);
  return checked_mul(checked_mul(options.batch_size, classes, what), 4, what);
}

// The bytes of one batch that the memory budget counts: its images and its
// soft labels.
int64_t batch_bytes(const LoaderOptions& options, size_t buffer_bytes) {
  return checked_add(static_cast<int64_t>(buffer_bytes), soft_label_bytes(options), "the bytes of a batch");
}

AutotuneOptions with_network_reads(AutotuneOptions options, bool network_reads) {
  options.network_reads = network_reads;
  return options;
}

// The memory budget: the option, else the default. It must hold a batch
// mix's soft labels of one batch (they are allocated per batch, whatever the
// prefetch), and an explicit one the batches a pinned prefetch needs, at
// least two (one being prepared, one with the consumer).
int64_t memory_budget_for(const LoaderOptions& options, size_t buffer_bytes) {
  const int64_t budget = options.memory_budget == 0 ? default_memory_budget_bytes() : options.memory_budget;
  const int64_t soft = soft_label_bytes(options);
  if (options.batch_mix) {
    check_config(soft <= budget, mix_name(*options.batch_mix) + ": num_classes " +
                                     std::to_string(options.batch_mix->num_classes) + " makes soft labels of " +
                                     std::to_string(soft) +
                                     " bytes per batch (batch_size x num_classes float32), more than memory_budget (" +
                                     std::to_string(budget) + " bytes)");
  }
  if (options.memory_budget == 0) return budget;
  const int64_t bytes = batch_bytes(options, buffer_bytes);
  const int64_t batches = std::max<int64_t>(2, options.prefetch + int64_t{1});
  const double needed = static_cast<double>(batches) * static_cast<double>(bytes);
  check_config(static_cast<double>(budget) >= needed,
               "memory_budget " + std::to_string(budget) + " bytes cannot hold " + std::to_string(batches) +
                   " batches of " + std::to_string(bytes) + " bytes" +
                   (options.prefetch > 0 ? " (prefetch " + std::to_string(options.prefetch) + " + the consumer's)"
                                         : " (one being prepared, one with the consumer)"));
  return budget;
}

// A pool of `threads` threads; when the OS refuses one, the error says which
// option to lower.
std::unique_ptr<ThreadPool> start_pool(int threads, const char* name, const char* option) {
  try {
    return std::make_unique<ThreadPool>(threads, name);
  } catch (const Error& e) {
    throw Error(e.kind(), e.cause() + ": lower " + option + " or raise the process's limits");
  }
}

}  // namespace

Loader::Loader(std::shared_ptr<const Source> source, std::shared_ptr<const SampleTransform> transform,
               LoaderOptions options)
    : fork_generation_(fork_generation()),
      source_((check_config(source != nullptr, "source must not be null"), std::move(source))),
      transform_((check_config(transform != nullptr, "transform must not be null"), std::move(transform))),
      options_(validated(std::move(options), *source_)),
      spec_(transform_->output_spec()),
      // Checked: at most INT64_MAX.
      sample_bytes_(transform_->fixed_shape() ? static_cast<int64_t>(spec_.num_bytes()) : 0),
      samples_per_epoch_(samples_per_rank_of_an_order_that_fits(*source_, options_)),
      local_reads_(source_->local_reads()),
      starts_reads_(source_->starts_reads()),
      order_deals_shards_(order_deals_shards(*source_, options_)),
      // The one product every slot offset derives from: checked here, so
      // `slot * sample_bytes_` below cannot overflow. Its rows: batch_size,
      // or the epoch's samples when fewer (EpochRun::rows).
      pool_(static_cast<size_t>(checked_mul(std::min(options_.batch_size, samples_per_epoch_), sample_bytes_,
                                            "the batch buffer (rows x bytes per sample)")),
            options_.allocator),
      part_samples_(static_cast<size_t>(std::max(1, source_->parts()))),
      memory_budget_(memory_budget_for(options_, pool_.buffer_bytes())),
      autotune_(std::make_unique<LoaderAutotune>(
          options_.batch_size, batch_bytes(options_, pool_.buffer_bytes()), memory_budget_,
          AutotuneSettings{options_.threads, options_.io_threads, options_.prefetch},
          with_network_reads(options_.autotune, source_->network_reads()),
          [processes = options_.local_processes] { return std::max(1, usable_cpu_count() / processes); })),
      settings_(autotune_->initial_settings()),
      sample_pool_(options_.allocator),
      cpu_pool_(start_pool(settings_.cpu_threads, "conveyor-cpu", "threads")),
      io_pool_(start_pool(settings_.io_threads, "conveyor-io", "io_threads")) {
  async_limit_ = settings_.io_threads;
  check_config(sample_bytes_ > 0 || !transform_->fixed_shape(), "the transform produces empty samples");
  if (options_.batch_mix) check_batch_mix(*options_.batch_mix, spec_);
  check_config(samples_per_epoch_ > 0,
               "world_size " + std::to_string(options_.world_size) + " leaves no sample for each rank with drop_last");
}

Loader::~Loader() {
  if (forked()) {
    // A child of fork() has only the thread that forked: the pools' threads
    // are gone, so joining them would wait forever, and the lock and the
    // condition variable may have been held or waited on by threads that no
    // longer exist (destroying such a condition variable blocks). Leak them;
    // they are the child's copy of the parent's memory, nothing more. The
    // buffer pool leaks its buffers the same way (BufferPool).
    (void)cpu_pool_.release();
    (void)io_pool_.release();
    (void)mu_storage_.release();
    (void)cv_storage_.release();
    (void)async_mu_storage_.release();
    (void)async_cv_storage_.release();
    return;
  }
  if (on_own_thread()) {
    std::fputs(
        "conveyor: a Loader was destroyed on one of its own threads (inside its source's read or a "
        "transform), where it cannot wait for them to finish; aborting\n",
        stderr);
    std::abort();
  }
  close();
}

namespace {

// The Loader whose task the calling thread runs (null outside tasks): a
// user's read or transform that calls back into its loader is refused
// instead of waiting for itself.
thread_local const Loader* t_task_of = nullptr;

class TaskScope {
 public:
  explicit TaskScope(const Loader* loader) : previous_(t_task_of) { t_task_of = loader; }
  ~TaskScope() { t_task_of = previous_; }
  TaskScope(const TaskScope&) = delete;
  TaskScope& operator=(const TaskScope&) = delete;

 private:
  const Loader* previous_;
};

}  // namespace

bool Loader::on_own_thread() const noexcept { return t_task_of == this; }

void Loader::check_not_reentered(std::string_view call) const {
  if (on_own_thread()) {
    throw Error(ErrorKind::kConfig, std::string(call) +
                                        " was called from one of the loader's own threads (in the source's read or "
                                        "a transform), where it would wait for that thread to finish: call it from "
                                        "the code that iterates the loader");
  }
}

bool Loader::forked() const noexcept { return fork_generation() != fork_generation_; }

void Loader::check_not_forked() const {
  if (forked()) {
    throw Error(ErrorKind::kConfig, "this Loader was created before fork(); create a new Loader in the child process");
  }
}

void Loader::close() {
  if (forked()) return;  // Nothing to stop or join in the child (see ~Loader).
  check_not_reentered("close()");
  {
    std::unique_lock lock(mu_);
    stop_locked(lock);
    if (closed_) return;
    closed_ = true;
  }
  {
    // No read is in flight (stop_locked waited for every task), but the
    // store's thread may still be handing the last one off (read_done).
    std::unique_lock lock(async_mu_);
    async_cv_.wait(lock, [&] { return async_handoffs_ == 0; });
  }
  // No task runs (stop_locked waited) and none can start: joining is safe.
  // Both pools are joined before either is destroyed: a cpu thread hands
  // slow reads to the io pool and an io thread its record to the cpu pool,
  // and the last such hand-off of the epoch may still be inside the other
  // pool's submit() (TSan saw it) after its task ran and ended the epoch.
  io_pool_->shutdown();
  cpu_pool_->shutdown();
  io_pool_.reset();
  cpu_pool_.reset();
}

int64_t Loader::num_batches() const noexcept { return batches_of(samples_per_epoch_); }

int64_t Loader::batches_of(int64_t samples) const noexcept {
  const int64_t b = options_.batch_size;
  return options_.drop_last ? samples / b : ceil_div(samples, b);
}

void Loader::check_start_position(int64_t position, int64_t samples) {
  check_config(
      position >= 0 && position <= samples,
      "start position " + std::to_string(position) + " is outside the epoch's " + std::to_string(samples) + " samples");
}

int64_t Loader::batches_after(int64_t position, int64_t segment_start) const {
  const int64_t samples = segment_samples(segment_start);
  check_start_position(position, samples);
  return batches_of(samples - position);
}

SavedPosition Loader::saved_position(const EpochStart& start) const {
  SavedPosition saved{start.epoch, start.segment_start + start.position * options_.world_size, start.batch,
                      options_.world_size, start.segment_start};
  saved.samples = source_->epoch_size();
  const int64_t order_world = start.order_world_size > 0 ? start.order_world_size : options_.world_size;
  if (order_world != 1 && order_deals_shards_) saved.order_world_size = order_world;
  return saved;
}

EpochStart Loader::resume_point(const SavedPosition& saved) const {
  const auto check_key = [](int64_t value, const char* key, int64_t minimum, int64_t maximum) {
    const std::string what = std::string("state['") + key + "']";
    check_config(value >= minimum, what + " must be >= " + std::to_string(minimum) + ", got " + std::to_string(value));
    check_config(value <= maximum, what + " must be <= " + std::to_string(maximum) + ", got " + std::to_string(value));
  };
  constexpr int64_t kMost = std::numeric_limits<int64_t>::max();
  const int64_t world = options_.world_size;
  const int64_t n = source_->epoch_size();
  check_key(saved.epoch, "epoch", 0, kMaxEpoch);
  check_config(!saved.samples || *saved.samples == n,
               "state was saved over " + std::to_string(saved.samples.value_or(0)) +
                   " samples per epoch, this loader's source has " + std::to_string(n) +
                   ": its positions would skip or repeat samples. Resume over the same data, or start the next "
                   "epoch without load_state_dict (set_epoch(state['epoch'] + 1))");
  int64_t saved_world = world;
  int64_t position = 0;
  int64_t segment = 0;
  int64_t order_world = saved.order_world_size.value_or(1);
  check_key(order_world, "order_world_size", 1, kMost);
  if (saved.world_size) {
    saved_world = *saved.world_size;
    check_key(saved_world, "world_size", 1, kMost);
    segment = saved.segment_start;
    check_key(segment, "segment_start", 0, n);
    // The saved world's positions end with its share of what was left at
    // the segment, padded (or truncated) for it: past the source's size.
    // Another world's loader may have padded where this one truncates.
    const int64_t left = n - segment;
    const int64_t per_rank =
        options_.drop_last && saved_world == world ? left / saved_world : ceil_div(left, saved_world);
    // per_rank * saved_world <= left + saved_world - 1.
    const int64_t end = saved_world <= kMost - n ? segment + per_rank * saved_world : kMost;
    check_key(saved.position, "position", segment, end);
    position = saved.position;
  } else {
    check_key(saved.position, "position", 0, samples_per_epoch_);
    position = saved.position * world;
  }
  // Nothing of the epoch handed out: its order is made for this world.
  if (position == 0) order_world = 0;
  if (saved_world != world) {
    // Each batch a rank handed out took at least one position.
    check_key(saved.batch, "batch", 0, position);
    return {saved.epoch, 0, saved.batch, std::min(position, n), order_world};
  }
  check_config((position - segment) % world == 0,
               "state['position'] = " + std::to_string(position) + " is not a whole number of steps of " +
                   std::to_string(world) + " ranks from state['segment_start'] = " + std::to_string(segment));
  const int64_t local = (position - segment) / world;
  check_key(saved.batch, "batch", 0, batches_after(0, segment));
  // Each batch handed out covers at least batch_size positions, except the
  // last one of the epoch.
  check_config(std::min(saved.batch * options_.batch_size, segment_samples(segment)) <= local,
               "state['batch'] = " + std::to_string(saved.batch) + " batches of " +
                   std::to_string(options_.batch_size) + " need more than position " + std::to_string(local) +
                   " of the epoch: was it saved with a smaller batch_size? Load it into a loader with that batch_size");
  return {saved.epoch, local, saved.batch, segment, order_world};
}

int64_t Loader::segment_samples(int64_t segment_start) const {
  const int64_t n = source_->epoch_size();
  check_config(
      segment_start >= 0 && segment_start <= n,
      "segment start " + std::to_string(segment_start) + " is outside the epoch's " + std::to_string(n) + " samples");
  return segment_start == 0 ? samples_per_epoch_ : samples_per_rank(n - segment_start, options_);
}

void Loader::start_epoch(int64_t epoch, int64_t start_position, int64_t start_batch, int64_t segment_start,
                         int64_t order_world_size) {
  check_not_forked();
  check_not_reentered("start_epoch()");
  const int64_t samples = segment_samples(segment_start);
  check_start_position(start_position, samples);
  check_config(start_batch >= 0, "start batch must be >= 0");
  check_config(epoch >= 0 && epoch <= kMaxEpoch,
               "epoch " + std::to_string(epoch) + " is outside [0, " + std::to_string(kMaxEpoch) + "]");
  check_config(order_world_size >= 0,
               "order world size must be >= 0 (0: this loader's world size), got " + std::to_string(order_world_size));
  std::vector<int64_t> order;
  try {
    // Outside the lock: O(n) for a shuffle.
    order = rank_order(*source_, options_, epoch, segment_start, samples,
                       order_world_size > 0 ? order_world_size : options_.world_size);
  } catch (const std::bad_alloc&) {
    throw order_too_large(*source_, options_);
  } catch (const std::length_error&) {
    throw order_too_large(*source_, options_);
  }
  std::shared_ptr<ReadPlan> read_plan;
  try {
    read_plan = source_->plan_reads(std::span(order).subspan(static_cast<size_t>(start_position)));
  } catch (const std::exception&) {
    // Out of memory for the plan: each sample is read alone, as without one.
  }
  std::unique_lock lock(mu_);
  check_config(!closed_, "the loader is closed");
  stop_locked(lock);
  auto run = std::make_shared<EpochRun>(epoch, std::move(order), start_position, start_batch, options_.batch_size,
                                        settings_.prefetch);
  run->read_plan = std::move(read_plan);
  run->mixes = options_.batch_mix.has_value();
  run->variable = !transform_->fixed_shape();
  run_ = run;
  consumer_steps_ = 0;
  consumer_step_ns_ = 0;
  last_batch_returned_ns_ = 0;
  consumer_run_delay_ns_ = 0;
  last_run_delay_ns_ = -1;
  samples_read_ = 0;
  samples_processed_ = 0;
  for (auto& count : part_samples_) count = 0;
  read_ns_ = 0;
  process_ns_ = 0;
  read_cpu_ns_ = 0;
  read_lock_wait_ns_ = 0;
  read_queue_wait_ns_ = 0;
  process_cpu_ns_ = 0;
  wait_ns_ = 0;
  batches_delivered_ = 0;
  epoch_started_ = std::chrono::steady_clock::now();
  autotune_->begin_epoch(steady_ns(), counters_locked(0));
  issue_locked(*run);
}

void Loader::issue_locked(EpochRun& run) {
  // Runs on pool threads too, where an exception would terminate the process:
  // a failure to allocate or submit ends the epoch with an error for next().
  try {
    issue_unguarded_locked(run);
  } catch (const std::bad_alloc&) {
    // Nearly always the next batch's buffer, the one allocation that scales
    // with batch_size.
    run.fail(SampleError{ErrorKind::kInternal,
                         "out of memory for the next batch (its buffer is " +
                             human_bytes(static_cast<double>(pool_.buffer_bytes())) + ": batch_size " +
                             std::to_string(options_.batch_size) + " x " + std::to_string(sample_bytes_) +
                             " bytes per sample)",
                         {}});
    cv_.notify_all();
  } catch (const Error& e) {
    // Already says what failed (e.g. "allocator: allocate(N) raised ..."):
    // kept as it is, with its kind.
    run.fail(SampleError::from(e, {}));
    cv_.notify_all();
  } catch (const std::exception& e) {
    run.fail(cannot_start(e));
    cv_.notify_all();
  }
  // A failure here ended the run: its waiting reads never start.
  if (run.cancelled) end_stale_waiting_reads_locked(run);
}

void Loader::issue_unguarded_locked(EpochRun& run) {
  while (std::optional<SlotTicket> task = run.assign_next_slot(pool_)) {
    try {
      const bool at_hand = read_at_hand(run, run.sample_for(*task));
      if (at_hand || reads_inline()) {
        cpu_pool_->submit_in_order(queue_order(*task, run.rows), [this, run = run.shared_from_this(), task = *task,
                                                                  at_hand] { sample_task(run, task, at_hand); });
      } else {
        start_read_locked(run, *task);
      }
    } catch (...) {
      run.end_task(*task);  // It never started: stop() must not wait for it.
      throw;
    }
  }
}

namespace {

// The sample's key for an error or a record. Never throws: it runs in pool
// tasks and in their catch handlers, where an exception would terminate.
std::string key_of(const Source& source, int64_t sample) noexcept {
  try {
    return source.key(sample);
  } catch (...) {
    try {
      return "sample " + std::to_string(sample);
    } catch (...) {
      return {};  // Out of memory even for that: the error names no key.
    }
  }
}

}  // namespace

bool Loader::reads_inline() const noexcept {
  // A read that may wait on a network (timeouts, retries, backoff) must not
  // hold a cpu thread: other reads could not start meanwhile.
  if (!local_reads_) return false;
  return detail::reads_are_quick(
      samples_read_.load(std::memory_order_relaxed), read_ns_.load(std::memory_order_relaxed),
      samples_processed_.load(std::memory_order_relaxed), process_ns_.load(std::memory_order_relaxed));
}

bool detail::reads_are_quick(int64_t reads, int64_t read_ns, int64_t processed, int64_t process_ns) noexcept {
  // Until both are measured, inline: each cpu thread reads at most one
  // sample before the first one is processed; a slow read then sends the
  // rest to the io pool (the tasks queued meanwhile pass their reads on when
  // they start).
  if (reads == 0 || processed == 0) return true;
  const int64_t latency = read_ns / reads;
  return latency <= kInlineReadNs || latency * kInlineReadShare <= process_ns / processed;
}

bool Loader::read_at_hand(const EpochRun& run, std::optional<int64_t> sample) const noexcept {
  // A URL whose object a cache holds reads a local file, and a sample of a
  // run read already slices memory: like a local source's quick read, on
  // the decoding thread, which spares a hand-off to an io thread and back (a
  // cached epoch ran at ~0.92 x the local files' rate through the io pool).
  if (local_reads_ || !sample) return false;
  try {
    return source_->read_is_at_hand(*sample, run.read_plan.get());
  } catch (...) {
    return false;  // The read names what is wrong.
  }
}

void Loader::sample_task(const std::shared_ptr<EpochRun>& run, SlotTicket task, bool at_hand) {
  const TaskScope scope(this);
  if (!at_hand && !reads_inline()) {
    // Reads turned out slow since this task was queued: a cpu thread must
    // not wait for one.
    io_pool_->submit([this, run, task] { read_task(run, task); });
    return;
  }
  if (std::optional<Record> record = read_sample(run, task)) process_task(run, task, std::move(*record));
}

void Loader::start_read_locked(EpochRun& run, SlotTicket task) {
  const std::optional<int64_t> sample = run.sample_for(task);
  if (!sample || run.read_plan != nullptr || !starts_reads_) {
    // An ended task ends on the io pool; a planned read is the plan's.
    io_pool_->submit([this, run = run.shared_from_this(), task] { read_task(run, task); });
    return;
  }
  {
    std::lock_guard lock(async_mu_);
    if (async_reads_ >= async_limit_ || !async_waiting_.empty()) {
      async_waiting_.push_back({run.shared_from_this(), task, *sample});
      return;
    }
    ++async_reads_;
  }
  try {
    start_read(run.shared_from_this(), task, *sample);
  } catch (...) {
    std::lock_guard lock(async_mu_);
    --async_reads_;
    throw;
  }
}

void Loader::start_read(const std::shared_ptr<EpochRun>& run, SlotTicket task, int64_t sample) {
  if (source_->start_read(sample, &run->stopping,
                          [this, run, task, sample, started_ns = steady_ns()](AsyncRead end) mutable noexcept {
                            read_done(std::move(run), task, sample, started_ns, std::move(end));
                          })) {
    return;
  }
  io_pool_->submit([this, run, task] { read_task(run, task, StartedRead{}); });
}

void Loader::end_started_read() noexcept {
  {
    std::lock_guard lock(async_mu_);
    --async_reads_;
  }
  start_waiting_reads(/*holding_mu=*/false);
}

void Loader::start_waiting_reads(bool holding_mu) noexcept {
  std::unique_lock lock(async_mu_);
  while (!async_waiting_.empty() && async_reads_ < async_limit_) {
    WaitingRead next = std::move(async_waiting_.front());
    async_waiting_.pop_front();
    ++async_reads_;
    lock.unlock();
    try {
      start_read(next.run, next.task, next.sample);
    } catch (const std::exception& e) {
      lock.lock();
      --async_reads_;
      lock.unlock();
      if (holding_mu) {
        fail_started_read_locked(*next.run, next.task, e);
      } else {
        fail_started_read(*next.run, next.task, e);
      }
    }
    lock.lock();
  }
}

void Loader::fail_started_read(EpochRun& run, SlotTicket task, const std::exception& e) noexcept {
  std::lock_guard lock(mu_);
  fail_started_read_locked(run, task, e);
}

void Loader::fail_started_read_locked(EpochRun& run, SlotTicket task, const std::exception& e) noexcept {
  run.end_task(task);    // It will not run: stop() must not wait for it.
  if (!run.cancelled) {  // A stopped run ends without an error.
    try {
      run.fail(cannot_start(e));
    } catch (...) {
      run.fail(SampleError{ErrorKind::kInternal, {}, {}});  // Out of memory even for the message.
    }
  }
  end_stale_waiting_reads_locked(run);
  cv_.notify_all();
}

void Loader::end_stale_waiting_reads_locked(EpochRun& run) {
  std::lock_guard lock(async_mu_);
  std::erase_if(async_waiting_, [&](const WaitingRead& waiting) {
    if (waiting.run.get() != &run || run.sample_for(waiting.task)) return false;
    run.end_task(waiting.task);
    return true;
  });
}

void Loader::read_done(std::shared_ptr<EpochRun> run, SlotTicket task, int64_t sample, int64_t started_ns,
                       AsyncRead end) noexcept {
  {
    std::lock_guard lock(async_mu_);
    ++async_handoffs_;
  }
  if (end.record) {
    // As read_sample counts a read. The CPU it took was the store's thread's.
    read_queue_wait_ns_ += end.queue_wait_ns;
    const int64_t read_ns = std::max<int64_t>(0, steady_ns() - started_ns - end.queue_wait_ns);
    read_ns_ += read_ns;
    read_latency_.record(read_ns);
    ++samples_read_;
    try {
      if (end.record->key.empty()) end.record->key = key_of(*source_, sample);
      cpu_pool_->submit_in_order(
          queue_order(task, run->rows),
          [this, run, task, record = std::move(*end.record)]() mutable { process_task(run, task, std::move(record)); });
    } catch (const std::exception& e) {
      fail_started_read(*run, task, e);
    }
    end_started_read();
  } else {
    // The read goes on where it may wait, its slot held until it ends.
    try {
      io_pool_->submit(
          [this, run, task, started = StartedRead{std::move(end.attempt), started_ns, end.queue_wait_ns}]() mutable {
            read_task(run, task, std::move(started));
          });
    } catch (const std::exception& e) {
      fail_started_read(*run, task, e);
      end_started_read();
    }
  }
  // Not the last reference on this thread once close() may have returned.
  run.reset();
  std::lock_guard lock(async_mu_);
  // Under the lock: close() may destroy async_cv_ once it sees 0.
  if (--async_handoffs_ == 0) async_cv_.notify_all();
}

void Loader::read_task(const std::shared_ptr<EpochRun>& run, SlotTicket task, std::optional<StartedRead> started) {
  const TaskScope scope(this);
  std::optional<Record> record = read_sample(run, task, started ? &*started : nullptr);
  if (started) end_started_read();  // Its io thread is joined before the pools go: no hand-off count.
  if (record) {
    cpu_pool_->submit_in_order(queue_order(task, run->rows), [this, run, task, record = std::move(*record)]() mutable {
      process_task(run, task, std::move(record));
    });
  }
}

std::optional<Record> Loader::read_sample(const std::shared_ptr<EpochRun>& run, SlotTicket task,
                                          const StartedRead* started_read) {
  int64_t sample;
  {
    std::lock_guard lock(mu_);
    std::optional<int64_t> assigned = run->sample_for(task);
    if (!assigned) {
      finish_task(*run, task, -1, {}, nullptr);
      return std::nullopt;
    }
    sample = *assigned;
  }
  // A read whose asynchronous attempt failed counts from that attempt.
  const RemoteAttempt* attempt = started_read != nullptr ? started_read->attempt.get() : nullptr;
  const int64_t started = attempt != nullptr ? started_read->started_ns : steady_ns();
  const int64_t cpu_started = thread_cpu_ns();
  const int64_t lock_wait_started = thread_lock_wait_ns();
  const int64_t queue_wait_started = thread_queue_wait_ns() - (attempt != nullptr ? started_read->queue_wait_ns : 0);
  Record record;
  std::optional<SampleError> error;
  try {
    const ScopedCancellation scope(run->stopping);
    record = attempt != nullptr ? source_->read_after(sample, *attempt)
             : run->read_plan   ? source_->read_planned(sample, *run->read_plan)
                                : source_->read(sample);
    if (record.key.empty()) record.key = key_of(*source_, sample);
  } catch (const Error& e) {
    error = SampleError::from(e, key_of(*source_, sample));
  } catch (const std::exception& e) {
    error = SampleError{ErrorKind::kInternal, e.what(), key_of(*source_, sample)};
  }
  read_cpu_ns_ += thread_cpu_ns() - cpu_started;
  read_lock_wait_ns_ += thread_lock_wait_ns() - lock_wait_started;
  // A wait for a slot under a store's limit on requests in flight is not
  // the read's latency: sized on it, reads in flight would grow the queue
  // they wait in without end (a modest server read at its 5 connections).
  const int64_t queue_wait_ns = thread_queue_wait_ns() - queue_wait_started;
  read_queue_wait_ns_ += queue_wait_ns;
  const int64_t read_ns = std::max<int64_t>(0, steady_ns() - started - queue_wait_ns);
  read_ns_ += read_ns;
  read_latency_.record(read_ns);
  ++samples_read_;
  if (error) {
    std::lock_guard lock(mu_);
    finish_task(*run, task, -1, {}, &*error);
    return std::nullopt;
  }
  return record;
}

void Loader::process_task(const std::shared_ptr<EpochRun>& run, SlotTicket task, Record record) {
  const TaskScope scope(this);
  void* out;
  int64_t sample;
  {
    std::lock_guard lock(mu_);
    std::optional<int64_t> assigned = run->sample_for(task);
    if (!assigned) {
      finish_task(*run, task, -1, {}, nullptr);
      return;
    }
    sample = *assigned;
    // Null for variable-shape samples, which get buffers of their own.
    void* buffer = run->batch(task.batch).buffer.data();
    out = buffer == nullptr
              ? nullptr
              : static_cast<uint8_t*>(buffer) + static_cast<size_t>(task.slot) * static_cast<size_t>(sample_bytes_);
  }
  // The slot stays busy until finish_task, so nothing else writes `out` meanwhile.
  const int64_t started = steady_ns();
  const int64_t cpu_started = thread_cpu_ns();
  std::optional<SampleError> error;
  std::vector<BoundingBox> boxes;
  SampleOutput output;  // Variable-shape samples only.
  try {
    SampleRng rng(options_.seed, static_cast<uint64_t>(run->epoch), static_cast<uint64_t>(sample));
    if (out == nullptr) {
      boxes = apply_variable_sample(record, rng, output);
    } else if (record.boxes.empty()) {
      transform_->apply(record.data.span(), rng, out);
    } else {
      // Boxes follow the image's crops, resizes, flips and warps.
      boxes = std::move(record.boxes);
      transform_->apply_tracked(record.data.span(), rng, out, boxes);
    }
  } catch (const Error& e) {
    error = SampleError::from(e, record.key);
  } catch (const std::exception& e) {
    error = SampleError{ErrorKind::kInternal, e.what(), record.key};
  }
  process_cpu_ns_ += thread_cpu_ns() - cpu_started;
  const int64_t process_ns = steady_ns() - started;
  process_ns_ += process_ns;
  process_latency_.record(process_ns);
  ++samples_processed_;
  if (!error) ++part_samples_[static_cast<size_t>(source_->part_of(sample))];
  std::lock_guard lock(mu_);
  // A variable-shape sample's buffer joins its slot while the slot is still
  // this task's (a skip may have reassigned it: then it goes back to the pool).
  if (out == nullptr && !error && run->sample_for(task)) {
    run->batch(task.batch).samples[static_cast<size_t>(task.slot)] = std::move(output);
  }
  finish_task(*run, task, record.label, std::move(boxes), error ? &*error : nullptr);
}

void Loader::finish_task(EpochRun& run, SlotTicket task, int64_t label, std::vector<BoundingBox> boxes,
                         const SampleError* error) {
  const bool current = run.record_finished(task, label, std::move(boxes), error, options_.on_error);
  // A skip unassigned later slots, a failure ended the run: the reads
  // waiting for them go before their slots are issued again.
  if (error != nullptr) end_stale_waiting_reads_locked(run);
  if (run.mixes) start_batch_mixes_locked(run);
  issue_locked(run);
  // Wake the consumer only when it may have something to do: a sample of the
  // batch it waits for finished (or a skip reshuffled slots), or, for stop(),
  // the last task ended. Waking it for every sample costs a context switch
  // per sample on a machine whose cores are busy decoding.
  if (task.batch == run.front_index || run.outstanding == 0 || (current && error != nullptr)) cv_.notify_all();
}

namespace {

// When a wait of `timeout` ends; nullopt for no limit. A timeout past half the
// clock's remaining range is no limit too, so that now + timeout cannot
// overflow (the double comparison may round by a little, never by half).
std::optional<std::chrono::steady_clock::time_point> deadline_after(std::chrono::duration<double> timeout) {
  if (!(timeout.count() >= 0)) return std::nullopt;  // Negative or NaN.
  const auto now = std::chrono::steady_clock::now();
  const std::chrono::duration<double> room = std::chrono::steady_clock::time_point::max() - now;
  if (!(timeout < room / 2)) return std::nullopt;  // Infinite or huge.
  return now + std::chrono::duration_cast<std::chrono::steady_clock::duration>(timeout);
}

}  // namespace

NextResult Loader::next(std::chrono::duration<double> timeout) {
  check_not_forked();
  check_not_reentered("next()");
  const std::optional<std::chrono::steady_clock::time_point> deadline = deadline_after(timeout);
  // How long the consumer's thread waited for a core since its last call
  // (autotune: what the model wanted and did not get). A file read, so
  // before taking the lock.
  const int64_t run_delay = autotune_->tunes_cpu_threads() ? thread_run_delay_ns() : -1;
  std::unique_lock lock(mu_);
  const int64_t wait_started = steady_ns();
  if (run_delay >= 0 && last_run_delay_ns_ >= 0 && last_run_delay_thread_ == std::this_thread::get_id()) {
    consumer_run_delay_ns_ += std::max<int64_t>(0, run_delay - last_run_delay_ns_);
  }
  last_run_delay_ns_ = run_delay;
  last_run_delay_thread_ = std::this_thread::get_id();
  if (last_batch_returned_ns_ != 0) {
    // The consumer's step ends: its demand, free of waiting (autotune).
    ++consumer_steps_;
    consumer_step_ns_ += wait_started - last_batch_returned_ns_;
    last_batch_returned_ns_ = 0;
  }
  for (;;) {
    std::shared_ptr<EpochRun> run = run_;
    const NextStep step = run == nullptr ? NextStep::kEnd : run->next_step(options_.drop_last);
    if (step == NextStep::kRaiseFatal) {
      Error error = run->fatal->to_error();
      stop_locked(lock);
      throw error;
    }
    if (step == NextStep::kEnd) return {NextResult::Status::kEnd, nullptr};
    if (step != NextStep::kWait) {
      wait_ns_ += steady_ns() - wait_started;
      if (step == NextStep::kRaiseSample) {
        Error error = run->front_failure()->to_error();
        stop_locked(lock);
        throw error;
      }
      if (step == NextStep::kDropPartial) {
        stop_locked(lock);  // The dropped batch's buffer goes back to the pool.
        return {NextResult::Status::kEnd, nullptr};
      }
      std::shared_ptr<Batch> batch = run->take_front(spec_, options_.batch_mix ? options_.batch_mix->num_classes : 0);
      ++batches_delivered_;
      autotune_tick_locked(0);
      issue_locked(*run);
      last_batch_returned_ns_ = steady_ns();
      return {NextResult::Status::kBatch, std::move(batch)};
    }
    if (deadline && std::chrono::steady_clock::now() >= *deadline) {
      wait_ns_ += steady_ns() - wait_started;
      return {NextResult::Status::kTimeout, nullptr};
    }
    // While the consumer waits, autotune's windows still end (a stall is
    // when it matters most that they do).
    std::optional<std::chrono::steady_clock::time_point> wake = deadline;
    if (autotune_->enabled()) {
      const auto window_end =
          std::chrono::steady_clock::time_point(std::chrono::duration_cast<std::chrono::steady_clock::duration>(
              std::chrono::nanoseconds(autotune_->window_end_ns())));
      if (!wake || window_end < *wake) wake = window_end;
    }
    if (!wake) {
      cv_.wait(lock);
    } else {
      cv_.wait_until(lock, *wake);
    }
    autotune_tick_locked(wait_started);
  }
}

std::vector<BoundingBox> Loader::apply_variable_sample(Record& record, SampleRng& rng, SampleOutput& output) {
  const SampleAllocator allocate = [&](const SampleSpec& spec) -> void* {
    output.spec = spec;
    output.buffer = sample_pool_.acquire(spec.num_bytes());
    return output.buffer.data();
  };
  if (record.boxes.empty()) {
    transform_->apply_variable(record.data.span(), rng, allocate, nullptr);
    return {};
  }
  std::vector<BoundingBox> boxes = std::move(record.boxes);
  transform_->apply_variable(record.data.span(), rng, allocate, &boxes);
  return boxes;
}

void Loader::start_batch_mixes_locked(EpochRun& run) {
  const std::vector<int64_t> started = run.start_mixes();
  for (size_t i = 0; i < started.size(); ++i) {
    try {
      // Ahead of the queued samples of later batches (with reads inline the
      // queue holds every issued slot): the mix completes an earlier batch.
      cpu_pool_->submit_first([this, run = run.shared_from_this(), index = started[i]] { mix_task(run, index); });
    } catch (const std::exception& e) {
      for (size_t j = i; j < started.size(); ++j) run.mix_not_started(started[j]);
      run.fail(cannot_start(e));
      cv_.notify_all();
      return;
    }
  }
}

void Loader::mix_task(const std::shared_ptr<EpochRun>& run, int64_t batch_index) {
  const TaskScope scope(this);
  const BatchMixSpec& spec = *options_.batch_mix;
  void* images = nullptr;
  std::vector<int64_t> labels;
  std::optional<SampleError> error;
  {
    std::lock_guard lock(mu_);
    if (run->cancelled) {
      if (run->end_cancelled_mix()) cv_.notify_all();
      return;
    }
    // The batch stays in place (and its memory untouched by other tasks)
    // until it is mixed: it cannot be handed out or its slots reassigned.
    detail::InFlightBatch& b = run->batch(batch_index);
    images = b.buffer.data();
    labels.assign(b.labels.begin(), b.labels.begin() + b.issued);
    const int64_t bad = first_label_outside(labels, spec.num_classes);
    if (bad >= 0) {
      const int64_t position = b.slots[static_cast<size_t>(bad)].position;
      error = SampleError{ErrorKind::kConfig,
                          mix_name(spec) + ": the label " + std::to_string(labels[static_cast<size_t>(bad)]) +
                              " is outside [0, num_classes = " + std::to_string(spec.num_classes) +
                              "): batch mixes need class labels",
                          key_of(*source_, run->order[static_cast<size_t>(position)])};
    }
  }
  std::vector<float> soft_labels;
  if (!error) {
    try {
      SampleRng rng =
          batch_mix_rng(options_.seed, static_cast<uint64_t>(run->epoch), static_cast<uint64_t>(batch_index));
      const auto& shape = spec_.shape;
      const int64_t height = spec.channels_last ? shape[0] : shape[1];
      const int64_t width = spec.channels_last ? shape[1] : shape[2];
      const BatchMixParams params = sample_batch_mix(spec, height, width, rng);
      soft_labels.resize(labels.size() * static_cast<size_t>(spec.num_classes));
      apply_batch_mix(params, spec, spec_, static_cast<int64_t>(labels.size()), images, labels, soft_labels.data());
    } catch (const Error& e) {
      error = SampleError::from(e, {});
    } catch (const std::exception& e) {
      error = SampleError{ErrorKind::kInternal, std::string("batch mix: ") + e.what(), {}};
    }
  }
  std::lock_guard lock(mu_);
  if (run->end_mix(batch_index, std::move(soft_labels), std::move(error))) cv_.notify_all();
}

void Loader::stop() {
  // In a child of fork() no task runs (the threads are not there), and the
  // lock may have been held by one of them: nothing to stop. Error paths
  // (e.g. Python's `finally: stop()`) then raise only the fork error of next().
  if (forked()) return;
  check_not_reentered("stop()");
  std::unique_lock lock(mu_);
  stop_locked(lock);
}

void Loader::stop_locked(std::unique_lock<std::mutex>& lock) {
  if (run_ == nullptr) return;
  std::shared_ptr<EpochRun> run = run_;
  run->cancel();
  end_stale_waiting_reads_locked(*run);  // Cancelled: none of them will start.
  cv_.notify_all();
  // Queued tasks see `cancelled` and finish at once; running ones finish their sample.
  cv_.wait(lock, [&] { return run->outstanding == 0; });
  run->batches.clear();    // Buffers go back to the pool.
  run->read_plan.reset();  // And the runs it holds: no task reads any more.
}

LoaderStats Loader::stats() const {
  check_not_forked();
  std::lock_guard lock(mu_);
  // The same snapshot of the counters autotune reads.
  const AutotuneCounters counters = counters_locked(0);
  LoaderStats stats;
  stats.samples_read = counters.reads;
  stats.samples_processed = counters.processed;
  for (const auto& count : part_samples_) stats.samples_per_part.push_back(count);
  stats.read_seconds = static_cast<double>(counters.read_ns) * 1e-9;
  stats.process_seconds = static_cast<double>(counters.process_ns) * 1e-9;
  stats.read_cpu_seconds = static_cast<double>(counters.read_cpu_ns) * 1e-9;
  stats.read_lock_wait_seconds = static_cast<double>(counters.read_lock_wait_ns) * 1e-9;
  stats.read_queue_wait_seconds = static_cast<double>(counters.read_queue_wait_ns) * 1e-9;
  stats.process_cpu_seconds = static_cast<double>(counters.process_cpu_ns) * 1e-9;
  stats.wait_seconds = static_cast<double>(counters.wait_ns) * 1e-9;
  stats.batches_delivered = counters.batches_taken;
  stats.batches_ready = counters.batches_ready;
  stats.buffers_allocated = static_cast<int64_t>(pool_.allocated() + sample_pool_.allocated());
  stats.buffers_leased = static_cast<int64_t>(pool_.leased() + sample_pool_.leased());
  const AutotuneStatus autotune = autotune_->status();
  stats.threads = settings_.cpu_threads;
  stats.io_threads = settings_.io_threads;
  stats.prefetch = settings_.prefetch;
  if (!closed_) {  // close() resets the pools once it has set closed_.
    stats.threads_running = cpu_pool_->running();
    stats.io_threads_running = io_pool_->running();
  }
  stats.threads_auto = autotune.tuned_cpu_threads;
  stats.io_threads_auto = autotune.tuned_io_threads;
  stats.prefetch_auto = autotune.tuned_prefetch;
  stats.autotune_reason = autotune.reason;
  stats.autotune_changes = autotune.changes;
  stats.demand_per_second = std::isinf(autotune.estimates.demand_per_second) ? 0 : autotune.estimates.demand_per_second;
  stats.read_latency_seconds = autotune.estimates.read_seconds;
  stats.process_time_seconds = autotune.estimates.process_seconds;
  stats.latency_spread_seconds = autotune.estimates.spread_seconds;
  stats.usable_cores = autotune.usable_cores;
  stats.usable_cores_source = std::to_string(usable_cpu_count()) + " usable CPUs (affinity, cgroup quota)";
  if (options_.local_processes > 1) {
    stats.usable_cores_source += " shared by " + std::to_string(options_.local_processes) + " processes on this node";
  }
  stats.other_cores = autotune.estimates.other_cores;
  stats.memory_budget = memory_budget_;
  if (run_ != nullptr) {
    stats.epoch = run_->epoch;
    stats.skipped = static_cast<int64_t>(run_->skipped.size());
    stats.wall_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - epoch_started_).count();
    stats.batches_in_flight = static_cast<int64_t>(run_->batches.size()) - counters.batches_ready;
  }
  return stats;
}

AutotuneCounters Loader::counters_locked(int64_t waiting_since_ns) const {
  AutotuneCounters c;
  c.consumer_steps = consumer_steps_;
  c.consumer_step_ns = consumer_step_ns_;
  c.batches_taken = batches_delivered_;
  c.wait_ns = wait_ns_ + (waiting_since_ns != 0 ? steady_ns() - waiting_since_ns : 0);
  c.reads = samples_read_;
  c.read_ns = read_ns_;
  c.processed = samples_processed_;
  c.process_ns = process_ns_;
  c.read_cpu_ns = read_cpu_ns_;
  c.read_lock_wait_ns = read_lock_wait_ns_;
  c.read_queue_wait_ns = read_queue_wait_ns_;
  c.process_cpu_ns = process_cpu_ns_;
  c.consumer_run_delay_ns = consumer_run_delay_ns_;
  c.read_latency = read_latency_.snapshot();
  c.process_latency = process_latency_.snapshot();
  if (run_ != nullptr) {
    for (const auto& batch : run_->batches) c.batches_ready += run_->complete(batch) ? 1 : 0;
  }
  return c;
}

void Loader::autotune_tick_locked(int64_t waiting_since_ns) {
  if (!autotune_->enabled() || run_ == nullptr) return;
  const int64_t now = steady_ns();
  if (now < autotune_->window_end_ns()) return;
  if (std::optional<AutotuneSettings> settings =
          autotune_->observe(now, counters_locked(waiting_since_ns), settings_)) {
    apply_settings_locked(*settings);
  }
}

void Loader::apply_settings_locked(const AutotuneSettings& settings) {
  if (closed_) return;
  // Only timing changes: tasks carry their batch and slot, and every random
  // choice derives from (seed, epoch, sample).
  std::string refused;
  auto resize = [&](ThreadPool& pool, int size) {
    if (pool.size() == size) return;
    try {
      pool.resize(size);
    } catch (const Error& e) {
      refused = e.cause();  // The pool keeps the threads it has.
    }
  };
  resize(*cpu_pool_, settings.cpu_threads);
  resize(*io_pool_, settings.io_threads);
  settings_ = {cpu_pool_->size(), io_pool_->size(), settings.prefetch};
  {
    std::lock_guard lock(async_mu_);
    async_limit_ = settings_.io_threads;
  }
  start_waiting_reads(/*holding_mu=*/true);  // Room for more, if io_threads grew.
  if (!refused.empty()) autotune_->note_set(settings_, refused);
  if (run_ != nullptr && !run_->cancelled && !run_->finished) {
    run_->prefetch = settings.prefetch;
    issue_locked(*run_);  // Room for more batches, if prefetch grew.
  }
}

void Loader::set_parallelism(int threads, int io_threads, int prefetch) {
  check_not_forked();
  check_not_reentered("set_parallelism()");
  std::lock_guard lock(mu_);
  check_config(!closed_, "the loader is closed");
  AutotuneSettings settings = settings_;
  if (threads > 0) settings.cpu_threads = threads;
  if (io_threads > 0) settings.io_threads = io_threads;
  if (prefetch > 0) settings.prefetch = prefetch;
  apply_settings_locked(settings);
  autotune_->note_set(settings_, "set_parallelism");
}

std::vector<std::string> Loader::autotune_trace() {
  check_not_forked();
  std::lock_guard lock(mu_);
  return autotune_->take_trace();
}

std::vector<SkippedSample> Loader::skipped() const {
  check_not_forked();
  std::lock_guard lock(mu_);
  return run_ == nullptr ? std::vector<SkippedSample>{} : run_->skipped;
}

}  // namespace conveyor
