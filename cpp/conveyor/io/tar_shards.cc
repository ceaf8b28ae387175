#include "conveyor/io/tar_shards.h"

#include <algorithm>
#include <atomic>
#include <cctype>
#include <charconv>
#include <condition_variable>
#include <cstring>
#include <exception>
#include <limits>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <string_view>
#include <thread>
#include <unordered_map>
#include <unordered_set>
#include <utility>

#include "conveyor/core/cancellation.h"
#include "conveyor/core/error.h"
#include "conveyor/core/thread_pool.h"
#include "conveyor/io/image_formats.h"
#include "conveyor/io/regular_file.h"
#include "conveyor/io/remote.h"

namespace conveyor {

namespace {

constexpr size_t kBlock = 512;

// Members read while indexing (GNU long names, pax headers, cls labels) are
// small; larger ones are corrupt, and are refused instead of allocated.
constexpr uint64_t kMaxMetadataMember = uint64_t{1} << 20;

// A short, printable rendering of untrusted bytes for error messages.
std::string printable(std::string_view text, size_t limit = 40) {
  std::string out;
  for (char c : text.substr(0, limit)) out += (c >= 0x20 && c < 0x7f) ? c : '?';
  if (text.size() > limit) out += "...";
  return out;
}

// A NUL-terminated string in a fixed-size header field.
std::string_view header_string(const uint8_t* p, size_t n) {
  const auto* begin = reinterpret_cast<const char*>(p);
  return {begin, strnlen(begin, n)};
}

// A numeric header field: octal ASCII (leading spaces/NULs allowed, ended by a
// space or NUL), or GNU base-256 when the high bit of the first byte is set.
std::optional<uint64_t> header_number(const uint8_t* p, size_t n) {
  if (p[0] & 0x80) {
    if (p[0] & 0x40) return std::nullopt;  // Negative.
    uint64_t value = p[0] & 0x3f;
    for (size_t i = 1; i < n; ++i) {
      if (value >> 56) return std::nullopt;  // Overflow.
      value = (value << 8) | p[i];
    }
    return value;
  }
  size_t i = 0;
  while (i < n && (p[i] == ' ' || p[i] == 0)) ++i;
  uint64_t value = 0;
  for (; i < n && p[i] != ' ' && p[i] != 0; ++i) {
    if (p[i] < '0' || p[i] > '7' || (value >> 60)) return std::nullopt;
    value = value * 8 + (p[i] - '0');
  }
  return value;
}

bool checksum_ok(const uint8_t* h) {
  auto stored = header_number(h + 148, 8);
  if (!stored) return false;
  // The checksum is computed with its own field as spaces; historic writers
  // summed signed chars, so accept either sum.
  uint64_t unsigned_sum = 0;
  int64_t signed_sum = 0;
  for (size_t i = 0; i < kBlock; ++i) {
    const uint8_t byte = (i >= 148 && i < 156) ? ' ' : h[i];
    unsigned_sum += byte;
    signed_sum += static_cast<int8_t>(byte);
  }
  return *stored == unsigned_sum || static_cast<int64_t>(*stored) == signed_sum;
}

bool all_zero(const uint8_t* p, size_t n) {
  return std::all_of(p, p + n, [](uint8_t b) { return b == 0; });
}

struct PaxRecords {
  std::optional<std::string> path;
  std::optional<uint64_t> size;
};

// Pax extended header records: "<length> <key>=<value>\n", length counting the
// whole record. Returns nullopt when malformed.
std::optional<PaxRecords> parse_pax(std::string_view data) {
  PaxRecords records;
  while (!data.empty()) {
    if (data.front() == 0) break;  // Zero padding after the last record.
    size_t length = 0;
    auto [end, ec] = std::from_chars(data.data(), data.data() + data.size(), length);
    if (ec != std::errc() || length == 0 || length > data.size()) return std::nullopt;
    const size_t header = static_cast<size_t>(end - data.data());
    if (header >= length || *end != ' ' || data[length - 1] != '\n') return std::nullopt;
    std::string_view record = data.substr(header + 1, length - header - 2);
    const size_t eq = record.find('=');
    if (eq == std::string_view::npos) return std::nullopt;
    std::string_view key = record.substr(0, eq);
    std::string_view value = record.substr(eq + 1);
    if (key == "path") {
      records.path = std::string(value);
    } else if (key == "size") {
      uint64_t size = 0;
      auto [size_end, size_ec] = std::from_chars(value.data(), value.data() + value.size(), size);
      if (size_ec != std::errc() || size_end != value.data() + value.size()) return std::nullopt;
      records.size = size;
    }
    data.remove_prefix(length);
  }
  return records;
}

// webdataset's base_plus_ext: the prefix is the path up to the first "." of the
// file name, the field the rest, lower-cased. False for names without a field
// (no dot, or a file name starting with a dot) and for "__*__" metadata files.
bool split_member_name(std::string_view name, std::string_view& prefix, std::string& field) {
  const size_t slash = name.rfind('/');
  const size_t base = slash == std::string_view::npos ? 0 : slash + 1;
  if (slash == std::string_view::npos && name.size() >= 4 && name.starts_with("__") && name.ends_with("__")) {
    return false;
  }
  const size_t dot = name.find('.', base);
  if (dot == std::string_view::npos || dot == base) return false;
  prefix = name.substr(0, dot);
  field.assign(name.substr(dot + 1));
  std::transform(field.begin(), field.end(), field.begin(),
                 [](char c) { return (c >= 'A' && c <= 'Z') ? static_cast<char>(c - 'A' + 'a') : c; });
  return true;
}

// What differs between two identities of a file, for "the shard changed".
std::string describe_change(const RegularFile::Identity& was, const RegularFile::Identity& now) {
  std::string out;
  auto add = [&out](const std::string& part) { out += (out.empty() ? "" : ", ") + part; };
  if (now.device != was.device || now.inode != was.inode) {
    add("another file: inode " + std::to_string(now.inode) + ", was " + std::to_string(was.inode));
  }
  if (now.size != was.size) add("size " + std::to_string(now.size) + " bytes, was " + std::to_string(was.size));
  if (now.mtime_ns != was.mtime_ns) add("modification time changed");
  return out;
}

// Indexing reads a remote shard in chunks of this size, one range request
// each: walking the headers then costs about size / kIndexChunk requests
// rather than one per member (a request's latency dwarfs the transfer of a
// typical member), and a member larger than a chunk is skipped, not fetched.
constexpr uint64_t kIndexChunk = uint64_t{8} << 20;

// A remote shard of a known size as indexing reads it, with RegularFile's
// reading functions (walk_members is written once for both): byte ranges
// served from the current chunk, fetched again starting at the wanted offset
// when it is not there. Used by one thread.
class RemoteShardReader {
 public:
  RemoteShardReader(const RemoteAccess& remote, const std::string& url, uint64_t size)
      : remote_(remote), url_(url), size_(size) {}

