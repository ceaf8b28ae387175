#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "conveyor/io/source.h"

namespace conveyor {

struct RemoteAccess;  // remote.h

/// Most bytes one range request of a read plan spans (TarShardSource::plan_reads).
inline constexpr uint64_t kRunBytes = uint64_t{8} << 20;
/// Most bytes of runs a read plan holds in memory at once, as the order's
/// positions tell (TarShardSource::plan_reads).
inline constexpr uint64_t kPlanBytes = uint64_t{256} << 20;
/// Remote shards a TarShardSource indexes at a time, each on a thread of its
/// own: each waits a round trip or two for its size and index or chunks (at
/// 20 ms, 118 shards of 4 MB indexed one after another from their bytes took
/// 6-8 s), and holds a chunk (at most 16 x 8 MiB in all).
inline constexpr size_t kShardIndexThreads = 16;
/// A remote shard's index is the object at its URL + this suffix
/// ("s3://b/shard-000000.tar.index.json"; TarShardSource::shard_index).
inline constexpr std::string_view kShardIndexSuffix = ".index.json";
/// What one request costs a read plan, in bytes of transfer: a round trip
/// is worth far more on any network (20 ms at 100 MB/s: 2 MB), but bytes
/// fetched and not needed should stay few.
inline constexpr uint64_t kRequestBytes = uint64_t{64} << 10;

/// Samples stored WebDataset-style in tar shards: consecutive members sharing a
/// prefix (the path up to the first "." of the file name) form one sample, and
/// each member is a field named by the rest of the file name, lower-cased
/// ("jpg", "cls", "seg.png", ...). The image field is the first present of
/// kImageExtensions (image_formats.h: `jpg`, `jpeg`, `png`, `webp`, `tif`, `tiff`, `bmp`, `ppm`, `pgm`), else the
/// first field whose last extension is one of them ("left.png"); `cls` holds the label as ASCII digits; other
/// fields (e.g. `json`) are kept and readable with field().
///
/// Each shard is opened and its headers are walked once at construction
/// (ustar, GNU long names and pax `path`/`size` records), so reads are random
/// access (a global shuffle works): each opens the shard and reads its
/// member's byte range with pread (RegularFile; no descriptor is held between
/// reads), and a shard that shrank since (e.g. rewritten in place) gives
/// Error{kRead} naming "shard.tar:member" instead of a crash. Since the path
/// is reopened, each read also checks the shard is still the file indexed
/// (device, inode, size, mtime): one renamed over or rewritten in place is an
/// Error{kRead} ("the shard changed since it was indexed (...)"), never other
/// bytes under the old index. The record key is "shard.tar:member" (the image
/// member).
///
/// Shards may be URLs (is_url) when `remote` is given. Indexing then reads
/// the shard's index when there is one (its URL + kShardIndexSuffix, written
/// by shard_index(), e.g. by `conveyor pack`): one small request instead of
/// the shard's bytes. The index is used when it describes a shard of the
/// size the store reports (else the shard was rewritten since: it is
/// walked), and one that is not such an index is an Error{kRead} naming it.
/// Without one, indexing reads the shard's bytes once, in large range requests (8 MiB chunks, a member
/// larger than a chunk is skipped; kShardIndexThreads shards at a time,
/// while the constructor waits), keeping only offsets; each read of a
/// member afterwards is one range request of exactly its bytes, retried
/// under remote's RetryPolicy. Under a read plan (plan_reads) samples that
/// are neighbours in a shard and read near each other in the epoch's order
/// (the sequential order, a shuffle buffer's) share one range request of
/// about 8 MiB instead. Remote shards are taken as immutable: a member that now
/// reads short is an Error{kRead}, but no identity is compared.
///
/// Thread-safety: immutable after construction; read(), key() and field() may
/// be called from many threads at once.
class TarShardSource final : public Source {
 public:
  /// What a listing of a remote shard's prefix said of it: its size, and
  /// whether its index (its URL + kShardIndexSuffix) was listed too.
  /// Indexing then asks the store for neither (but for the size where the
  /// store keeps whole objects: a cache's own check). Ignored for a local
  /// path, and without `remote`.
  struct Listed {
    uint64_t size = 0;
    bool has_index = false;
  };

