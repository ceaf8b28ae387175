#include "conveyor/pipeline/epoch_run.h"

#include <algorithm>
#include <utility>

namespace conveyor::detail {

std::optional<SlotTicket> EpochRun::assign_next_slot(BufferPool& pool) {
  if (cancelled || finished || at_end()) return std::nullopt;
  InFlightBatch* target = nullptr;
  for (auto& b : batches) {
    if (b.issued < batch_size) {
      target = &b;
      break;
    }
  }
  if (target == nullptr) {
    if (static_cast<int64_t>(batches.size()) >= prefetch) return std::nullopt;
    InFlightBatch b;
    b.index = front_index + static_cast<int64_t>(batches.size());
    if (variable) {
      b.samples.resize(static_cast<size_t>(rows));
    } else {
      b.buffer = pool.acquire();
    }
    b.slots.resize(static_cast<size_t>(rows));
    b.labels.resize(static_cast<size_t>(rows), -1);
    b.boxes.resize(static_cast<size_t>(rows));
    batches.push_back(std::move(b));
    target = &batches.back();
  }
  Slot& s = target->slots[static_cast<size_t>(target->issued)];
  if (s.busy) return std::nullopt;
  s.state = Slot::State::kPending;
  s.position = next_position++;
  s.ticket = ++last_ticket;
  s.busy = true;
  s.error.reset();
  ++outstanding;
  return SlotTicket{target->index, target->issued++, s.ticket};
}

std::optional<int64_t> EpochRun::sample_for(const SlotTicket& task) {
  const Slot& s = slot(task);
  if (cancelled || s.ticket != task.ticket) return std::nullopt;
  return order[static_cast<size_t>(s.position)];
}

void EpochRun::end_task(const SlotTicket& task) {
  --outstanding;
  slot(task).busy = false;
}

bool EpochRun::record_finished(const SlotTicket& task, int64_t label, std::vector<BoundingBox> boxes,
                               const SampleError* error, OnError on_error) {
  end_task(task);
  Slot& s = slot(task);
  if (cancelled || s.ticket != task.ticket) return false;
  InFlightBatch& b = batch(task.batch);
  if (error == nullptr) {
    s.state = Slot::State::kDone;
    b.labels[static_cast<size_t>(task.slot)] = label;
    b.boxes[static_cast<size_t>(task.slot)] = std::move(boxes);
  } else if (on_error == OnError::kRaise) {
    s.state = Slot::State::kFailed;
    s.error = *error;
  } else {
    skip_and_shift(task, *error);
  }
  return true;
}

void EpochRun::skip_and_shift(const SlotTicket& task, const SampleError& error) {
  const int64_t position = slot(task).position;
  std::erase_if(skipped, [&](const SkippedSample& s) { return s.position > position; });
  skipped.push_back({position, error.key, error.cause});
  next_position = position + 1;
  for (auto& b : batches) {
    if (b.index < task.batch) continue;
    const int64_t first = b.index == task.batch ? task.slot : 0;
    for (int64_t i = first; i < b.issued; ++i) {
      Slot& s = b.slots[static_cast<size_t>(i)];
      s.state = Slot::State::kEmpty;
      s.ticket = 0;
      s.error.reset();
    }
    b.issued = std::min(b.issued, first);
  }
}

bool EpochRun::front_ready() const {
  if (batches.empty() || batches.front().issued == 0) return false;
  const InFlightBatch& front = batches.front();
  if (front.issued < batch_size && !at_end()) return false;
  for (int64_t i = 0; i < front.issued; ++i) {
    const Slot::State state = front.slots[static_cast<size_t>(i)].state;
    if (state != Slot::State::kDone && state != Slot::State::kFailed) return false;
  }
  for (int64_t i = front.issued; i < rows; ++i) {
    if (front.slots[static_cast<size_t>(i)].busy) return false;
  }
  return !mixes || front.mixed || front_failure() != nullptr;
}

const SampleError* EpochRun::front_failure() const {
  const InFlightBatch& front = batches.front();
  for (int64_t i = 0; i < front.issued; ++i) {
    const Slot& s = front.slots[static_cast<size_t>(i)];
    if (s.state == Slot::State::kFailed) return &*s.error;
  }
  return front.mix_error ? &*front.mix_error : nullptr;
}

std::shared_ptr<Batch> EpochRun::take_front(const SampleSpec& spec, int64_t num_classes) {
  InFlightBatch& front = batches.front();
  const int64_t size = front.issued;
  const int64_t end_position = front.slots[static_cast<size_t>(size - 1)].position + 1;
  front.labels.resize(static_cast<size_t>(size));
  front.boxes.resize(static_cast<size_t>(size));
  if (variable) front.samples.resize(static_cast<size_t>(size));
  auto taken = std::make_shared<Batch>(front.index, size, end_position, spec, std::move(front.buffer),
                                       std::move(front.labels), std::move(front.boxes), std::move(front.soft_labels),
                                       mixes ? num_classes : 0, std::move(front.samples));
  batches.pop_front();
  ++front_index;
  return taken;
}

bool EpochRun::complete(const InFlightBatch& b) const {
  if (b.issued == 0 || (b.issued < batch_size && !at_end())) return false;
  for (int64_t i = 0; i < b.issued; ++i) {
    if (b.slots[static_cast<size_t>(i)].state != Slot::State::kDone) return false;
  }
  return true;
}

void EpochRun::fail(SampleError error) {
  if (!fatal) fatal = std::move(error);
  cancelled = true;
}

void EpochRun::cancel() {
  cancelled = true;
  stopping.cancel();
}

NextStep EpochRun::next_step(bool drop_last) {
  if (finished) return NextStep::kEnd;
  if (fatal) {
    finished = true;
    return NextStep::kRaiseFatal;
  }
  if (cancelled) return NextStep::kEnd;
  if (exhausted()) {
    finished = true;
    return NextStep::kEnd;
  }
  if (!front_ready()) return NextStep::kWait;
  if (front_failure() != nullptr) {
    finished = true;
    return NextStep::kRaiseSample;
  }
  if (front_partial() && drop_last) {
    finished = true;
    return NextStep::kDropPartial;
  }
  return NextStep::kDeliver;
}

std::vector<int64_t> EpochRun::start_mixes() {
  std::vector<int64_t> started;
  for (auto& b : batches) {
    if (cancelled || !complete(b)) break;
    if (b.mixing || b.mixed) continue;
    b.mixing = true;
    ++outstanding;
    started.push_back(b.index);
  }
  return started;
}

void EpochRun::mix_not_started(int64_t index) {
  --outstanding;
  batch(index).mixing = false;
}

bool EpochRun::end_mix(int64_t index, std::vector<float> soft_labels, std::optional<SampleError> error) {
  --outstanding;
  InFlightBatch& b = batch(index);
  b.mixing = false;
  b.mixed = true;
  b.soft_labels = std::move(soft_labels);
  b.mix_error = std::move(error);
  return index == front_index || outstanding == 0;
}

bool EpochRun::end_cancelled_mix() {
  --outstanding;
  return outstanding == 0;
}

}  // namespace conveyor::detail