  uint64_t size() const noexcept { return size_; }

  void read_exact(uint64_t offset, std::span<uint8_t> out, const std::string& key) const {
    if (out.empty()) return;
    if (offset > size_ || out.size() > size_ - offset) {
      throw Error(ErrorKind::kRead,
                  "expected " + std::to_string(out.size()) + " bytes at offset " + std::to_string(offset) + " of a " +
                      std::to_string(size_) + "-byte object",
                  key);
    }
    if (offset < start_ || offset - start_ + out.size() > chunk_.size()) {
      const uint64_t length = std::min(std::max<uint64_t>(kIndexChunk, out.size()), size_ - offset);
      const Bytes bytes = remote_.read(url_, offset, static_cast<int64_t>(length), key);
      chunk_.assign(bytes.data(), bytes.data() + bytes.size());
      start_ = offset;
    }
    std::memcpy(out.data(), chunk_.data() + (offset - start_), out.size());
  }

  std::vector<uint8_t> read_exact(uint64_t offset, uint64_t size, const std::string& key) const {
    std::vector<uint8_t> out(static_cast<size_t>(size));
    read_exact(offset, out, key);
    return out;
  }

 private:
  const RemoteAccess& remote_;
  const std::string& url_;
  const uint64_t size_;
  mutable uint64_t start_ = 0;  // Offset of chunk_ in the object.
  mutable std::vector<uint8_t> chunk_;
};

// One regular file of a shard, in tar order: its name (after GNU long names
// and pax paths), the offset and size of its data, and for a `cls` member
// its text (the label), read while indexing.
struct TarMember {
  std::string name;
  uint64_t offset = 0;
  uint64_t size = 0;
  std::optional<std::string> text;
};

bool is_cls_member(std::string_view name) {
  std::string_view prefix;
  std::string field;
  return split_member_name(name, prefix, field) && field == "cls";
}

// The label a `cls` member's text holds (an integer, surrounding spaces
// allowed); errors name it "shown:member" (shown: the shard as keys show it).
int64_t parse_label(const std::string& shown, const TarMember& member) {
  if (!member.text)
    throw Error(ErrorKind::kInternal, "a cls member was indexed without its text", shown + ":" + member.name);
  std::string_view text = *member.text;
  while (!text.empty() && std::isspace(static_cast<unsigned char>(text.back()))) text.remove_suffix(1);
  while (!text.empty() && std::isspace(static_cast<unsigned char>(text.front()))) text.remove_prefix(1);
  int64_t label = 0;
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), label);
  if (text.empty() || ec != std::errc() || end != text.data() + text.size()) {
    throw Error(ErrorKind::kRead, "malformed cls member: expected an integer, got '" + printable(text) + "'",
                shown + ":" + member.name);
  }
  return label;
}

