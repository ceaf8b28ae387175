#include "conveyor/io/source.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <utility>

#include "conveyor/core/error.h"

namespace conveyor {

Bytes Bytes::from_vector(std::vector<uint8_t> data) {
  auto owner = std::make_shared<std::vector<uint8_t>>(std::move(data));
  const uint8_t* begin = owner->data();
  size_t size = owner->size();
  return Bytes(std::move(owner), begin, size);
}

namespace {
[[noreturn]] void throw_read_error(const std::string& path, int error_number) {
  throw Error(ErrorKind::kRead, std::strerror(error_number), path);
}

// Closes the descriptor on every path out of read_file.
struct FileDescriptor {
  int fd;
  ~FileDescriptor() {
    if (fd >= 0) ::close(fd);
  }
};
}  // namespace

Bytes read_file(const std::string& path) {
  FileDescriptor file{::open(path.c_str(), O_RDONLY | O_CLOEXEC)};
  if (file.fd < 0) throw_read_error(path, errno);
  struct stat info {};
  if (::fstat(file.fd, &info) != 0) throw_read_error(path, errno);
  if (S_ISDIR(info.st_mode)) throw_read_error(path, EISDIR);
  std::vector<uint8_t> data(static_cast<size_t>(info.st_size));
  size_t done = 0;
  while (done < data.size()) {
    ssize_t n = ::read(file.fd, data.data() + done, data.size() - done);
    if (n < 0) {
      if (errno == EINTR) continue;
      throw_read_error(path, errno);
    }
    if (n == 0) break;  // The file shrank since fstat; keep what is there.
    done += static_cast<size_t>(n);
  }
  data.resize(done);
  return Bytes::from_vector(std::move(data));
}

FileSource::FileSource(std::vector<std::string> paths, std::vector<int64_t> labels,
                       std::vector<std::vector<BoundingBox>> boxes)
    : paths_(std::move(paths)), labels_(std::move(labels)), boxes_(std::move(boxes)) {
  auto check_count = [&](size_t n, const char* what) {
    check_config(n == 0 || n == paths_.size(), std::string(what) + " must be empty or have one entry per path (" +
                                                   std::to_string(paths_.size()) + " paths, " + std::to_string(n) +
                                                   " " + what + ")");
  };
  check_count(labels_.size(), "labels");
  check_count(boxes_.size(), "boxes");
}

Record FileSource::read(int64_t index) const {
  const auto i = static_cast<size_t>(index);
  const std::string& path = paths_.at(i);
  return Record{read_file(path), labels_.empty() ? -1 : labels_[i], path,
                boxes_.empty() ? std::vector<BoundingBox>{} : boxes_[i]};
}

std::string FileSource::key(int64_t index) const { return paths_.at(static_cast<size_t>(index)); }

}  // namespace conveyor
