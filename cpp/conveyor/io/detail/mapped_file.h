#pragma once

// Internal: a read-only memory mapping of a whole file, shared by the sources
// that read from mmapped files (tar shards, IDX files).

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstring>
#include <string>

#include "conveyor/core/error.h"

namespace conveyor::detail {

/// A read-only private mapping of `path`; unmapped on destruction. An empty
/// file maps to data() == nullptr, size() == 0. Throws Error{kRead} naming the
/// path and the system's reason.
///
/// Thread-safety: immutable; the bytes may be read from any thread.
class MappedFile {
 public:
  explicit MappedFile(const std::string& path) {
    const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) fail(path, errno);
    struct stat info {};
    int error = 0;
    if (::fstat(fd, &info) != 0) {
      error = errno;
    } else if (S_ISDIR(info.st_mode)) {
      error = EISDIR;
    } else if (info.st_size > 0) {
      void* p = ::mmap(nullptr, static_cast<size_t>(info.st_size), PROT_READ, MAP_PRIVATE, fd, 0);
      if (p == MAP_FAILED) {
        error = errno;
      } else {
        data_ = static_cast<const uint8_t*>(p);
        size_ = static_cast<size_t>(info.st_size);
      }
    }
    ::close(fd);  // The mapping stays valid without the descriptor.
    if (error != 0) fail(path, error);
  }
  ~MappedFile() {
    if (data_ != nullptr) ::munmap(const_cast<uint8_t*>(data_), size_);
  }
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;

  const uint8_t* data() const noexcept { return data_; }
  size_t size() const noexcept { return size_; }

 private:
  [[noreturn]] static void fail(const std::string& path, int error) {
    throw Error(ErrorKind::kRead, std::strerror(error), path);
  }
  const uint8_t* data_ = nullptr;
  size_t size_ = 0;
};

/// Reads one byte per page of [data, data + size) so that the page faults (the
/// storage reads) happen on the calling thread.
inline void touch_pages(const uint8_t* data, size_t size) noexcept {
  constexpr size_t kPage = 4096;
  volatile uint8_t sink = 0;
  for (size_t i = 0; i < size; i += kPage) sink = sink + data[i];
  if (size > 0) sink = sink + data[size - 1];
  (void)sink;
}

}  // namespace conveyor::detail