// Walks the headers of `file` (a RegularFile or a RemoteShardReader): its
// regular files, in order, with the text of each `cls` member.
template <class File>
std::vector<TarMember> walk_members(const std::string& path, const File& file) {
  const std::string shown = shown_path(path);  // What errors name.
  const uint64_t size = file.size();
  if (size == 0) throw Error(ErrorKind::kRead, "empty file, not a tar archive", shown);
  std::vector<TarMember> members;
  std::optional<std::string> long_name;
  PaxRecords pax;
  std::string last_member;  // Names the place of a corrupt header in errors.
  auto where = [&](uint64_t offset) {
    return "at offset " + std::to_string(offset) +
           (last_member.empty() ? std::string(" (first header)") : " (after member '" + last_member + "')");
  };
  uint64_t pos = 0;
  bool ended = false;
  uint8_t h[kBlock];
  while (pos + kBlock <= size) {
    file.read_exact(pos, h, shown);
    if (all_zero(h, kBlock)) {
      ended = true;  // End-of-archive marker; anything after it is ignored, as tar does.
      break;
    }
    if (!checksum_ok(h)) {
      throw Error(ErrorKind::kRead, "corrupt tar header " + where(pos) + ": checksum mismatch", shown);
    }
    const char type = static_cast<char>(h[156]);
    std::optional<uint64_t> member_size = pax.size ? pax.size : header_number(h + 124, 12);
    std::string name;
    if (long_name) {
      name = *long_name;
    } else if (pax.path) {
      name = *pax.path;
    } else {
      name = std::string(header_string(h, 100));
      // POSIX ustar splits long names into prefix/name; GNU's magic ("ustar  ")
      // uses those bytes for other things.
      if (std::memcmp(h + 257, "ustar\0", 6) == 0) {
        std::string_view prefix = header_string(h + 345, 155);
        if (!prefix.empty()) name = std::string(prefix) + "/" + name;
      }
    }
    if (!member_size) {
      throw Error(ErrorKind::kRead, "corrupt tar header " + where(pos) + ": invalid size field", shown + ":" + name);
    }
    const uint64_t data_offset = pos + kBlock;
    if (*member_size > size - data_offset) {
      throw Error(ErrorKind::kRead,
                  "truncated shard: the member needs " + std::to_string(*member_size) + " bytes at offset " +
                      std::to_string(data_offset) + " but the file has " + std::to_string(size) + " bytes",
                  shown + ":" + name);
    }
    const uint64_t next = data_offset + (*member_size + kBlock - 1) / kBlock * kBlock;
    pos = next;
    // The content of a GNU long name or pax header (of the next member).
    auto metadata = [&] {
      if (*member_size > kMaxMetadataMember) {
        throw Error(ErrorKind::kRead,
                    "corrupt tar header " + where(data_offset - kBlock) + ": a " + std::to_string(*member_size) +
                        "-byte " + (type == 'L' ? "long name" : "pax header"),
                    shown);
      }
      const std::vector<uint8_t> bytes = file.read_exact(data_offset, *member_size, shown);
      return std::string(bytes.begin(), bytes.end());
    };
    if (type == 'L') {  // GNU long name of the next member.
      const std::string content = metadata();
      long_name = content.substr(0, strnlen(content.data(), content.size()));
      continue;
    }
    if (type == 'x') {  // Pax extended header of the next member.
      auto records = parse_pax(metadata());
      if (!records) throw Error(ErrorKind::kRead, "corrupt pax header " + where(data_offset - kBlock), shown);
      pax = std::move(*records);
      continue;
    }
    if (type == 'K' || type == 'g') continue;  // Long link name, pax global header: nothing we use.
    long_name.reset();
    pax = PaxRecords{};
    last_member = name;
    if (type != '0' && type != '\0' && type != '7') continue;  // Directories, links, devices.
    TarMember member{name, data_offset, *member_size, std::nullopt};
    if (is_cls_member(name)) {
      if (*member_size > kMaxMetadataMember) {
        throw Error(ErrorKind::kRead,
                    "malformed cls member: expected an integer, got " + std::to_string(*member_size) + " bytes",
                    shown + ":" + name);
      }
      const std::vector<uint8_t> bytes = file.read_exact(data_offset, *member_size, shown + ":" + name);
      member.text.emplace(bytes.begin(), bytes.end());
    }
    members.push_back(std::move(member));
  }
  if (!ended && pos < size) {
    const std::vector<uint8_t> rest = file.read_exact(pos, size - pos, shown);  // Less than a block.
    if (!all_zero(rest.data(), rest.size())) {
      throw Error(ErrorKind::kRead, "truncated shard: it ends inside a tar header " + where(pos), shown);
    }
  }
  return members;
}

// What a shard index holds: "format" and "version" say what it is (a
// version this code does not know is refused, not guessed at).
constexpr std::string_view kShardIndexFormat = "conveyor tar index";
constexpr int kShardIndexVersion = 1;
// The largest shard index read (~40 bytes a member: a million members).
constexpr int64_t kMaxShardIndexBytes = int64_t{64} << 20;
// Shard indexes are parsed one at a time: a hostile one of kMaxShardIndexBytes
// ("[[],[],...]") takes ~20x its size as a JSON tree, and the 16 indexing
// threads share two cores or so anyway.
std::mutex shard_index_parsing;

// The members the shard index `text` lists, checked against a shard of
// `shard_size` bytes; none when it describes a shard of another size (one
// rewritten since it was indexed: walked instead). Throws Error{kRead}
// naming `key` (the index's URL) when it is not such an index.
std::optional<std::vector<TarMember>> parse_shard_index(const std::string& key, std::string_view text,
                                                        uint64_t shard_size) {
  auto malformed = [&](const std::string& why) {
    return Error(ErrorKind::kRead, "malformed shard index: " + why, key);
  };
  const std::lock_guard parsing(shard_index_parsing);
  const nlohmann::json doc = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (doc.is_discarded()) throw malformed("not JSON");
  if (!doc.is_object() || !doc.contains("format") || doc["format"] != kShardIndexFormat) {
    throw malformed("no \"format\": \"" + std::string(kShardIndexFormat) + "\"");
  }
  if (!doc.contains("version") || doc["version"] != kShardIndexVersion) {
    // A number as it is; anything else by its type (dump() of a deep array
    // would recurse as deep).
    const nlohmann::json* version = doc.contains("version") ? &doc["version"] : nullptr;
    throw malformed("version " +
                    (version == nullptr             ? std::string("missing")
                     : version->is_number_integer() ? version->dump()
                                                    : std::string("of type ") + version->type_name()) +
                    "; this conveyor reads version " + std::to_string(kShardIndexVersion));
  }
  const auto unsigned_field = [&](const nlohmann::json& value, const std::string& what) {
    if (!value.is_number_unsigned()) throw malformed(what + " is not a whole number of bytes");
    return value.get<uint64_t>();
  };
  if (!doc.contains("shard_bytes")) throw malformed("no \"shard_bytes\"");
  if (unsigned_field(doc["shard_bytes"], "\"shard_bytes\"") != shard_size) return std::nullopt;
  if (!doc.contains("members") || !doc["members"].is_array()) throw malformed("no \"members\" list");
  std::vector<TarMember> members;
  members.reserve(doc["members"].size());
  uint64_t end = 0;  // Of the previous member's data.
  for (const nlohmann::json& entry : doc["members"]) {
    const std::string where = "member " + std::to_string(members.size());
    if (!entry.is_array() || entry.size() < 3 || entry.size() > 4 || !entry[0].is_string()) {
      throw malformed(where + " is not [name, offset, size] or [name, offset, size, label text]");
    }
    TarMember member{entry[0].get<std::string>(), unsigned_field(entry[1], where + "'s offset"),
                     unsigned_field(entry[2], where + "'s size"), std::nullopt};
    const std::string named = where + " ('" + printable(member.name) + "')";
    // Each member's data starts a block, after its header block, after the
    // previous member's data.
    if (member.offset % kBlock != 0) {
      throw malformed(named + " at offset " + std::to_string(member.offset) + ": not at a 512-byte block");
    }
    if (member.offset < end + kBlock || member.offset > shard_size || member.size > shard_size - member.offset) {
      throw malformed(named + " at offset " + std::to_string(member.offset) + " of " + std::to_string(member.size) +
                      " bytes does not fit a " + std::to_string(shard_size) + "-byte shard after the member before it");
    }
    end = member.offset + member.size;
    if (is_cls_member(member.name) != (entry.size() == 4)) {
      throw malformed(named + ": a cls member, and only one, has its label text");
    }
    if (entry.size() == 4) {
      // As walking the shard reads it: the member's bytes, bounded.
      if (!entry[3].is_string() || entry[3].get_ref<const std::string&>().size() != member.size ||
          member.size > kMaxMetadataMember) {
        throw malformed(named + "'s label text is not a string of its " + std::to_string(member.size) + " bytes");
      }
      member.text = entry[3].get<std::string>();
    }
    members.push_back(std::move(member));
  }
  return members;
}

