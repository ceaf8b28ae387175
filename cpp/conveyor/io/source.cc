#include "conveyor/io/source.h"

#include <algorithm>
#include <chrono>
#include <utility>

#include "conveyor/core/error.h"
#include "conveyor/io/regular_file.h"
#include "conveyor/io/remote.h"

namespace conveyor {

Bytes Bytes::from_vector(std::vector<uint8_t> data) {
  auto owner = std::make_shared<std::vector<uint8_t>>(std::move(data));
  const uint8_t* begin = owner->data();
  size_t size = owner->size();
  return Bytes(std::move(owner), begin, size);
}

Bytes read_file(const std::string& path) {
  const RegularFile file(path);
  std::vector<uint8_t> data(static_cast<size_t>(file.size()));
  // A file that shrank since it was opened keeps what is there: the decoder
  // then reports it as truncated, naming the file.
  data.resize(static_cast<size_t>(file.read_at_most(0, data, path)));
  return Bytes::from_vector(std::move(data));
}

FileSource::FileSource(std::vector<std::string> paths, std::vector<int64_t> labels,
                       std::vector<std::vector<BoundingBox>> boxes, std::shared_ptr<const RemoteAccess> remote)
    : paths_(std::move(paths)), labels_(std::move(labels)), boxes_(std::move(boxes)), remote_(std::move(remote)) {
  auto check_count = [&](size_t n, const char* what) {
    check_config(n == 0 || n == paths_.size(), std::string(what) + " must be empty or have one entry per path (" +
                                                   std::to_string(paths_.size()) + " paths, " + std::to_string(n) +
                                                   " " + what + ")");
  };
  check_count(labels_.size(), "labels");
  check_count(boxes_.size(), "boxes");
  for (size_t i = 0; i < paths_.size(); ++i) check_path(paths_[i], "paths[" + std::to_string(i) + "]");
  if (!labels_.empty()) max_label_ = *std::max_element(labels_.begin(), labels_.end());
  if (remote_ != nullptr) {
    check_config(remote_->store != nullptr, "FileSource: remote access without a store");
    remote_->retry.validate();
    local_ = std::none_of(paths_.begin(), paths_.end(), [](const std::string& path) { return is_url(path); });
  }
}

Record FileSource::record(size_t i, Bytes data, std::string key) const {
  return Record{std::move(data), labels_.empty() ? -1 : labels_[i], std::move(key),
                boxes_.empty() ? std::vector<BoundingBox>{} : boxes_[i]};
}

Record FileSource::read(int64_t index) const {
  const auto i = static_cast<size_t>(index);
  const std::string& path = paths_.at(i);
  if (remote_ == nullptr || !is_url(path)) return record(i, read_file(path), path);
  std::string key = shown_path(path);
  Bytes data = remote_->read(path, 0, -1, key);
  return record(i, std::move(data), std::move(key));
}

bool FileSource::start_read(int64_t index, const Cancellation* cancellation,
                            std::function<void(AsyncRead)> done) const {
  const auto i = static_cast<size_t>(index);
  const std::string& path = paths_.at(i);
  if (remote_ == nullptr || !is_url(path)) return false;
  return remote_->start_read(path, cancellation, [this, i, done = std::move(done)](RemoteAttempt attempt) {
    AsyncRead end;
    end.queue_wait_ns = std::chrono::duration_cast<std::chrono::nanoseconds>(attempt.queue_wait).count();
    try {
      if (attempt.data) {
        end.record = record(i, Bytes::from_vector(std::move(*attempt.data)), shown_path(paths_[i]));
      } else {
        end.attempt = std::make_shared<RemoteAttempt>(std::move(attempt));
      }
    } catch (...) {
      // Out of memory: neither, and the loader reads the sample anew.
      end.record.reset();
    }
    done(std::move(end));
  });
}

Record FileSource::read_after(int64_t index, const RemoteAttempt& attempt) const {
  const auto i = static_cast<size_t>(index);
  const std::string& path = paths_.at(i);
  if (remote_ == nullptr || !is_url(path)) return read(index);
  std::string key = shown_path(path);
  Bytes data = remote_->read_after(attempt, path, 0, -1, key);
  return record(i, std::move(data), std::move(key));
}

bool FileSource::starts_reads() const { return remote_ != nullptr && !local_ && remote_->store->starts_reads(); }

std::string FileSource::key(int64_t index) const { return shown_path(paths_.at(static_cast<size_t>(index))); }

bool FileSource::read_is_at_hand(int64_t index, ReadPlan* /*plan*/) const {
  const std::string& path = paths_.at(static_cast<size_t>(index));
  return remote_ != nullptr && is_url(path) && remote_->store->serves_locally(path);
}

}  // namespace conveyor
