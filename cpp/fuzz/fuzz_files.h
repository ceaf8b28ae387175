#pragma once

// Helpers for fuzz targets whose entry point takes file paths (the sources
// map or open files): the input is written to files in a private temporary
// folder (under /dev/shm when available, so no disk I/O), removed at exit.

#include <fcntl.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>

namespace conveyor::fuzz {

/// A per-process temporary folder, created on first use and removed (with the
/// files written by write_file) when the process exits normally.
inline const std::string& temp_dir() {
  // Never destroyed: the atexit handler below runs after static destructors
  // of objects constructed before it was registered.
  static const std::string* dir = [] {
    auto* pattern = new std::string(access("/dev/shm", W_OK) == 0 ? "/dev/shm" : "/tmp");
    *pattern += "/conveyor-fuzz-XXXXXX";
    if (mkdtemp(pattern->data()) == nullptr) std::abort();
    return pattern;
  }();
  return *dir;
}

/// Writes `size` bytes to temp_dir()/name (replacing it) and returns the path.
inline std::string write_file(const std::string& name, const uint8_t* data, size_t size) {
  static bool registered = false;
  if (!registered) {
    registered = true;
    std::atexit([] { std::system(("rm -rf '" + temp_dir() + "'").c_str()); });
  }
  const std::string path = temp_dir() + "/" + name;
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (fd < 0) std::abort();
  size_t done = 0;
  while (done < size) {
    const ssize_t n = ::write(fd, data + done, size - done);
    if (n <= 0) std::abort();
    done += static_cast<size_t>(n);
  }
  ::close(fd);
  return path;
}

}  // namespace conveyor::fuzz