  /// Opens and indexes `shards` in order. Throws Error{kRead} naming the shard
  /// (and the member, once known) when a shard is missing, unreadable,
  /// truncated or has a corrupt header, or when a sample has no image field, a
  /// duplicate field or a malformed `cls`; Error{kConfig} when `shards` is
  /// empty or holds no samples, or a path holds a NUL byte (check_path,
  /// naming "TarShards: shards[i]"). Shards that are URLs are read through
  /// `remote` (when given; without it a URL is opened as a file path).
  /// `listed` is empty, or holds per shard what a listing said of it (none:
  /// not listed); Error{kConfig} when its length is not the shards'.
  explicit TarShardSource(std::vector<std::string> shards, std::shared_ptr<const RemoteAccess> remote = nullptr,
                          std::vector<std::optional<Listed>> listed = {});
  ~TarShardSource() override;

  int64_t size() const override;
  /// Reads the image member (on the calling io thread). Throws Error{kRead}
  /// naming "shard.tar:member" when the shard no longer holds it or changed
  /// since it was indexed.
  Record read(int64_t index) const override;
  std::string key(int64_t index) const override;
  std::vector<int64_t> shard_starts() const override;
  /// A plan for the shards that are URLs, unless their store keeps whole
  /// objects (a cache folder: RemoteStore::keeps_whole_objects). It groups
  /// each shard's samples into runs: consecutive samples whose image
  /// members lie within kRunBytes (8 MiB; a larger image is a run of its
  /// own). A run is read in one range request, at the first read of any of
  /// its samples, and held until each of its samples the order reads was
  /// read, when the order reads at least two of its samples within a window
  /// of positions from its first read, and the run's bytes are at most
  /// twice theirs plus kRequestBytes (64 KiB) per sample; the window is the
  /// widest (halving from the whole order) for which the runs held at once,
  /// as the order's positions tell, stay within kPlanBytes (256 MiB: an
  /// estimate, since a record keeps its run's bytes until it is decoded).
  /// Other samples are read alone. A global shuffle of a large set so reads
  /// each sample alone, as without a plan; the sequential order and a
  /// shuffle buffer's read runs. Null when no run is worth reading, or
  /// `order` holds an index outside [0, size()).
  std::shared_ptr<ReadPlan> plan_reads(std::span<const int64_t> order) const override;
  /// read(index), from its run's bytes when the plan reads it in one; a
  /// run whose request failed is read sample by sample, so that each error
  /// names its member as read() does.
  Record read_planned(int64_t index, ReadPlan& plan) const override;
  /// True unless a shard is a URL read through `remote`.
  bool local_reads() const override;
  bool network_reads() const override { return !local_reads(); }
  /// A shard a cache folder holds, or a run under `plan` read and held for
  /// `index` (not served to it already).
  bool read_is_at_hand(int64_t index, ReadPlan* plan) const override;
  std::optional<int64_t> max_label() const override;

  /// Field names of sample `index` in member order, e.g. {"cls", "jpg", "json"}.
  std::vector<std::string> fields(int64_t index) const;
  /// The bytes of field `name` of sample `index`. Throws Error{kRead} naming
  /// the sample when it has no such field, the shard no longer holds it or
  /// changed since it was indexed.
  Bytes field(int64_t index, const std::string& name) const;
  /// Shard paths as given, in order.
  std::vector<std::string> shards() const;

  /// The index of the local tar shard at `path`, for a reader of it as a URL
  /// (stored at the shard's URL + kShardIndexSuffix): JSON, {"format":
  /// "conveyor tar index", "version": 1, "shard_bytes": N, "members":
  /// [[name, data offset, size], ...]}, every regular file in tar order, a
  /// `cls` member with its text as a fourth item. Throws Error{kRead} naming
  /// the shard (and member) where the constructor would refuse the shard,
  /// and when a member name is not UTF-8 (JSON holds text).
  static std::string shard_index(const std::string& path);

 private:
  struct Index;
  std::unique_ptr<const Index> index_;
};

}  // namespace conveyor
