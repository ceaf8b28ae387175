// The epoch's state on one thread: what the Loader's tasks and next() ask of
// it, in the orders the threads can produce.

#include "conveyor/pipeline/epoch_run.h"

#include <gtest/gtest.h>

#include <numeric>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace conveyor::detail {
namespace {

SampleSpec one_byte() {
  SampleSpec spec;
  spec.shape = {1};
  spec.dtype = DType::kUInt8;
  return spec;
}

// An epoch over `samples` samples (order 100, 101, ...) in batches of
// `batch_size`, at most `prefetch` batches in flight.
EpochRun make_run(int64_t samples, int64_t batch_size, int64_t prefetch) {
  std::vector<int64_t> order(static_cast<size_t>(samples));
  std::iota(order.begin(), order.end(), 100);
  return EpochRun(3, std::move(order), 0, 0, batch_size, prefetch);
}

std::vector<SlotTicket> assign_all(EpochRun& run, BufferPool& pool) {
  std::vector<SlotTicket> tickets;
  while (std::optional<SlotTicket> t = run.assign_next_slot(pool)) tickets.push_back(*t);
  return tickets;
}

void finish_ok(EpochRun& run, const SlotTicket& task) {
  run.record_finished(task, *run.sample_for(task) * 10, {}, nullptr, OnError::kRaise);
}

const SampleError kBadImage{ErrorKind::kDecode, "not an image", "bad.jpg"};

TEST(EpochRunTest, PositionsAreAssignedInOrderUpToPrefetchBatches) {
  BufferPool pool(4);
  EpochRun run = make_run(10, 4, 2);
  const std::vector<SlotTicket> tickets = assign_all(run, pool);
  ASSERT_EQ(tickets.size(), 8u);
  for (size_t i = 0; i < tickets.size(); ++i) {
    EXPECT_EQ(tickets[i].batch, static_cast<int64_t>(i / 4));
    EXPECT_EQ(tickets[i].slot, static_cast<int64_t>(i % 4));
    EXPECT_EQ(run.sample_for(tickets[i]), 100 + static_cast<int64_t>(i));
    EXPECT_EQ(queue_order(tickets[i], run.rows), static_cast<int64_t>(i));
  }
  EXPECT_EQ(run.outstanding, 8);
  EXPECT_EQ(run.next_step(false), NextStep::kWait);
}

TEST(EpochRunTest, BatchesAreDeliveredInOrderThenTheEpochEnds) {
  BufferPool pool(4);
  EpochRun run = make_run(6, 4, 2);
  const std::vector<SlotTicket> tickets = assign_all(run, pool);
  ASSERT_EQ(tickets.size(), 6u);
  // The second (partial) batch finishes first: nothing is handed out before the first.
  for (size_t i = 4; i < 6; ++i) finish_ok(run, tickets[i]);
  for (size_t i = 0; i < 3; ++i) finish_ok(run, tickets[i]);
  EXPECT_EQ(run.next_step(false), NextStep::kWait);
  finish_ok(run, tickets[3]);
  EXPECT_EQ(run.outstanding, 0);
  ASSERT_EQ(run.next_step(false), NextStep::kDeliver);
  const std::shared_ptr<Batch> first = run.take_front(one_byte(), 0);
  EXPECT_EQ(first->index(), 0);
  EXPECT_EQ(first->labels(), (std::vector<int64_t>{1000, 1010, 1020, 1030}));
  EXPECT_EQ(first->end_position(), 4);
  ASSERT_EQ(run.next_step(false), NextStep::kDeliver);
  EXPECT_TRUE(run.front_partial());
  const std::shared_ptr<Batch> second = run.take_front(one_byte(), 0);
  EXPECT_EQ(second->labels(), (std::vector<int64_t>{1040, 1050}));
  EXPECT_EQ(run.next_step(false), NextStep::kEnd);
  EXPECT_TRUE(run.finished);
}

TEST(EpochRunTest, DropLastDropsOnlyThePartialLastBatch) {
  BufferPool pool(4);
  EpochRun run = make_run(6, 4, 2);
  for (const SlotTicket& t : assign_all(run, pool)) finish_ok(run, t);
  ASSERT_EQ(run.next_step(true), NextStep::kDeliver);
  run.take_front(one_byte(), 0);
  EXPECT_EQ(run.next_step(true), NextStep::kDropPartial);
  EXPECT_TRUE(run.finished);
  EXPECT_EQ(run.next_step(true), NextStep::kEnd);
}

TEST(EpochRunTest, UnderRaiseASamplesFailureIsRaisedWithItsBatchAndEndsTheEpoch) {
  BufferPool pool(4);
  EpochRun run = make_run(8, 4, 2);
  const std::vector<SlotTicket> tickets = assign_all(run, pool);
  for (size_t i = 0; i < tickets.size(); ++i) {
    if (i == 2) {
      EXPECT_TRUE(run.record_finished(tickets[i], -1, {}, &kBadImage, OnError::kRaise));
    } else {
      finish_ok(run, tickets[i]);
    }
  }
  ASSERT_EQ(run.next_step(false), NextStep::kRaiseSample);
  EXPECT_EQ(run.front_failure()->key, "bad.jpg");
  EXPECT_TRUE(run.finished);
  EXPECT_EQ(run.next_step(false), NextStep::kEnd);
}

TEST(EpochRunTest, UnderSkipAFailureDropsItsPositionAndTheLaterOnesMoveUp) {
  BufferPool pool(4);
  EpochRun run = make_run(9, 4, 2);
  const std::vector<SlotTicket> tickets = assign_all(run, pool);
  ASSERT_EQ(tickets.size(), 8u);
  finish_ok(run, tickets[0]);
  EXPECT_TRUE(run.record_finished(tickets[1], -1, {}, &kBadImage, OnError::kSkip));
  ASSERT_EQ(run.skipped.size(), 1u);
  EXPECT_EQ(run.skipped[0].position, 1);
  EXPECT_EQ(run.skipped[0].key, "bad.jpg");
  // Slots from the failed one on are unassigned; the tasks still running
  // there find their slots reassigned and only finish.
  for (size_t i = 2; i < tickets.size(); ++i) {
    EXPECT_EQ(run.sample_for(tickets[i]), std::nullopt);
    EXPECT_FALSE(run.record_finished(tickets[i], 0, {}, nullptr, OnError::kSkip));
  }
  EXPECT_EQ(run.outstanding, 0);
  // Positions 2.. fill slot 1 on: the batch is samples 100, 102, 103, 104.
  const std::vector<SlotTicket> again = assign_all(run, pool);
  ASSERT_FALSE(again.empty());
  EXPECT_EQ(again[0].batch, 0);
  EXPECT_EQ(again[0].slot, 1);
  EXPECT_EQ(run.sample_for(again[0]), 102);
  for (const SlotTicket& t : again) finish_ok(run, t);
  ASSERT_EQ(run.next_step(false), NextStep::kDeliver);
  EXPECT_EQ(run.take_front(one_byte(), 0)->labels(), (std::vector<int64_t>{1000, 1020, 1030, 1040}));
}

TEST(EpochRunTest, TheFirstFatalFailureIsRaisedOnceAndStopsNewWork) {
  BufferPool pool(4);
  EpochRun run = make_run(8, 4, 2);
  const std::vector<SlotTicket> tickets = assign_all(run, pool);
  run.fail({ErrorKind::kInternal, "out of memory for the next batch", {}});
  run.fail({ErrorKind::kInternal, "cannot start more work: later", {}});
  EXPECT_TRUE(run.cancelled);
  EXPECT_EQ(run.sample_for(tickets[0]), std::nullopt);
  EXPECT_EQ(run.assign_next_slot(pool), std::nullopt);
  ASSERT_EQ(run.next_step(false), NextStep::kRaiseFatal);
  EXPECT_EQ(run.fatal->cause, "out of memory for the next batch");
  EXPECT_EQ(run.next_step(false), NextStep::kEnd);
}

TEST(EpochRunTest, CancelEndsTheEpochAndTheWaitsOfReadsInFlight) {
  BufferPool pool(4);
  EpochRun run = make_run(8, 4, 2);
  const std::vector<SlotTicket> tickets = assign_all(run, pool);
  run.cancel();
  EXPECT_TRUE(run.stopping.cancelled());
  EXPECT_EQ(run.next_step(false), NextStep::kEnd);
  // A task that finishes after the cancel records nothing but is no longer outstanding.
  EXPECT_FALSE(run.record_finished(tickets[0], 0, {}, nullptr, OnError::kRaise));
  EXPECT_EQ(run.outstanding, 7);
}

TEST(EpochRunTest, MixesStartInOrderOnceEveryEarlierBatchIsComplete) {
  BufferPool pool(4);
  EpochRun run = make_run(8, 4, 2);
  run.mixes = true;
  const std::vector<SlotTicket> tickets = assign_all(run, pool);
  for (size_t i = 4; i < 8; ++i) finish_ok(run, tickets[i]);
  // Batch 1 is complete, batch 0 is not: a skip in batch 0 could still shift it.
  EXPECT_TRUE(run.start_mixes().empty());
  for (size_t i = 0; i < 4; ++i) finish_ok(run, tickets[i]);
  EXPECT_EQ(run.start_mixes(), (std::vector<int64_t>{0, 1}));
  EXPECT_EQ(run.outstanding, 2);
  EXPECT_TRUE(run.start_mixes().empty());  // Started once.
  EXPECT_EQ(run.next_step(false), NextStep::kWait);
  // Batch 1's task could not be submitted: it can be started again.
  run.mix_not_started(1);
  EXPECT_EQ(run.start_mixes(), (std::vector<int64_t>{1}));
  EXPECT_FALSE(run.end_mix(1, {0.5f}, std::nullopt));  // Not the front, and batch 0's mix runs.
  EXPECT_EQ(run.next_step(false), NextStep::kWait);
  EXPECT_TRUE(run.end_mix(0, {1.0f}, std::nullopt));
  ASSERT_EQ(run.next_step(false), NextStep::kDeliver);
  EXPECT_EQ(run.take_front(one_byte(), 1)->soft_labels(), (std::vector<float>{1.0f}));
}

TEST(EpochRunTest, AFailedMixIsRaisedWithItsBatch) {
  BufferPool pool(4);
  EpochRun run = make_run(4, 4, 1);
  run.mixes = true;
  for (const SlotTicket& t : assign_all(run, pool)) finish_ok(run, t);
  ASSERT_EQ(run.start_mixes(), (std::vector<int64_t>{0}));
  EXPECT_TRUE(run.end_mix(0, {}, SampleError{ErrorKind::kConfig, "MixUp: the label 7 is outside", "a.png"}));
  ASSERT_EQ(run.next_step(false), NextStep::kRaiseSample);
  EXPECT_EQ(run.front_failure()->key, "a.png");
}

TEST(EpochRunTest, AMixThatFindsTheRunCancelledOnlyEnds) {
  BufferPool pool(4);
  EpochRun run = make_run(4, 4, 1);
  run.mixes = true;
  for (const SlotTicket& t : assign_all(run, pool)) finish_ok(run, t);
  ASSERT_EQ(run.start_mixes(), (std::vector<int64_t>{0}));
  run.cancel();
  EXPECT_TRUE(run.start_mixes().empty());
  EXPECT_TRUE(run.end_cancelled_mix());
  EXPECT_EQ(run.outstanding, 0);
}

}  // namespace
}  // namespace conveyor::detail
