#include "conveyor/io/array_source.h"

#include <algorithm>
#include <utility>

#include "conveyor/core/checked_size.h"
#include "conveyor/core/error.h"
#include "conveyor/io/regular_file.h"

namespace conveyor {

ArraySource::ArraySource(int64_t count, int64_t sample_bytes, std::vector<int64_t> labels, std::string name)
    : count_(count), sample_bytes_(sample_bytes), labels_(std::move(labels)), name_(std::move(name)) {
  check_config(count >= 0, "ArraySource: negative sample count " + std::to_string(count));
  check_config(sample_bytes > 0, "ArraySource: samples must have at least one byte");
  check_config(labels_.empty() || static_cast<int64_t>(labels_.size()) == count,
               "ArraySource: " + std::to_string(labels_.size()) + " labels for " + std::to_string(count) + " samples");
  // Every sample's offset is below this product, so none overflows.
  checked_mul(count, sample_bytes, "ArraySource: the array size");
  if (!labels_.empty()) max_label_ = *std::max_element(labels_.begin(), labels_.end());
}

namespace {

int64_t samples_in(std::span<const uint8_t> data, int64_t sample_bytes) {
  check_config(sample_bytes > 0, "ArraySource: samples must have at least one byte");
  const auto size = static_cast<int64_t>(data.size());
  check_config(size % sample_bytes == 0, "ArraySource: " + std::to_string(size) + " bytes are not a whole number of " +
                                             std::to_string(sample_bytes) + "-byte samples");
  return size / sample_bytes;
}

}  // namespace

ArraySource::ArraySource(std::shared_ptr<const void> owner, std::span<const uint8_t> data, int64_t sample_bytes,
                         std::vector<int64_t> labels, std::string name)
    : ArraySource(samples_in(data, sample_bytes), sample_bytes, std::move(labels), std::move(name)) {
  owner_ = std::move(owner);
  data_ = data.data();
}

std::shared_ptr<ArraySource> ArraySource::from_file(const std::string& path, int64_t offset, int64_t count,
                                                    int64_t sample_bytes, std::vector<int64_t> labels) {
  std::shared_ptr<ArraySource> source(new ArraySource(count, sample_bytes, std::move(labels), path));
  check_config(offset >= 0, "ArraySource: negative offset " + std::to_string(offset));
  source->file_ = std::make_shared<const RegularFile>(path);
  source->offset_ = offset;
  const int64_t end = checked_add(offset, checked_mul(count, sample_bytes, "ArraySource: the array size"),
                                  "ArraySource: the array's end");
  if (source->file_->size() < static_cast<uint64_t>(end)) {
    throw Error(ErrorKind::kRead,
                "file too short: " + std::to_string(count) + " samples of " + std::to_string(sample_bytes) +
                    " bytes from offset " + std::to_string(offset) + " need " + std::to_string(end) +
                    " bytes, the file has " + std::to_string(source->file_->size()),
                path);
  }
  return source;
}

Record ArraySource::read(int64_t index) const {
  check_config(index >= 0 && index < count_,
               "sample index " + std::to_string(index) + " is out of range [0, " + std::to_string(count_) + ")");
  const int64_t label = labels_.empty() ? -1 : labels_[static_cast<size_t>(index)];
  std::string sample = key(index);
  const int64_t start = index * sample_bytes_;  // Below count * sample_bytes, checked at construction.
  Bytes bytes = file_ ? Bytes::from_vector(file_->read_exact(static_cast<uint64_t>(offset_ + start),
                                                             static_cast<uint64_t>(sample_bytes_), sample))
                      : Bytes(owner_, data_ + start, static_cast<size_t>(sample_bytes_));
  return Record{std::move(bytes), label, std::move(sample), {}};
}

std::string ArraySource::key(int64_t index) const { return name_ + "[" + std::to_string(index) + "]"; }

}  // namespace conveyor
