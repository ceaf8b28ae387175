#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "conveyor/core/geometry.h"

namespace conveyor {

class Cancellation;    // core/cancellation.h
struct RemoteAccess;   // remote.h
struct RemoteAttempt;  // remote.h

/// Immutable bytes with shared ownership: an owned vector, or a view into
/// memory kept alive by `owner` (e.g. a decompressed file). Cheap to copy.
class Bytes {
 public:
  Bytes() = default;
  /// Takes ownership of `data`.
  static Bytes from_vector(std::vector<uint8_t> data);
  /// A view of [data, data + size) kept valid by `owner`.
  Bytes(std::shared_ptr<const void> owner, const uint8_t* data, size_t size) noexcept
      : owner_(std::move(owner)), data_(data), size_(size) {}

  const uint8_t* data() const noexcept { return data_; }
  size_t size() const noexcept { return size_; }
  bool empty() const noexcept { return size_ == 0; }
  std::span<const uint8_t> span() const noexcept { return {data_, size_}; }
  /// The view [offset, offset + size) of these bytes, sharing their owner
  /// (no copy). The range must lie within size().
  Bytes slice(size_t offset, size_t size) const noexcept { return Bytes(owner_, data_ + offset, size); }

 private:
  std::shared_ptr<const void> owner_;
  const uint8_t* data_ = nullptr;
  size_t size_ = 0;
};

/// One sample as read from storage, before decoding.
struct Record {
  Bytes data;                      ///< Encoded sample (e.g. JPEG file contents, or raw pixels).
  int64_t label = -1;              ///< Class index, or -1 when the source has no labels.
  std::string key;                 ///< Names the sample in errors: a path, or "shard.tar:member".
  std::vector<BoundingBox> boxes;  ///< Objects in the image (detection sources), in source pixels.
};

/// How Source::start_read ended: the record, or else the attempt that
/// Source::read_after continues from.
struct AsyncRead {
  std::optional<Record> record;
  std::shared_ptr<RemoteAttempt> attempt;  ///< When there is no record.
  /// The read's wait for a slot under its store's limit on requests in
  /// flight (thread_queue_wait_ns() for read()): not its latency.
  int64_t queue_wait_ns = 0;
};

/// What a source prepares for reading one epoch's order (Source::plan_reads):
/// opaque to the loader, which hands it back to read_planned().
///
/// Thread-safety: used by many io threads at once; its source makes it safe.
class ReadPlan {
 public:
  virtual ~ReadPlan() = default;
};

/// Maps a sample index in [0, size()) to its Record.
///
/// Thread-safety: read() and key() are called concurrently from the io pool
/// and must be safe to call from many threads at once.
class Source {
 public:
  virtual ~Source() = default;

  /// Number of samples.
  virtual int64_t size() const = 0;

  /// Reads sample `index`. Throws conveyor::Error (kRead) naming the sample
  /// when its bytes cannot be read.
  virtual Record read(int64_t index) const = 0;

  /// The sample's key without reading it (used to name it in errors).
  virtual std::string key(int64_t index) const = 0;

  /// Starts reading sample `index` and returns without waiting for it,
  /// where the source can (a URL through a store that reads so,
  /// RemoteStore::start_read); false where it cannot, and `done` is never
  /// called: the loader then calls read() on an io thread. Otherwise `done`
  /// is called once, on the store's thread (never on the caller's, though
  /// perhaps before start_read returns), with the record or the attempt for
  /// read_after(); it must be quick and must not throw, and it may start
  /// another read. The read ends
  /// early when `cancellation` (null: none; it must outlive the read) is
  /// cancelled. The default: false.
  virtual bool start_read(int64_t index, const Cancellation* cancellation, std::function<void(AsyncRead)> done) const {
    (void)index, (void)cancellation, (void)done;
    return false;
  }
  /// read(index) after start_read's `attempt` gave no record: the same
  /// record and errors as read(), that attempt counted among its retries.
  /// The default: read(index).
  virtual Record read_after(int64_t index, const RemoteAttempt& attempt) const {
    (void)attempt;
    return read(index);
  }
  /// Whether start_read() may start reads at all (false: it never does, the
  /// default): the loader then reads on its io threads as before.
  virtual bool starts_reads() const { return false; }
  /// A plan for reading `order`: the sample indices one loader reads this
  /// epoch, in the order it issues them. A source whose samples are ranges
  /// of larger remote objects (TarShardSource) may read samples issued near
  /// each other in one request and serve them from memory. Null (the
  /// default): each sample is read alone. Called once per epoch, before its
  /// reads; the plan lives as long as the epoch.
  virtual std::shared_ptr<ReadPlan> plan_reads(std::span<const int64_t> order) const {
    (void)order;
    return nullptr;
  }
  /// read(index), under `plan` (from this source's plan_reads, for an order
  /// holding `index`): the same record and the same errors, perhaps from a
  /// request shared with other samples of the plan.
  virtual Record read_planned(int64_t index, ReadPlan& plan) const {
    (void)plan;
    return read(index);
  }

