#pragma once

#include <cstdint>
#include <utility>
#include <vector>

#include "conveyor/core/buffer_pool.h"
#include "conveyor/core/dtype.h"
#include "conveyor/core/geometry.h"

namespace conveyor {

/// A batch's boxes as three flat arrays (the layout tensors want).
struct FlatBoxes {
  std::vector<int64_t> counts;      ///< Boxes per sample.
  std::vector<float> coords;        ///< x, y, width, height of every box, in sample order.
  std::vector<int64_t> categories;  ///< Category of every box.
};

/// One sample of a variable-shape batch: its own pooled buffer and its spec.
struct SampleOutput {
  PooledBuffer buffer;
  SampleSpec spec;
};

/// One batch: `size()` samples laid out contiguously in a pooled buffer, plus
/// their labels. The buffer returns to the loader's pool when the Batch is
/// destroyed, even after the Loader itself is gone.
///
/// Thread-safety: immutable; the data may be written by the holder.
class Batch {
 public:
  /// `soft_labels`: with a batch mix (MixUp, CutMix), size x `num_classes`
  /// mixed one-hot labels; empty (and num_classes 0) otherwise. `samples`:
  /// for a transform without a fixed shape, each sample's own buffer (and
  /// `buffer` is empty); empty otherwise.
  Batch(int64_t index, int64_t size, int64_t end_position, SampleSpec spec, PooledBuffer buffer,
        std::vector<int64_t> labels, std::vector<std::vector<BoundingBox>> boxes, std::vector<float> soft_labels = {},
        int64_t num_classes = 0, std::vector<SampleOutput> samples = {})
      : index_(index),
        size_(size),
        end_position_(end_position),
        spec_(std::move(spec)),
        buffer_(std::move(buffer)),
        labels_(std::move(labels)),
        boxes_(std::move(boxes)),
        soft_labels_(std::move(soft_labels)),
        num_classes_(num_classes),
        samples_(std::move(samples)) {}

  /// Batch number within the epoch.
  int64_t index() const noexcept { return index_; }
  /// Number of samples (batch_size, or fewer for the last batch).
  int64_t size() const noexcept { return size_; }
  /// Position in the epoch's order just after this batch's last sample;
  /// start_epoch(epoch, end_position()) resumes right after this batch.
  int64_t end_position() const noexcept { return end_position_; }
  const SampleSpec& sample_spec() const noexcept { return spec_; }
  /// {size(), sample dims...} (-1 for the dims that vary per sample in a
  /// variable-shape batch).
  std::vector<int64_t> shape() const;
  /// Start of the samples (size() * sample_spec().num_bytes() bytes); null
  /// for a variable-shape batch.
  void* data() const noexcept { return buffer_.data(); }
  /// Whether each sample has its own buffer and shape (samples()).
  bool variable_shape() const noexcept { return !samples_.empty(); }
  /// A variable-shape batch's samples, in order (size() of them); else empty.
  const std::vector<SampleOutput>& samples() const noexcept { return samples_; }
  /// The samples' labels before any batch mix.
  const std::vector<int64_t>& labels() const noexcept { return labels_; }
  /// After a batch mix: size() x num_classes() float32 labels (each row sums
  /// to 1 up to rounding); empty without one.
  const std::vector<float>& soft_labels() const noexcept { return soft_labels_; }
  /// Columns of soft_labels(); 0 without a batch mix.
  int64_t num_classes() const noexcept { return num_classes_; }
  /// Per sample, its boxes after the sample's crops, resizes and flips (empty
  /// for sources without boxes).
  const std::vector<std::vector<BoundingBox>>& boxes() const noexcept { return boxes_; }
  /// boxes() flattened (a copy; boxes are small).
  FlatBoxes flat_boxes() const;

 private:
  int64_t index_;
  int64_t size_;
  int64_t end_position_;
  SampleSpec spec_;
  PooledBuffer buffer_;
  std::vector<int64_t> labels_;
  std::vector<std::vector<BoundingBox>> boxes_;
  std::vector<float> soft_labels_;
  int64_t num_classes_ = 0;
  std::vector<SampleOutput> samples_;
};

}  // namespace conveyor
