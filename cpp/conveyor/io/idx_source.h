#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "conveyor/io/source.h"

namespace conveyor {

/// Samples from a pair of IDX files (the format of MNIST, Fashion-MNIST,
/// KMNIST, EMNIST): an unsigned-byte image file of N×H×W (or N×H×W×C) and an
/// unsigned-byte label file of N. Each record is one sample's raw H×W(×C)
/// uint8 pixels, to be turned into a tensor by RawTensorTransform.
///
/// Plain files stay open and each read() reads its sample with pread
/// (RegularFile), so a file truncated after it was opened gives Error{kRead}
/// naming the sample instead of a crash; gzip-compressed files (name ending in
/// ".gz") are decompressed once into memory and records are views into it.
/// Labels (N bytes) are read at construction. A FIFO or device is refused.
///
/// Thread-safety: immutable after construction; read() and key() may be called
/// from many threads at once.
class IdxSource final : public Source {
 public:
  /// Throws Error{kRead} naming the file when it is missing or unreadable, not
  /// an unsigned-byte IDX file (bad magic), has the wrong number of dimensions
  /// (images: 3 or 4, labels: 1), or is shorter or longer than its header says;
  /// Error{kConfig} when the two files disagree on the number of samples.
  IdxSource(std::string images_path, std::string labels_path);
  ~IdxSource() override;

  int64_t size() const override;
  bool local_reads() const override { return true; }  ///< Local files (pread).
  Record read(int64_t index) const override;
  /// "<images_path>[<index>]".
  std::string key(int64_t index) const override;
  std::optional<int64_t> max_label() const override;

  /// Per-sample dimensions of the image file: {H, W} or {H, W, C}.
  const std::vector<int64_t>& sample_shape() const noexcept;

 private:
  struct Data;
  std::unique_ptr<const Data> data_;
};

}  // namespace conveyor
