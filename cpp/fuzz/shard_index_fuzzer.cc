// libFuzzer target: a remote tar shard's index (TarShardSource reading
// "<shard URL>.index.json"): JSON parsing, the format's checks (version,
// shard size, members in order and inside the shard, label texts), then
// WebDataset grouping of the members listed; then every accessor on every
// sample, reading every byte of every field it returns. The shard itself
// is filler served from memory: only its size and the index vary.
//
// Input: one control byte, then the index. The control byte's bits 0-1
// say what a listing said of the shard (TarShardSource::Listed): 0 no
// listing (the store is asked the size and for the index), 1 listed with
// an index, 2 listed without one (the shard is walked), 3 listed with an
// index and a size of 0; bits 2-3 pick the shard's size from kShardSizes
// (an index of another shard_bytes is stale: the shard is walked).
//
// Contract checked: construction either succeeds or throws conveyor::Error
// of kind kRead naming the index or the shard (possibly with ":member"), or
// kConfig (no samples); accessors on a valid index never throw except
// field() of an absent name, and indices out of range are errors; every
// read stays inside the shard.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "conveyor/core/error.h"
#include "conveyor/io/remote.h"
#include "conveyor/io/tar_shards.h"
#include "tar_source_checks.h"

namespace {

constexpr uint64_t kShardSizes[] = {8192, 4096, 1024, 0};
const std::string kShard = "http://h/s.tar";

// The shard (filler bytes) and its index (the fuzzer's input).
class IndexStore final : public conveyor::RemoteStore {
 public:
  IndexStore(uint64_t shard_bytes, std::string index) : shard_bytes_(shard_bytes), index_(std::move(index)) {}

  std::vector<uint8_t> read(const std::string& url, uint64_t offset, int64_t size) const override {
    if (url == kShard) {
      // TarShardSource checked the index's extents: a read outside the shard is a bug.
      if (offset > shard_bytes_ || size < 0 || static_cast<uint64_t>(size) > shard_bytes_ - offset) std::abort();
      return std::vector<uint8_t>(static_cast<size_t>(size), static_cast<uint8_t>(offset));
    }
    if (url == kShard + std::string(conveyor::kShardIndexSuffix) && offset == 0 && size < 0) {
      return {index_.begin(), index_.end()};
    }
    throw conveyor::FetchError({conveyor::FetchFailure::Kind::kStatus, 404, "Not Found"});
  }
  uint64_t size(const std::string& url) const override {
    if (url == kShard) return shard_bytes_;
    throw conveyor::FetchError({conveyor::FetchFailure::Kind::kStatus, 404, "Not Found"});
  }

 private:
  uint64_t shard_bytes_;
  std::string index_;
};

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const uint8_t control = data[0];
  const uint64_t shard_bytes = kShardSizes[(control >> 2) & 3];
  std::vector<std::optional<conveyor::TarShardSource::Listed>> listed;
  switch (control & 3) {
    case 1:
      listed = {conveyor::TarShardSource::Listed{shard_bytes, true}};
      break;
    case 2:
      listed = {conveyor::TarShardSource::Listed{shard_bytes, false}};
      break;
    case 3:
      listed = {conveyor::TarShardSource::Listed{0, true}};
      break;
    default:
      break;
  }
  auto access = std::make_shared<conveyor::RemoteAccess>(conveyor::RemoteAccess{
      std::make_shared<IndexStore>((control & 3) == 3 ? 0 : shard_bytes,
                                   std::string(reinterpret_cast<const char*>(data) + 1, size - 1)),
      {1, 0, 0, 0}});
  std::unique_ptr<conveyor::TarShardSource> source;
  try {
    source = std::make_unique<conveyor::TarShardSource>(std::vector<std::string>{kShard}, access, std::move(listed));
  } catch (const conveyor::Error& e) {
    // No samples (a stale index walks the filler shard: no tar header in it).
    if (e.kind() == conveyor::ErrorKind::kConfig) return 0;
    if (e.kind() != conveyor::ErrorKind::kRead || e.key().rfind(kShard, 0) != 0) std::abort();
    return 0;
  }
  conveyor::fuzz::check_every_sample(*source, kShard);
  return 0;
}
