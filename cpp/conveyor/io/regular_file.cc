#include "conveyor/io/regular_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <limits>

#include "conveyor/core/error.h"

// POSIX only (open, fstat, pread), which Linux and macOS provide; Linux is
// what is built and tested. A Windows port would use CreateFileW and ReadFile
// with an OVERLAPPED offset (a positional read, as pread) and
// GetFileInformationByHandle to tell regular files from pipes and devices.

namespace conveyor {

namespace {

[[noreturn]] void fail(const std::string& key, int error_number) {
  throw Error(ErrorKind::kRead, std::strerror(error_number), key);
}

// What a non-regular file is, for "not a regular file (a FIFO)".
const char* file_type(mode_t mode) {
  if (S_ISFIFO(mode)) return "a FIFO";
  if (S_ISCHR(mode)) return "a character device";
  if (S_ISBLK(mode)) return "a block device";
  if (S_ISSOCK(mode)) return "a socket";
  return "not a file";
}

}  // namespace

void check_path(std::string_view path, std::string_view what) {
  const size_t nul = path.find('\0');
  if (nul == std::string_view::npos) return;
  std::string shown;
  for (const char c : path) {
    const auto byte = static_cast<unsigned char>(c);
    if (byte < 0x20 || byte == 0x7f) {
      constexpr char kHex[] = "0123456789abcdef";
      shown += {'\\', 'x', kHex[byte >> 4], kHex[byte & 0xf]};
    } else {
      shown += c;
    }
  }
  throw Error(ErrorKind::kConfig, std::string(what) + " contains a NUL byte at position " + std::to_string(nul) +
                                      " ('" + shown + "'); file names cannot hold one");
}

RegularFile::RegularFile(const std::string& path) : path_(path) {
  check_path(path, "path");
  // O_NONBLOCK, then fstat on the descriptor: opening a FIFO for reading
  // blocks until a writer appears, forever if none does. stat() before a
  // blocking open would race with the path being replaced in between; the
  // descriptor's own fstat checks exactly the file that was opened. For
  // regular files O_NONBLOCK changes nothing, but it is cleared anyway.
  fd_ = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY);
  if (fd_ < 0) fail(path, errno);
  struct stat info {};
  int error = 0;
  if (::fstat(fd_, &info) != 0) {
    error = errno;
  } else if (S_ISDIR(info.st_mode)) {
    error = EISDIR;
  } else if (!S_ISREG(info.st_mode)) {
    ::close(fd_);
    throw Error(ErrorKind::kRead, std::string("not a regular file (") + file_type(info.st_mode) + ")", path);
  } else {
    const int flags = ::fcntl(fd_, F_GETFL);
    if (flags < 0 || ::fcntl(fd_, F_SETFL, flags & ~O_NONBLOCK) != 0) error = errno;
  }
  if (error != 0) {
    ::close(fd_);
    fail(path, error);
  }
  // st_mtim is POSIX 2008 (Linux; macOS spells it st_mtimespec).
  identity_ = {static_cast<uint64_t>(info.st_dev), static_cast<uint64_t>(info.st_ino),
               static_cast<uint64_t>(info.st_size),
               static_cast<int64_t>(info.st_mtim.tv_sec) * 1'000'000'000 + info.st_mtim.tv_nsec};
}

RegularFile::~RegularFile() {
  if (fd_ >= 0) ::close(fd_);
}

int RegularFile::release() noexcept {
  const int fd = fd_;
  fd_ = -1;
  return fd;
}

uint64_t RegularFile::read_at_most(uint64_t offset, std::span<uint8_t> out, const std::string& key) const {
  uint64_t done = 0;
  while (done < out.size()) {
    if (offset + done > static_cast<uint64_t>(std::numeric_limits<off_t>::max())) break;  // Past any file.
    const ssize_t n = ::pread(fd_, out.data() + done, out.size() - done, static_cast<off_t>(offset + done));
    if (n < 0) {
      if (errno == EINTR) continue;
      fail(key, errno);
    }
    if (n == 0) break;  // End of file.
    done += static_cast<uint64_t>(n);
  }
  return done;
}

void RegularFile::read_exact(uint64_t offset, std::span<uint8_t> out, const std::string& key) const {
  const uint64_t got = read_at_most(offset, out, key);
  if (got != out.size()) {
    throw Error(ErrorKind::kRead,
                "file shrank/truncated after it was opened: expected " + std::to_string(out.size()) +
                    " bytes at offset " + std::to_string(offset) + ", got " + std::to_string(got),
                key);
  }
}

std::vector<uint8_t> RegularFile::read_exact(uint64_t offset, uint64_t size, const std::string& key) const {
  std::vector<uint8_t> data(static_cast<size_t>(size));
  read_exact(offset, data, key);
  return data;
}

}  // namespace conveyor