// The members the index of the remote shard `path` (path + kShardIndexSuffix)
// lists, for a shard of `size` bytes; none when there is none (the store
// says it is not there, or forbidden: S3's answer for a missing key to a
// caller that may not list the bucket) or it describes another size. An
// http(s) URL with a query or fragment has no index: the suffix would land
// in the query, and a presigned URL's signature covers only the shard.
std::optional<std::vector<TarMember>> read_shard_index(const RemoteAccess& remote, const std::string& path,
                                                       uint64_t size) {
  if ((path.starts_with("http://") || path.starts_with("https://")) && path.find_first_of("?#") != std::string::npos) {
    return std::nullopt;
  }
  const std::string url = path + std::string(kShardIndexSuffix);
  const std::optional<Bytes> bytes = remote.read_if_present(url, kMaxShardIndexBytes, shown_path(url));
  if (!bytes) return std::nullopt;
  return parse_shard_index(shown_path(url), {reinterpret_cast<const char*>(bytes->data()), bytes->size()}, size);
}

}  // namespace

struct TarShardSource::Index {
  struct Shard {
    std::string path;
    std::string shown;               // `path` as keys and errors show it (shown_path).
    RegularFile::Identity identity;  // When indexed: reads check the file is still this one.
    bool remote = false;             // Read through `remote` (a URL), by range requests.
  };
  struct Field {
    uint32_t name;  // Into field_names.
    uint64_t offset;
    uint64_t size;
  };
  struct Sample {
    uint32_t shard;
    uint32_t first_field;  // Into fields.
    uint32_t num_fields;
    uint32_t image;  // Into fields.
    int64_t label;
    std::string member;  // The image member's name.
  };

  std::shared_ptr<const RemoteAccess> remote;  // For shards that are URLs; null without any.
  std::vector<Shard> shards;
  std::vector<std::string> field_names;
  std::unordered_map<std::string, uint32_t> field_ids;  // field_names' positions: interning stays linear.
  std::vector<Field> fields;
  std::vector<Sample> samples;
  int64_t max_label = -1;  // Over samples; -1 when none has a cls.

  uint32_t intern(const std::string& name) {
    const auto [it, added] = field_ids.try_emplace(name, static_cast<uint32_t>(field_names.size()));
    if (added) field_names.push_back(name);
    return it->second;
  }

  const Sample& sample(int64_t index) const {
    if (index < 0 || index >= static_cast<int64_t>(samples.size())) {
      throw Error(ErrorKind::kConfig, "sample index " + std::to_string(index) + " is out of range [0, " +
                                          std::to_string(samples.size()) + ")");
    }
    return samples[static_cast<size_t>(index)];
  }

  // Opens the shard and reads the field with pread: a shard truncated since
  // indexing gives Error{kRead} naming `key`, where touching a mapping gave
  // SIGBUS. No descriptor is held between reads (an open costs microseconds
  // next to a decode), so any number of shards stays within the process's
  // descriptor limit. Since the path is reopened, the file read may not be
  // the one indexed (renamed over, or rewritten in place): the offsets would
  // then point at other bytes, so a shard whose identity changed is an
  // Error{kRead} too. The read comes first, so a cut member keeps its more
  // precise truncation message.
  //
  // A remote shard's member is one range request (with remote's retries);
  // remote objects are taken as immutable (object stores version them), so
  // no identity is compared.
  Bytes read(const Sample& s, const Field& f, const std::string& key) const {
    const Shard& shard = shards[s.shard];
    if (shard.remote) return remote->read(shard.path, f.offset, static_cast<int64_t>(f.size), key);
    std::optional<RegularFile> file;
    try {
      file.emplace(shard.path);
    } catch (const Error& e) {
      throw Error(e.kind(), e.cause(), key);  // Name the member, not only the shard.
    }
    Bytes bytes = Bytes::from_vector(file->read_exact(f.offset, f.size, key));
    if (file->identity() != shard.identity) {
      throw Error(ErrorKind::kRead,
                  "the shard changed since it was indexed (" + describe_change(shard.identity, file->identity()) +
                      "); recreate the TarShards source",
                  key);
    }
    return bytes;
  }

