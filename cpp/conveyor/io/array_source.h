#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "conveyor/io/source.h"

namespace conveyor {

class RegularFile;

/// N fixed-size samples stored one after another: an array's rows (numpy
/// arrays, memory-mapped `.npy` files, CIFAR's batches). Each record is one
/// sample's bytes as stored (e.g. H×W×C uint8 pixels for a RawImageShape, or
/// any tensor's bytes), with an optional label.
///
/// In a file, each read() reads its sample with pread (RegularFile): nothing
/// is mapped, so iterating a file larger than memory keeps the resident set
/// flat, and a file truncated after it was opened gives Error{kRead} naming
/// the sample instead of a SIGBUS. In memory, records are views (no copy).
///
/// Thread-safety: immutable after construction; read() and key() may be
/// called from many threads at once.
class ArraySource final : public Source {
 public:
  /// Samples in memory: `data` holds data.size() / sample_bytes samples,
  /// and must stay valid and unchanged while the source or any record it
  /// returned lives (`owner` keeps it alive, or the caller does when null).
  /// `labels` is empty (every label -1) or has one entry per sample. Keys are
  /// "<name>[<index>]". Throws Error{kConfig} for a zero sample size, data
  /// that is not a whole number of samples or the wrong number of labels.
  ArraySource(std::shared_ptr<const void> owner, std::span<const uint8_t> data, int64_t sample_bytes,
              std::vector<int64_t> labels, std::string name);

  /// Samples in the file `path` from byte `offset` on. Throws Error{kRead}
  /// naming the file when it cannot be opened or is shorter than
  /// offset + count × sample_bytes; Error{kConfig} as above. Keys are
  /// "<path>[<index>]".
  static std::shared_ptr<ArraySource> from_file(const std::string& path, int64_t offset, int64_t count,
                                                int64_t sample_bytes, std::vector<int64_t> labels);

  int64_t size() const override { return count_; }
  bool local_reads() const override { return true; }  ///< Memory or a local file.
  std::optional<int64_t> max_label() const override { return max_label_; }
  Record read(int64_t index) const override;
  std::string key(int64_t index) const override;

  /// Bytes per sample.
  int64_t sample_bytes() const noexcept { return sample_bytes_; }

 private:
  ArraySource(int64_t count, int64_t sample_bytes, std::vector<int64_t> labels, std::string name);

  std::shared_ptr<const void> owner_;
  const uint8_t* data_ = nullptr;            // In memory.
  std::shared_ptr<const RegularFile> file_;  // In a file.
  int64_t offset_ = 0;
  int64_t count_ = 0;
  int64_t sample_bytes_ = 0;
  std::vector<int64_t> labels_;
  int64_t max_label_ = -1;
  std::string name_;
};

}  // namespace conveyor
