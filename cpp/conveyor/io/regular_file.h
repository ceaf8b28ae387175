#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace conveyor {

/// Refuses a path holding a NUL byte: the C string the system would get ends
/// there, so "c.png\0junk" would open "c.png". Throws Error{kConfig} naming
/// `what` (e.g. "paths[3]"), the position and the path (control bytes
/// escaped as \xNN). Every path the io layer opens goes through it
/// (RegularFile, FileSource, TarShardSource).
void check_path(std::string_view path, std::string_view what);

/// A regular file open for reading at any offset (positional reads: POSIX
/// `pread`). The sources that read parts of large files read each sample's
/// byte range with one: IdxSource keeps its image file open for its lifetime;
/// TarShardSource opens the shard per read (no descriptor held between reads)
/// and compares identity() with the one recorded at indexing. Either way a
/// file that shrinks after it was opened (e.g. rewritten in place) gives an
/// Error{kRead} instead of the SIGBUS a memory mapping would.
///
/// Ownership: owns the descriptor, closed on destruction. Thread-safety:
/// immutable; the read functions may be called from many threads at once
/// (pread has no shared file position).
class RegularFile {
 public:
  /// What tells one file version from another: the file (device, inode), its
  /// size and its modification time (ns), from `fstat` on the descriptor when
  /// it was opened. A file renamed over the path has another inode; one
  /// rewritten in place another mtime (and usually size).
  struct Identity {
    uint64_t device = 0;
    uint64_t inode = 0;
    uint64_t size = 0;
    int64_t mtime_ns = 0;
    bool operator==(const Identity&) const = default;
  };

  /// Opens `path` for reading. Only regular files are accepted: a FIFO,
  /// socket or device is refused by name ("not a regular file (a FIFO)")
  /// without blocking, a directory with "Is a directory". Throws Error{kRead}
  /// naming `path` (the system's reason when the open fails); Error{kConfig}
  /// for a path holding a NUL byte (check_path).
  explicit RegularFile(const std::string& path);
  ~RegularFile();
  RegularFile(const RegularFile&) = delete;
  RegularFile& operator=(const RegularFile&) = delete;

  /// The path as given.
  const std::string& path() const noexcept { return path_; }
  /// The file's size when it was opened.
  uint64_t size() const noexcept { return identity_.size; }
  /// The file's identity when it was opened.
  const Identity& identity() const noexcept { return identity_; }
  /// The descriptor (for libraries that read a descriptor, e.g. zlib's
  /// gzdopen on a dup of it); owned by this object.
  int descriptor() const noexcept { return fd_; }

  /// Gives the descriptor up: the caller owns (and closes) it from then on,
  /// and this object reads nothing more. For a layer that reads the file its
  /// own way (Python's file objects) after it was opened and checked here.
  int release() noexcept;

  /// Reads exactly `out.size()` bytes at `offset`. Throws Error{kRead} naming
  /// `key` when the file now ends before them ("file shrank/truncated after it
  /// was opened: expected N bytes at offset O, got M") or the read fails.
  void read_exact(uint64_t offset, std::span<uint8_t> out, const std::string& key) const;
  /// The same, into a new vector of `size` bytes.
  std::vector<uint8_t> read_exact(uint64_t offset, uint64_t size, const std::string& key) const;
  /// Reads up to `out.size()` bytes at `offset`, fewer only at the end of the
  /// file; returns the count. Throws Error{kRead} naming `key` when a read fails.
  uint64_t read_at_most(uint64_t offset, std::span<uint8_t> out, const std::string& key) const;

 private:
  std::string path_;
  int fd_ = -1;
  Identity identity_;
};

}  // namespace conveyor