  // Indexes `paths` in order, the remote ones several at a time
  // (kShardIndexThreads); the error is the first failing shard's, as one after
  // another would give.
  void add_shards(const std::vector<std::string>& paths, const std::vector<std::optional<Listed>>& listed);
  // `listed`: what a listing said of a remote shard (its size, whether it has an index).
  void add_shard(const std::string& path, const std::optional<Listed>& listed);
  // Appends `part`, an index of other shards, after the shards indexed so far.
  void append(Index&& part);
  // Adds `shard`, and its `members` (in tar order) as samples.
  void add_samples(Shard shard, const std::vector<TarMember>& members);
};

namespace {

// A group of consecutive members sharing a prefix, before it becomes a sample.
struct Group {
  std::string prefix;
  std::vector<std::pair<std::string, const TarMember*>> members;  // (field, member)
  std::unordered_set<std::string> fields;  // Of members, once there are kFieldsScanned: duplicates found at once.
};

// Fields of a sample looked through for a duplicate one by one (a sample has
// 2-3 usually); past this many, in a set (a hostile shard's sample of
// 100 000 fields would take minutes one by one).
constexpr size_t kFieldsScanned = 16;

}  // namespace

void TarShardSource::Index::add_shards(const std::vector<std::string>& paths,
                                       const std::vector<std::optional<Listed>>& listed) {
  auto listing = [&](size_t i) { return listed.empty() ? std::optional<Listed>{} : listed[i]; };
  const bool any_remote = remote != nullptr &&
                          std::any_of(paths.begin(), paths.end(), [](const std::string& path) { return is_url(path); });
  const size_t workers = any_remote ? std::min(paths.size(), kShardIndexThreads) : 1;
  if (workers <= 1) {
    for (size_t i = 0; i < paths.size(); ++i) add_shard(paths[i], listing(i));
    return;
  }
  std::vector<std::optional<Index>> parts(paths.size());
  std::vector<std::exception_ptr> errors(paths.size());
  std::atomic<size_t> next{0};
  std::atomic<size_t> first_failed{paths.size()};
  auto work = [&] {
    // Shards past a failed one are not needed: its error is the one raised.
    for (size_t i = next++; i < paths.size() && i < first_failed.load(); i = next++) {
      try {
        parts[i].emplace();
        parts[i]->remote = remote;
        parts[i]->add_shard(paths[i], listing(i));
      } catch (...) {
        errors[i] = std::current_exception();
        size_t failed = first_failed.load();
        while (i < failed && !first_failed.compare_exchange_weak(failed, i)) {
        }
      }
    }
  };
  std::vector<std::thread> threads;
  threads.reserve(workers - 1);
  // The caller's cancellation (a loader's stop, Ctrl-C while a source is
  // built) ends these threads' requests too.
  const Cancellation* cancellation = current_cancellation();
  for (size_t t = 1; t < workers; ++t) {
    try {
      threads.emplace_back([&work, cancellation] {
        set_current_thread_name("conveyor-index");
        std::optional<ScopedCancellation> scope;
        if (cancellation != nullptr) scope.emplace(*cancellation);
        work();
      });
    } catch (...) {
      break;  // No thread (the OS refused one, or memory): the ones started, and this one, index the rest.
    }
  }
  work();
  for (std::thread& thread : threads) thread.join();
  for (size_t i = 0; i < paths.size(); ++i) {
    if (errors[i]) std::rethrow_exception(errors[i]);
    append(std::move(*parts[i]));
  }
}

void TarShardSource::Index::append(Index&& part) {
  const auto shard_base = static_cast<uint32_t>(shards.size());
  const auto field_base = static_cast<uint32_t>(fields.size());
  for (Shard& shard : part.shards) shards.push_back(std::move(shard));
  for (const Field& field : part.fields)
    fields.push_back({intern(part.field_names[field.name]), field.offset, field.size});
  for (Sample& sample : part.samples) {
    sample.shard += shard_base;
    sample.first_field += field_base;
    sample.image += field_base;
    samples.push_back(std::move(sample));
  }
}

void TarShardSource::Index::add_shard(const std::string& path, const std::optional<Listed>& listed) {
  if (remote != nullptr && is_url(path)) {
    // A cache that keeps whole objects learns each one's size from its own
    // check (it bounds the bytes it fetches at once by it): it is asked.
    const uint64_t size =
        listed && !remote->store->keeps_whole_objects() ? listed->size : remote->size(path, shown_path(path));
    std::optional<std::vector<TarMember>> members;
    if (!listed || listed->has_index) members = read_shard_index(*remote, path, size);
    if (members) {
      try {
        add_samples(Shard{path, shown_path(path), {}, true}, *members);
      } catch (const Error& e) {
        // The members are the index's word, not the shard's.
        throw Error(e.kind(), e.cause() + " (as " + shown_path(path) + std::string(kShardIndexSuffix) + " lists it)",
                    e.key());
      }
      return;
    }
    const RemoteShardReader reader(*remote, path, size);
    add_samples(Shard{path, shown_path(path), {}, true}, walk_members(path, reader));
  } else {
    const RegularFile file(path);
    add_samples(Shard{path, path, file.identity(), false}, walk_members(path, file));
  }
}