  /// First sample index of each shard, ascending, for sources stored in
  /// shards (empty: one shard). A shuffle buffer (LoaderOptions) shuffles the
  /// shard order and keeps reads within a few shards at a time.
  virtual std::vector<int64_t> shard_starts() const { return {}; }

  /// Positions in one epoch: size() for a plain source; a mixture sets its
  /// own (MixSource).
  virtual int64_t epoch_size() const { return size(); }

  /// The epoch's order of sample indices (epoch_size() entries, indices in
  /// [0, size())), from (seed, epoch) only, for a source that defines it (a
  /// mixture); `shuffle` is the loader's option. Empty (the default): the
  /// loader orders [0, size()) itself.
  virtual std::vector<int64_t> epoch_order(uint64_t seed, uint64_t epoch, bool shuffle) const {
    (void)seed, (void)epoch, (void)shuffle;
    return {};
  }

  /// A source made of parts (a mixture): how many; the loader counts the
  /// samples it processes per part (LoaderStats::samples_per_part).
  virtual int parts() const { return 1; }
  /// True when read() only touches local storage or memory: it never waits on
  /// a network (timeouts, retries, backoff). The loader may then run reads on
  /// the cpu thread that decodes the sample, even before it has measured
  /// them (pipeline/loader.h); other sources' reads always go to the io pool.
  virtual bool local_reads() const { return false; }
  /// True when reads wait on a network (URLs read through a RemoteStore):
  /// the loader then starts with a batch's reads in flight, so that its first
  /// batch waits one round trip, not several. Not a Python dataset's reads,
  /// which are neither local nor this.
  virtual bool network_reads() const { return false; }
  /// True when reading sample `index` needs no request now: a URL whose
  /// object a cache folder holds (RemoteStore::serves_locally), read as a
  /// local file, or a sample `plan` (this source's plan_reads for the
  /// epoch, or null) holds in memory, which read_planned serves. The loader
  /// then runs the read on the cpu thread that decodes it too. A hint: it
  /// must not wait, and a wrong answer costs only the thread one read runs
  /// on.
  virtual bool read_is_at_hand(int64_t /*index*/, ReadPlan* /*plan*/) const { return false; }
  /// The part sample `index` belongs to, in [0, parts()).
  virtual int part_of(int64_t index) const {
    (void)index;
    return 0;
  }
  /// The largest label read() can return (-1 when no sample has a label), or
  /// nullopt when labels are only known once read (PythonSource, the
  /// default). A mixture checks its label offsets against it (MixSource).
  virtual std::optional<int64_t> max_label() const { return std::nullopt; }
};

/// Reads a whole regular file into memory. Throws Error{kRead} naming `path`
/// and the system's reason (e.g. "No such file or directory"), or "not a
/// regular file (a FIFO)" for a FIFO, socket or device (never blocks on one).
Bytes read_file(const std::string& path);

/// Samples that are files on a filesystem, with optional labels and boxes;
/// the source behind ImageFolder, FileList and CocoDetection. With `remote`,
/// paths that are URLs (is_url, remote.h) are read whole through it, with its
/// retries; other paths are read from the file system (read_file) as without.
class FileSource final : public Source {
 public:
  /// `labels` is empty (every label -1) or has one entry per path; so has
  /// `boxes` (each file's objects, for detection) when not empty. Throws
  /// Error{kConfig} naming "paths[i]" for a path holding a NUL byte (check_path).
  explicit FileSource(std::vector<std::string> paths, std::vector<int64_t> labels = {},
                      std::vector<std::vector<BoundingBox>> boxes = {},
                      std::shared_ptr<const RemoteAccess> remote = nullptr);

  int64_t size() const override { return static_cast<int64_t>(paths_.size()); }
  Record read(int64_t index) const override;
  std::string key(int64_t index) const override;
  /// A URL's path through RemoteAccess::start_read; false for a file.
  bool start_read(int64_t index, const Cancellation* cancellation, std::function<void(AsyncRead)> done) const override;
  Record read_after(int64_t index, const RemoteAttempt& attempt) const override;
  /// True when some path is a URL and its store starts reads.
  bool starts_reads() const override;
  /// True unless a path is a URL read through `remote`.
  bool local_reads() const override { return local_; }
  bool network_reads() const override { return !local_; }
  bool read_is_at_hand(int64_t index, ReadPlan* plan) const override;
  std::optional<int64_t> max_label() const override { return max_label_; }

 private:
  // Sample i's record of `data`, named `key`.
  Record record(size_t i, Bytes data, std::string key) const;

  std::vector<std::string> paths_;
  std::vector<int64_t> labels_;
  int64_t max_label_ = -1;
  std::vector<std::vector<BoundingBox>> boxes_;
  std::shared_ptr<const RemoteAccess> remote_;
  bool local_ = true;
};

}  // namespace conveyor
