#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "conveyor/io/remote.h"

namespace conveyor {

/// What a CachingStore has done, for benchmarks and tests.
struct RemoteCacheCounters {
  int64_t hits = 0;          ///< Reads served from the cache folder.
  int64_t misses = 0;        ///< Reads that fetched their object (then cached it).
  int64_t read_through = 0;  ///< Reads sent to the store while another reader fetched the object.
  int64_t validations = 0;   ///< Requests that checked a cached object had not changed.
  int64_t evictions = 0;     ///< Objects removed to stay within the budget.
  int64_t write_errors = 0;  ///< Objects that could not be cached (disk full, ...): read through.
};

/// A RemoteStore that keeps whole objects in a local folder, so that later
/// reads (the next epoch, another run, another rank of the node) send no
/// request. An object is fetched whole on its first read (a tar shard too,
/// on the first read of any member), written to a temporary name, fsync'ed
/// and renamed into place: readers never see a partial file. Each file
/// starts with a header naming its URL, size and version (ETag), checked on
/// every open, so a file of another URL or a torn write is never served.
///
/// - **Changed objects.** The first read of a cached object in this store's
///   life (one process) sends one HEAD (stat) and refetches the object when
///   its size or version differs, or when the store cannot say (a HEAD
///   refused); afterwards reads send nothing.
/// - **Several processes** (the ranks of one node) may share the folder. An
///   exclusive lock file per object (flock) lets one of them fetch it; the
///   others read their byte ranges from the store meanwhile instead of
///   waiting, so no object is fetched whole twice at once.
/// - **Budget.** After each insertion the least recently used objects
///   (modification time, touched on their first use by a store) are removed
///   until the folder's objects fit `budget_bytes`; the budget is so never
///   exceeded by more than the object just inserted (eviction goes down to
///   90 % of it). An object larger than the budget is not cached and never
///   fetched whole: it is read as asked. Whole fetches of known size held in
///   memory at once are bounded (2 GiB); past it a read goes through.
/// - **One store per folder.** Files are keyed by URL: a folder must not be
///   shared by stores that give the same URLs different objects (two S3
///   endpoints). A store without versions (fsspec's) is checked by size only.
/// - **Failures** to write the cache (a full disk, a read-only folder) never
///   fail a read: the object is read through and counted (write_errors).
///
/// Ownership: holds `store`. Thread-safety: every member may be called from
/// many threads at once.
class CachingStore final : public RemoteStore {
 public:
  /// Creates `directory` when missing. `budget_bytes` 0 (the default): 80 %
  /// of the space free on the folder's file system now plus what the folder
  /// already holds (so that a data set larger than the disk fills it no
  /// further); else > 0. Throws
  /// Error{kConfig} naming the folder when it cannot be created.
  CachingStore(std::shared_ptr<const RemoteStore> store, std::string directory, int64_t budget_bytes = 0);

  std::vector<uint8_t> read(const std::string& url, uint64_t offset, int64_t size) const override;
  uint64_t size(const std::string& url) const override;
  RemoteObjectInfo stat(const std::string& url) const override;
  std::vector<RemoteObject> list(const std::string& prefix) const override;
  /// True while this store last found or put `url`'s object in the folder
  /// (a read of it hit, or it was cached), and has not evicted it since. An
  /// object another process evicted is found missing by its next read.
  bool serves_locally(const std::string& url) const override;
  /// True: an object is fetched whole at its first read.
  bool keeps_whole_objects() const override { return true; }

  RemoteCacheCounters counters() const;
  const std::string& directory() const { return directory_; }
  int64_t budget_bytes() const { return budget_bytes_; }

  /// The file that holds `url`'s object in `directory`
  /// ("<2 hex digits>/<16 hex digits>.obj"): 256 subfolders, since every
  /// file made, renamed or removed in a folder takes that folder's lock
  /// (one folder let a node fill its cache at ~2 000 objects/s, 256 at ~8 000).
  static std::string file_name(const std::string& url);

 private:
  struct Validated {
    uint64_t size = 0;
    std::string version;
    bool touched = false;  // Its file's time was set on first use (the LRU order).
  };

  // The cached object of `url` read at [offset, offset+size) if the folder
  // holds a valid one checked in this store's life (validating it first if
  // not yet); nullopt when it has none or it changed.
  bool read_cached(const std::string& url, uint64_t offset, int64_t size, std::vector<uint8_t>* out) const;
  // Writes `data` as `url`'s object (atomically), then keeps the budget.
  void insert(const std::string& url, const RemoteObjectInfo& info, const std::vector<uint8_t>& data) const;
  void evict(const std::string& keep, int64_t added) const;
  void set_on_disk(const std::string& url, bool on) const;
  // The subfolder of `url`'s file, made at its first use.
  std::string subfolder_of(const std::string& url) const;
  // Bytes of the cached objects in the folder (a scan).
  int64_t folder_bytes() const;

  std::shared_ptr<const RemoteStore> store_;
  std::string directory_;
  int64_t budget_bytes_;

  mutable std::mutex mu_;  // Guards validated_, uncacheable_ and on_disk_.
  mutable std::unordered_map<std::string, Validated> validated_;
  mutable std::unordered_set<std::string> uncacheable_;  // Larger than the budget: read through.
  // The objects last seen in the folder (file name -> URL): serves_locally.
  mutable std::unordered_map<std::string, std::string> on_disk_;

  mutable std::array<std::atomic<bool>, 256> subfolders_made_{};
  mutable std::atomic<int64_t> fetching_bytes_{0};  // Of whole objects being fetched now (their known sizes).
  mutable std::atomic<int64_t> hits_{0}, misses_{0}, read_through_{0}, validations_{0}, evictions_{0}, write_errors_{0};
};

}  // namespace conveyor