void TarShardSource::Index::add_samples(Shard shard, const std::vector<TarMember>& members) {
  const auto shard_id = static_cast<uint32_t>(shards.size());
  shards.push_back(std::move(shard));

  Group group;
  auto flush = [&] {
    if (group.members.empty()) return;
    Sample sample{
        shard_id, static_cast<uint32_t>(fields.size()), static_cast<uint32_t>(group.members.size()), UINT32_MAX, -1,
        {}};
    // An exact field name first ("jpg"), else a field whose last extension is
    // one ("left.jpg"), in member order.
    std::optional<size_t> image;
    for (std::string_view wanted : kImageExtensions) {
      for (size_t i = 0; i < group.members.size() && !image; ++i) {
        if (group.members[i].first == wanted) image = i;
      }
    }
    for (size_t i = 0; i < group.members.size() && !image; ++i) {
      const std::string& field = group.members[i].first;
      const size_t dot = field.rfind('.');
      if (dot == std::string::npos) continue;
      const std::string_view last = std::string_view(field).substr(dot + 1);
      if (is_image_extension(last)) image = i;
    }
    if (!image) {
      std::string names;
      for (const auto& [field, member] : group.members) names += (names.empty() ? "" : ", ") + member->name;
      std::string formats;
      for (size_t i = 0; i < kImageExtensions.size(); ++i) {
        formats.append(i == 0 ? "" : i + 1 == kImageExtensions.size() ? " or " : ", ").append(kImageExtensions[i]);
      }
      throw Error(ErrorKind::kRead, "sample has no image member (" + formats + "); its members: " + names,
                  shards[shard_id].shown + ":" + group.prefix);
    }
    for (const auto& [field, member] : group.members) {
      if (field == "cls") sample.label = parse_label(shards[shard_id].shown, *member);
      fields.push_back({intern(field), member->offset, member->size});
    }
    sample.image = sample.first_field + static_cast<uint32_t>(*image);
    sample.member = group.members[*image].second->name;
    samples.push_back(std::move(sample));
    group = Group{};
  };

  for (const TarMember& member : members) {
    std::string_view prefix;
    std::string field;
    if (!split_member_name(member.name, prefix, field)) continue;
    if (prefix != group.prefix) flush();
    if (group.members.empty()) group.prefix = std::string(prefix);
    bool duplicate;
    if (group.members.size() < kFieldsScanned) {
      duplicate = std::any_of(group.members.begin(), group.members.end(),
                              [&](const auto& existing) { return existing.first == field; });
    } else {
      if (group.fields.empty()) {
        for (const auto& existing : group.members) group.fields.insert(existing.first);
      }
      duplicate = !group.fields.insert(field).second;
    }
    if (duplicate) {
      throw Error(ErrorKind::kRead, "duplicate field '" + field + "' in sample '" + group.prefix + "'",
                  shards[shard_id].shown + ":" + member.name);
    }
    group.members.emplace_back(field, &member);
  }
  flush();
}

namespace {

// A run of a read plan: the consecutive samples [first_sample, first_sample
// + served.size()) of one shard, read in one range request [offset, offset +
// size).
struct ShardRun {
  uint32_t shard = 0;
  uint64_t offset = 0;
  uint64_t size = 0;
  int64_t first_sample = 0;
  // Under RunPlan::mutex:
  enum class State { kUnread, kReading, kRead, kFailed } state = State::kUnread;
  std::vector<char> served;  // By sample of the run: read from `bytes` already.
  int64_t reads_left = 0;    // Its samples the plan reads from it and not yet served; its bytes go at 0.
  Bytes bytes;
};

struct RunPlan final : ReadPlan {
  std::vector<ShardRun> runs;
  std::vector<int32_t> run_of;  // By sample index: its run in `runs`, or -1 (read alone).
  std::mutex mutex;
  std::condition_variable read_done;  // A run left kReading.
};

// What a window of `hold` positions gives: which runs the order reads enough
// of within it, and the most bytes of them held at once.
struct RunChoice {
  std::vector<char> kept;      // By run.
  std::vector<int64_t> reads;  // By run: its samples read from it.
  std::vector<char> alone;     // By sample: read alone (an occurrence past its run's window).
  uint64_t peak_bytes = 0;
};

RunChoice choose_runs(const std::vector<ShardRun>& runs, const std::vector<int32_t>& run_of,
                      const std::vector<uint64_t>& image_bytes, std::span<const int64_t> order, int64_t hold) {
  const size_t count = runs.size();
  RunChoice choice{std::vector<char>(count), std::vector<int64_t>(count), std::vector<char>(run_of.size()), 0};
  std::vector<int64_t> first(count, -1);
  for (size_t p = 0; p < order.size(); ++p) {
    const int32_t r = run_of[static_cast<size_t>(order[p])];
    if (r < 0) continue;
    int64_t& start = first[static_cast<size_t>(r)];
    if (start < 0) start = static_cast<int64_t>(p);
    // Every occurrence of a sample is served by its run, or none.
    if (static_cast<int64_t>(p) - start > hold) choice.alone[static_cast<size_t>(order[p])] = 1;
  }
  std::vector<int64_t> served_from(count, -1);
  std::vector<int64_t> served_to(count, -1);
  std::vector<uint64_t> served_bytes(count);
  std::vector<char> counted(run_of.size());  // A sample the order repeats counts once.
  for (size_t p = 0; p < order.size(); ++p) {
    const auto sample = static_cast<size_t>(order[p]);
    const int32_t r = run_of[sample];
    if (r < 0 || choice.alone[sample]) continue;
    const auto run = static_cast<size_t>(r);
    if (served_from[run] < 0) served_from[run] = static_cast<int64_t>(p);
    served_to[run] = static_cast<int64_t>(p);
    if (counted[sample]) continue;
    counted[sample] = 1;
    served_bytes[run] += image_bytes[sample];
    ++choice.reads[run];
  }
  // Bytes held from a run's first read to its last, by position.
  std::vector<int64_t> change(order.size() + 1);
  for (size_t r = 0; r < count; ++r) {
    // One request for at most twice the bytes the samples need, plus what
    // their own requests would have cost.
    choice.kept[r] = choice.reads[r] >= 2 &&
                     runs[r].size <= 2 * served_bytes[r] + static_cast<uint64_t>(choice.reads[r]) * kRequestBytes;
    if (!choice.kept[r]) continue;
    change[static_cast<size_t>(served_from[r])] += static_cast<int64_t>(runs[r].size);
    change[static_cast<size_t>(served_to[r]) + 1] -= static_cast<int64_t>(runs[r].size);
  }
  int64_t held = 0;
  for (const int64_t delta : change) {
    held += delta;
    choice.peak_bytes = std::max(choice.peak_bytes, static_cast<uint64_t>(held));
  }
  return choice;
}

}  // namespace

