#pragma once

#include <algorithm>
#include <cstdint>
#include <deque>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "conveyor/core/buffer_pool.h"
#include "conveyor/core/cancellation.h"
#include "conveyor/core/error.h"
#include "conveyor/core/geometry.h"
#include "conveyor/core/sample_transform.h"
#include "conveyor/pipeline/batch.h"
#include "conveyor/pipeline/loader.h"

namespace conveyor::detail {

/// A failure kept as plain strings: Error (a std::runtime_error) shares its
/// message buffer between copies, which must not cross threads. The
/// attachment (e.g. a Python exception) is reference counted atomically.
struct SampleError {
  ErrorKind kind;
  std::string cause;
  std::string key;
  std::shared_ptr<const ErrorAttachment> attachment = nullptr;

  /// `e`, naming `key` unless it names a sample itself.
  static SampleError from(const Error& e, const std::string& key) {
    return {e.kind(), e.cause(), e.key().empty() ? key : e.key(), e.attachment()};
  }

  Error to_error() const { return Error(kind, cause, key, attachment); }
};

/// A sample slot of an in-flight batch. A slot is `busy` from the moment a
/// task is issued for it until that task finishes, even if the slot was
/// reassigned meanwhile (ticket changed): the old task may still be writing
/// the slot's memory, so the slot is not issued again before it is idle.
struct Slot {
  enum class State { kEmpty, kPending, kDone, kFailed };
  State state = State::kEmpty;
  int64_t position = -1;
  uint64_t ticket = 0;  ///< 0: not assigned.
  bool busy = false;
  std::optional<SampleError> error;
};

/// A batch being filled: its buffer (or, for variable shapes, one buffer per
/// sample), its slots and what their tasks recorded.
struct InFlightBatch {
  int64_t index = 0;
  PooledBuffer buffer;
  std::vector<Slot> slots;
  std::vector<int64_t> labels;
  std::vector<std::vector<BoundingBox>> boxes;
  int64_t issued = 0;  ///< Slots [0, issued) are assigned, in position order.
  // Batch mix (LoaderOptions::batch_mix): started once the batch's positions
  // are final, done when its buffer and soft labels are mixed (or it failed).
  bool mixing = false;
  bool mixed = false;
  std::vector<float> soft_labels;
  std::optional<SampleError> mix_error;
  std::vector<SampleOutput> samples;  ///< Variable-shape samples, by slot (then `buffer` is empty).
};

/// What a task works on: a slot of an in-flight batch, and the ticket that
/// tells whether the slot is still the task's (a skip may reassign it).
struct SlotTicket {
  int64_t batch = 0;
  int64_t slot = 0;
  uint64_t ticket = 0;
};

/// The rank of `task` in the epoch's order. The cpu pool runs a sample's work
/// in this order (ThreadPool::submit_in_order): reads that finish out of
/// order on the io pool must not let a later batch's samples be decoded
/// before the batch the consumer waits for. `rows`: EpochRun::rows (a
/// batch's slots), which keeps it within int64 whatever batch_size.
inline int64_t queue_order(const SlotTicket& task, int64_t rows) noexcept { return task.batch * rows + task.slot; }

/// What the consumer's next() does with the run as it stands (EpochRun::next_step).
enum class NextStep {
  kRaiseFatal,   ///< Raise `fatal` (a failure outside any sample), after stopping the run.
  kEnd,          ///< The epoch is over (or was stopped): no more batches.
  kRaiseSample,  ///< Raise front_failure() (a sample's error under kRaise, or its batch mix's), after stopping.
  kDropPartial,  ///< The last, partial batch is dropped (drop_last): stop the run, then the epoch is over.
  kDeliver,      ///< Hand out take_front().
  kWait,         ///< Nothing to hand out yet: wait for a task to finish.
};

/// One epoch: the order, the in-flight batches and their slots, and the
/// state of the epoch (cancelled, finished, failed). The Loader locks,
/// submits the tasks this hands out and waits; every decision on the epoch's
/// state is made here.
///
/// Ownership: tasks hold a shared_ptr to it. Thread-safety: none of its own;
/// every field and method is guarded by the loader's mutex (callers hold it),
/// so it is tested single-threaded.
struct EpochRun : std::enable_shared_from_this<EpochRun> {
  EpochRun(int64_t epoch_, std::vector<int64_t> order_, int64_t start_position, int64_t start_batch,
           int64_t batch_size_, int64_t prefetch_)
      : epoch(epoch_),
        order(std::move(order_)),
        batch_size(batch_size_),
        rows(std::max<int64_t>(1, std::min<int64_t>(batch_size_, static_cast<int64_t>(order.size()) - start_position))),
        prefetch(prefetch_),
        next_position(start_position),
        front_index(start_batch) {}