std::shared_ptr<ReadPlan> TarShardSource::plan_reads(std::span<const int64_t> order) const {
  const Index& index = *index_;
  // A store that keeps whole objects (a cache folder) fetches a shard whole
  // at its first read anyway: runs would only add requests.
  if (index.remote == nullptr || order.empty() || index.remote->store->keeps_whole_objects()) return nullptr;
  const auto samples = static_cast<int64_t>(index.samples.size());
  if (samples > std::numeric_limits<int32_t>::max() ||
      std::any_of(order.begin(), order.end(), [&](int64_t i) { return i < 0 || i >= samples; })) {
    return nullptr;  // Not an order of this source: each read() says what is wrong.
  }
  auto plan = std::make_shared<RunPlan>();
  plan->run_of.assign(index.samples.size(), -1);
  std::vector<uint64_t> image_bytes(index.samples.size());
  for (size_t i = 0; i < index.samples.size(); ++i) {
    const Index::Sample& sample = index.samples[i];
    const Index::Field& image = index.fields[sample.image];
    image_bytes[i] = image.size;
    if (!index.shards[sample.shard].remote) continue;
    const uint64_t end = image.offset + image.size;
    ShardRun* run = plan->runs.empty() ? nullptr : &plan->runs.back();
    if (run == nullptr || run->shard != sample.shard || image.offset < run->offset || end - run->offset > kRunBytes) {
      plan->runs.push_back(ShardRun{sample.shard, image.offset, 0, static_cast<int64_t>(i)});
      run = &plan->runs.back();
    }
    run->size = end - run->offset;
    run->served.push_back(0);
    plan->run_of[i] = static_cast<int32_t>(plan->runs.size() - 1);
  }
  if (plan->runs.empty()) return nullptr;
  auto hold = static_cast<int64_t>(order.size());
  RunChoice choice = choose_runs(plan->runs, plan->run_of, image_bytes, order, hold);
  while (choice.peak_bytes > kPlanBytes) {
    hold /= 2;  // At 0 no run serves two reads: none is kept.
    choice = choose_runs(plan->runs, plan->run_of, image_bytes, order, hold);
  }
  bool any = false;
  for (size_t i = 0; i < plan->run_of.size(); ++i) {
    int32_t& r = plan->run_of[i];
    if (r >= 0 && (choice.alone[i] || !choice.kept[static_cast<size_t>(r)])) r = -1;
  }
  for (size_t r = 0; r < plan->runs.size(); ++r) {
    plan->runs[r].reads_left = choice.reads[r];
    any = any || choice.kept[r];
  }
  return any ? plan : nullptr;
}

Record TarShardSource::read_planned(int64_t index, ReadPlan& plan) const {
  auto* runs = dynamic_cast<RunPlan*>(&plan);
  const Index::Sample& sample = index_->sample(index);
  // Not this source's plan (another source's, or none): each read alone.
  const int32_t r = runs == nullptr || static_cast<size_t>(index) >= runs->run_of.size()
                        ? -1
                        : runs->run_of[static_cast<size_t>(index)];
  if (r < 0) return read(index);
  ShardRun& run = runs->runs[static_cast<size_t>(r)];
  Bytes bytes;
  {
    std::unique_lock lock(runs->mutex);
    runs->read_done.wait(lock, [&] { return run.state != ShardRun::State::kReading; });
    if (run.state == ShardRun::State::kUnread) {
      run.state = ShardRun::State::kReading;
      lock.unlock();
      std::optional<Bytes> read;
      std::optional<std::string> cancelled;
      try {
        const std::string& url = index_->shards[run.shard].path;
        read = index_->remote->read(url, run.offset, static_cast<int64_t>(run.size), index_->shards[run.shard].shown);
      } catch (const Error& e) {
        // A stopping loader's: this read ends. Any other failure: each sample
        // is then read alone, its error naming it, with its own retries.
        if (e.kind() == ErrorKind::kCancelled) cancelled = e.cause();
      } catch (...) {
      }
      lock.lock();
      run.state = read ? ShardRun::State::kRead : ShardRun::State::kFailed;
      if (read) run.bytes = std::move(*read);
      runs->read_done.notify_all();
      if (cancelled) throw Error(ErrorKind::kCancelled, *cancelled, key(index));
    }
    if (run.state == ShardRun::State::kRead) {
      bytes = run.bytes;
      // A sample read again (a skip re-issues the positions after it, or the
      // order repeats it) is served while the run is held, and counts once.
      char& served = run.served[static_cast<size_t>(index - run.first_sample)];
      if (!served) {
        served = 1;
        if (--run.reads_left == 0) run.bytes = Bytes();
      }
    }
  }
  if (bytes.empty()) return read(index);
  const Index::Field& image = index_->fields[sample.image];
  return Record{bytes.slice(static_cast<size_t>(image.offset - run.offset), static_cast<size_t>(image.size)),
                sample.label, key(index)};
}

bool TarShardSource::local_reads() const {
  return std::none_of(index_->shards.begin(), index_->shards.end(), [](const Index::Shard& s) { return s.remote; });
}

bool TarShardSource::read_is_at_hand(int64_t index, ReadPlan* plan) const {
  const Index::Shard& shard = index_->shards[index_->sample(index).shard];
  if (!shard.remote) return false;
  if (index_->remote->store->serves_locally(shard.path)) return true;
  auto* runs = dynamic_cast<RunPlan*>(plan);
  if (runs == nullptr || static_cast<size_t>(index) >= runs->run_of.size()) return false;
  const int32_t r = runs->run_of[static_cast<size_t>(index)];
  if (r < 0) return false;
  const ShardRun& run = runs->runs[static_cast<size_t>(r)];
  const std::lock_guard lock(runs->mutex);
  // A sample served already (read again after a skip) does not hold the
  // run's bytes: the other samples' reads may release them before its own.
  return run.state == ShardRun::State::kRead && !run.bytes.empty() &&
         !run.served[static_cast<size_t>(index - run.first_sample)];
}

TarShardSource::TarShardSource(std::vector<std::string> shards, std::shared_ptr<const RemoteAccess> remote,
                               std::vector<std::optional<Listed>> listed) {
  check_config(!shards.empty(), "TarShards: no shards given");
  if (!listed.empty() && listed.size() != shards.size()) {
    throw Error(ErrorKind::kConfig, "TarShards: listed has " + std::to_string(listed.size()) + " entries for " +
                                        std::to_string(shards.size()) + " shard(s)");
  }
  if (remote != nullptr) {
    check_config(remote->store != nullptr, "TarShards: remote access without a store");
    remote->retry.validate();
  }
  for (size_t i = 0; i < shards.size(); ++i) check_path(shards[i], "TarShards: shards[" + std::to_string(i) + "]");
  auto index = std::make_unique<Index>();
  index->remote = std::move(remote);
  index->add_shards(shards, listed);
  check_config(!index->samples.empty(),
               "TarShards: the shards hold no samples (" + shards.front() + (shards.size() > 1 ? ", ..." : "") + ")");
  for (const Index::Sample& sample : index->samples) index->max_label = std::max(index->max_label, sample.label);
  index_ = std::move(index);
}

std::optional<int64_t> TarShardSource::max_label() const { return index_->max_label; }

TarShardSource::~TarShardSource() = default;

int64_t TarShardSource::size() const { return static_cast<int64_t>(index_->samples.size()); }

Record TarShardSource::read(int64_t index) const {
  const auto& s = index_->sample(index);
  std::string key = index_->shards[s.shard].shown + ":" + s.member;
  Bytes bytes = index_->read(s, index_->fields[s.image], key);
  return Record{std::move(bytes), s.label, std::move(key)};
}

std::string TarShardSource::key(int64_t index) const {
  const auto& s = index_->sample(index);
  return index_->shards[s.shard].shown + ":" + s.member;
}

std::vector<std::string> TarShardSource::fields(int64_t index) const {
  const auto& s = index_->sample(index);
  std::vector<std::string> names;
  for (uint32_t i = 0; i < s.num_fields; ++i)
    names.push_back(index_->field_names[index_->fields[s.first_field + i].name]);
  return names;
}

Bytes TarShardSource::field(int64_t index, const std::string& name) const {
  const auto& s = index_->sample(index);
  for (uint32_t i = 0; i < s.num_fields; ++i) {
    const auto& f = index_->fields[s.first_field + i];
    if (index_->field_names[f.name] == name) return index_->read(s, f, key(index));
  }
  throw Error(ErrorKind::kRead, "the sample has no field '" + name + "'", key(index));
}

std::vector<std::string> TarShardSource::shards() const {
  std::vector<std::string> paths;
  for (const auto& shard : index_->shards) paths.push_back(shard.path);
  return paths;
}

std::vector<int64_t> TarShardSource::shard_starts() const {
  std::vector<int64_t> starts;
  for (size_t i = 0; i < index_->samples.size(); ++i) {
    if (i == 0 || index_->samples[i].shard != index_->samples[i - 1].shard) starts.push_back(static_cast<int64_t>(i));
  }
  return starts;
}

std::string TarShardSource::shard_index(const std::string& path) {
  const RegularFile file(path);
  const std::vector<TarMember> members = walk_members(path, file);
  // What TarShardSource would refuse, the index is not written for.
  Index check;
  check.add_samples({path, path, file.identity(), false}, members);
  nlohmann::json listed = nlohmann::json::array();
  for (const TarMember& member : members) {
    nlohmann::json entry = {member.name, member.offset, member.size};
    if (member.text) entry.push_back(*member.text);
    listed.push_back(std::move(entry));
  }
  const nlohmann::json doc = {{"format", kShardIndexFormat},
                              {"version", kShardIndexVersion},
                              {"shard_bytes", file.size()},
                              {"members", std::move(listed)}};
  try {
    return doc.dump();
  } catch (const nlohmann::json::type_error&) {
    // JSON holds text: a name (or label) of bytes that are not UTF-8 cannot be listed.
    for (const TarMember& member : members) {
      try {
        nlohmann::json(member.name).dump();
      } catch (const nlohmann::json::type_error&) {
        throw Error(ErrorKind::kRead, "the member's name is not UTF-8, which a shard index cannot hold",
                    shown_path(path) + ":" + printable(member.name));
      }
    }
    throw Error(ErrorKind::kRead, "a label is not UTF-8, which a shard index cannot hold", shown_path(path));
  }
}

}  // namespace conveyor