  const int64_t epoch;
  const std::vector<int64_t> order;  ///< Sample index at each position of the epoch.
  const int64_t batch_size;
  /// Slots of a batch: batch_size, or the positions the run has left when
  /// fewer (no batch holds more), so that a batch_size past the epoch takes
  /// no room of its size.
  const int64_t rows;
  int64_t prefetch;                   ///< Most batches in flight or ready at once (autotune may change it).
  int64_t next_position;              ///< Next position to issue.
  std::deque<InFlightBatch> batches;  ///< front() is the next to deliver.
  int64_t front_index;                ///< Batch index of batches.front().
  uint64_t last_ticket = 0;
  int64_t outstanding = 0;  ///< Tasks (samples and batch mixes) issued and not yet finished.
  bool cancelled = false;   ///< Set by cancel() or fail(): queued tasks finish at once.
  /// Cancelled by cancel() (stop()): ends the waits of reads in flight (a
  /// remote read's backoff), which see it as their thread's current
  /// Cancellation.
  Cancellation stopping;
  /// The source's plan for this epoch's reads (Source::plan_reads; null:
  /// each sample read alone). Set before the first task; tasks use it
  /// without the loader's lock; dropped once the run is stopped and no task
  /// runs.
  std::shared_ptr<ReadPlan> read_plan;
  bool finished = false;             ///< next() has ended the epoch (by its end, an error or a drop).
  bool mixes = false;                ///< Batches are mixed (batch_mix) before hand-off.
  bool variable = false;             ///< Samples have their own buffers (the transform has no fixed shape).
  std::optional<SampleError> fatal;  ///< A failure outside any sample (e.g. allocation), raised by next().
  std::vector<SkippedSample> skipped;

  bool at_end() const { return next_position >= static_cast<int64_t>(order.size()); }
  InFlightBatch& batch(int64_t index) { return batches[static_cast<size_t>(index - front_index)]; }
  Slot& slot(const SlotTicket& task) { return batch(task.batch).slots[static_cast<size_t>(task.slot)]; }

  /// Ends the epoch with `error` for next() to raise (the first failure
  /// wins) and cancels the tasks not yet started. The caller wakes the
  /// waiters.
  void fail(SampleError error);

  /// stop(): cancels the tasks not yet started and the waits of reads in
  /// flight. The caller wakes the waiters and waits for `outstanding` to
  /// reach 0.
  void cancel();

  /// Assigns the next position of the order to the first unassigned slot
  /// (starting a batch with a buffer from `pool` when prefetch allows) and
  /// counts its task as outstanding. Nothing when the epoch is over, prefetch
  /// batches are under way, or the slot's old task still runs (its finish
  /// resumes issuing). Throws when a buffer cannot be allocated.
  std::optional<SlotTicket> assign_next_slot(BufferPool& pool);

  /// The sample `task` is to work on, or nothing when the run was cancelled
  /// or the slot reassigned (the task then only has to finish).
  std::optional<int64_t> sample_for(const SlotTicket& task);

  /// Ends `task`: its slot is idle again and it no longer counts as outstanding.
  void end_task(const SlotTicket& task);

  /// Records the outcome of a finished task (label and boxes, or its error)
  /// in its slot, unless the slot was reassigned or the run cancelled. Under
  /// kSkip a failure drops the position (skip_and_shift). Returns whether the
  /// outcome was current.
  bool record_finished(const SlotTicket& task, int64_t label, std::vector<BoundingBox> boxes, const SampleError* error,
                       OnError on_error);

  /// Drops the failed position of `task` and shifts every later one down a
  /// slot: slots from the failed one on are unassigned and will be assigned
  /// again in order (positions after the failure move up). Records of skips
  /// after this one are dropped, as those positions are issued again and
  /// re-recorded if they fail again.
  void skip_and_shift(const SlotTicket& task, const SampleError& error);

  /// True when no batch has a sample and none can start: the epoch is over.
  bool exhausted() const { return (batches.empty() || batches.front().issued == 0) && at_end(); }

  /// True when the front batch can be handed out (or raised): every assigned
  /// slot is done or failed, it is full or the order is exhausted, no
  /// unassigned slot's old task can still write its buffer (possible after a
  /// skip near the end of the epoch), and its batch mix, if any, is done.
  bool front_ready() const;

  /// The first failed slot's error of the front batch (once front_ready()),
  /// else its batch mix's error, or null.
  const SampleError* front_failure() const;

  /// True when the front batch (once front_ready()) has fewer than batch_size samples.
  bool front_partial() const { return batches.front().issued < batch_size; }

  /// What next() does now (NextStep); marks the run finished when the
  /// answer ends the epoch by its end, an error or a drop (a stopped run's
  /// kEnd leaves it as stop() left it).
  NextStep next_step(bool drop_last);

  /// Hands the front batch (once front_ready(), without failure) out as a Batch.
  std::shared_ptr<Batch> take_front(const SampleSpec& spec, int64_t num_classes);

  /// True when `b` has every sample done (a full batch, or the last one).
  bool complete(const InFlightBatch& b) const;

  /// The batches whose mix can start now, in order: each complete, as is
  /// every batch before it (a skip shifts only the positions after an
  /// unfinished sample, so their positions are final). Each is marked mixing
  /// and counted as outstanding (stop() waits for a mix like for a sample);
  /// the caller submits a mix task for each and calls mix_not_started() for
  /// each it could not submit.
  std::vector<int64_t> start_mixes();

  /// Undoes start_mixes() for the batch `index`, whose task never started.
  void mix_not_started(int64_t index);

  /// Ends the mix task of the batch `index` with its soft labels or its
  /// error (the batch can then be handed out or raised). Returns whether the
  /// consumer may be waiting for it (it is the front batch, or no task is
  /// left for stop()).
  bool end_mix(int64_t index, std::vector<float> soft_labels, std::optional<SampleError> error);

  /// Ends a mix task that found the run cancelled. Returns whether no task is
  /// left (stop() may be waiting for that).
  bool end_cancelled_mix();
};

}  // namespace conveyor::detail
