#include "conveyor/io/remote_cache.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cstring>
#include <filesystem>
#include <functional>
#include <string>
#include <thread>
#include <utility>

#include "conveyor/core/error.h"
#include "conveyor/io/regular_file.h"

namespace conveyor {

namespace {

constexpr std::string_view kMagic = "conveyor-cache 1\n";
// The most a header may take (the URL and version lines): longer ones are not cached.
constexpr size_t kMaxHeader = 64 << 10;
constexpr size_t kFirstHeaderRead = 1024;
// The most bytes of whole objects one store holds in memory while fetching them.
constexpr int64_t kMaxFetchingBytes = int64_t{2} << 30;
// Room left for a cached file's version and size lines when bounding the
// object it holds (insert() checks the exact size).
constexpr int64_t kHeaderAllowance = 128;
// A version no store gives: a copy that could not be checked is never served.
const std::string kUnknownVersion = std::string(1, '\0') + "unknown";
constexpr std::string_view kUsageFile = "usage";
constexpr std::string_view kFolderLock = "folder.lock";

// A descriptor closed on scope exit.
struct Fd {
  int fd = -1;
  explicit Fd(int value) : fd(value) {}
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  ~Fd() {
    if (fd >= 0) ::close(fd);
  }
};

std::string header_of(const std::string& url, const RemoteObjectInfo& info) {
  return std::string(kMagic) + url + "\n" + info.version + "\n" + std::to_string(info.size) + "\n";
}

bool write_all(int fd, const uint8_t* data, size_t size) {
  size_t done = 0;
  while (done < size) {
    const ssize_t put = ::write(fd, data + done, size - done);
    if (put < 0 && errno == EINTR) continue;
    if (put <= 0) return false;
    done += static_cast<size_t>(put);
  }
  return true;
}

// A cached file's header: the URL, version and size it holds, and where its
// data starts. nullopt when the file is not a whole cache file.
struct Header {
  std::string url;
  std::string version;
  uint64_t size = 0;
  uint64_t data_offset = 0;
};

// Throws Error{kRead} when the file cannot be read.
std::optional<Header> read_header(const RegularFile& file) {
  // A first small read holds every usual header; a longer one is read whole.
  std::string text(std::min<uint64_t>(kFirstHeaderRead, file.size()), '\0');
  auto read = [&] {
    text.resize(file.read_at_most(0, {reinterpret_cast<uint8_t*>(text.data()), text.size()}, file.path()));
  };
  read();
  if (std::count(text.begin(), text.end(), '\n') < 4 && text.size() < file.size()) {
    text.assign(std::min<uint64_t>(kMaxHeader, file.size()), '\0');
    read();
  }
  if (text.rfind(kMagic, 0) != 0) return std::nullopt;
  Header header;
  size_t at = kMagic.size();
  std::string* fields[] = {&header.url, &header.version};
  for (std::string* field : fields) {
    const size_t end = text.find('\n', at);
    if (end == std::string::npos) return std::nullopt;
    *field = text.substr(at, end - at);
    at = end + 1;
  }
  const size_t end = text.find('\n', at);
  if (end == std::string::npos || std::from_chars(text.data() + at, text.data() + end, header.size).ec != std::errc()) {
    return std::nullopt;
  }
  header.data_offset = end + 1;
  if (file.size() != header.data_offset + header.size) return std::nullopt;  // Torn.
  return header;
}

std::vector<uint8_t> slice(const std::vector<uint8_t>& data, uint64_t offset, int64_t size) {
  const size_t begin = std::min<size_t>(offset, data.size());
  const size_t end = size < 0 ? data.size() : std::min<size_t>(begin + static_cast<size_t>(size), data.size());
  return {data.begin() + static_cast<std::ptrdiff_t>(begin), data.begin() + static_cast<std::ptrdiff_t>(end)};
}

// Calls `visit` with each cached object (a ".obj" file) under `folder`,
// in its 256 subfolders or the folder itself (older versions). Best effort:
// a folder that vanishes mid-scan (another process evicting, a user
// cleaning up) or that cannot be opened (no file descriptor left) ends the
// scan, never the read that asked for it.
template <typename Visit>
void for_each_cached_object(const std::filesystem::path& folder, Visit visit) {
  std::error_code error;
  std::filesystem::recursive_directory_iterator item(folder, std::filesystem::directory_options::skip_permission_denied,
                                                     error);
  for (; !error && item != std::filesystem::recursive_directory_iterator(); item.increment(error)) {
    if (item->path().extension() == ".obj") visit(*item);
  }
}

}  // namespace

CachingStore::CachingStore(std::shared_ptr<const RemoteStore> store, std::string directory, int64_t budget_bytes)
    : store_(std::move(store)), directory_(std::move(directory)), budget_bytes_(budget_bytes) {
  while (directory_.size() > 1 && directory_.back() == '/') directory_.pop_back();
  check_config(budget_bytes_ >= 0,
               "cache budget must be >= 0 bytes (0: the default), got " + std::to_string(budget_bytes_));
  std::error_code error;
  std::filesystem::create_directories(directory_, error);
  if (error || !std::filesystem::is_directory(directory_)) {
    throw Error(ErrorKind::kConfig,
                "cannot use the cache folder: " + (error ? error.message() : std::string("not a directory")),
                directory_);
  }
  if (budget_bytes_ == 0) {
    // What is free now plus what the folder already holds: a later run (or
    // rank) must not see the cache's own files as space lost.
    const std::filesystem::space_info space = std::filesystem::space(directory_, error);
    const int64_t free_bytes = error ? int64_t{1} << 30 : static_cast<int64_t>(space.available);
    budget_bytes_ = std::max<int64_t>(1, (free_bytes + folder_bytes()) / 10 * 8);
  }
}

std::string CachingStore::file_name(const std::string& url) {
  // FNV-1a, 64 bits: a name, not a proof; the header names the URL.
  uint64_t hash = 0xcbf29ce484222325ULL;
  for (unsigned char c : url) hash = (hash ^ c) * 0x100000001b3ULL;
  char name[32];
  std::snprintf(name, sizeof name, "%02llx/%016llx.obj", static_cast<unsigned long long>(hash >> 56),
                static_cast<unsigned long long>(hash));
  return name;
}

std::string CachingStore::subfolder_of(const std::string& url) const {
  const std::string name = file_name(url);
  const std::string folder = directory_ + "/" + name.substr(0, name.find('/'));
  const auto index = std::stoul(name.substr(0, 2), nullptr, 16);
  if (!subfolders_made_[index].load(std::memory_order_acquire)) {
    // Made once per store (a race makes it twice: EEXIST is fine); a folder
    // that cannot be made fails the open in it, which reads through.
    ::mkdir(folder.c_str(), 0755);
    subfolders_made_[index].store(true, std::memory_order_release);
  }
  return folder;
}

bool CachingStore::read_cached(const std::string& url, uint64_t offset, int64_t size, std::vector<uint8_t>* out) const {
  // io/regular_file.h: positional reads of a regular file only (a FIFO put
  // there is refused, not waited on); any failure is a miss.
  std::unique_ptr<RegularFile> file;
  std::optional<Header> header;
  try {
    file = std::make_unique<RegularFile>(directory_ + "/" + file_name(url));
    header = read_header(*file);
  } catch (const Error&) {
    return false;
  }
  if (!header || header->url != url) return false;
  bool checked, touched = true;
  {
    std::lock_guard lock(mu_);
    auto it = validated_.find(url);
    checked = it != validated_.end();
    if (checked) {
      if (it->second.size != header->size || it->second.version != header->version) return false;
      touched = std::exchange(it->second.touched, true);
    }
  }
  if (!checked) {
    // The first use in this store's life: has the object changed since it was cached?
    RemoteObjectInfo now;
    try {
      now = store_->stat(url);
    } catch (const FetchError& e) {
      if (is_transient(e.failure())) throw;  // Retried by the caller.
      // The store cannot tell (a HEAD refused, e.g. by a URL presigned for
      // GET; no Content-Length): the copy is not trusted, the object is
      // fetched again, and that fetch's version is what counts.
      std::lock_guard lock(mu_);
      validated_[url] = {0, kUnknownVersion, false};
      return false;
    }
    validations_.fetch_add(1);
    const bool same = now.size == header->size && now.version == header->version;
    std::lock_guard lock(mu_);
    validated_[url] = {now.size, now.version, same};  // What the store has now, checked once.
    if (!same) return false;
    touched = false;
  }
  if (!touched) ::futimens(file->descriptor(), nullptr);  // Used now: last in line for eviction.
  const uint64_t begin = std::min(offset, header->size);
  const uint64_t length =
      size < 0 ? header->size - begin : std::min<uint64_t>(static_cast<uint64_t>(size), header->size - begin);
  out->resize(static_cast<size_t>(length));
  try {
    file->read_exact(header->data_offset + begin, *out, file->path());
  } catch (const Error&) {
    return false;  // Shrank since it was opened: fetched again.
  }
  hits_.fetch_add(1);
  set_on_disk(url, true);
  return true;
}

void CachingStore::set_on_disk(const std::string& url, bool on) const {
  std::lock_guard lock(mu_);
  if (on) {
    on_disk_[file_name(url)] = url;
  } else {
    on_disk_.erase(file_name(url));
  }
}

std::vector<uint8_t> CachingStore::read(const std::string& url, uint64_t offset, int64_t size) const {
  std::vector<uint8_t> data;
  if (read_cached(url, offset, size, &data)) return data;
  set_on_disk(url, false);  // Evicted, changed or never cached: read from the store from now on.
  {
    std::lock_guard lock(mu_);
    if (uncacheable_.count(url) != 0) {
      read_through_.fetch_add(1);
      return store_->read(url, offset, size);
    }
  }
  // One fetcher per object across threads and processes: the others read
  // their range from the store meanwhile instead of waiting for it.
  const std::string lock_path = subfolder_of(url) + "/" + file_name(url).substr(3) + ".lock";
  Fd lock(::open(lock_path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644));
  if (lock.fd >= 0 && ::flock(lock.fd, LOCK_EX | LOCK_NB) != 0 && errno == EWOULDBLOCK) {
    read_through_.fetch_add(1);
    return store_->read(url, offset, size);
  }
  // (Without a lock file, or where the file system has no locks, the object
  // is fetched unlocked: at worst twice at once, renamed into place twice.)
  if (read_cached(url, offset, size, &data)) return data;  // Fetched by another meanwhile.
  // Whole objects being fetched are held in memory until written: past
  // kMaxFetchingBytes of them at once (many io threads on large shards of
  // a data set larger than the budget), a read of known size goes through.
  uint64_t known_size = 0;
  {
    std::lock_guard guard(mu_);
    auto it = validated_.find(url);
    if (it != validated_.end() && it->second.version != kUnknownVersion) known_size = it->second.size;
  }
  const auto reserved = static_cast<int64_t>(known_size);
  if (fetching_bytes_.fetch_add(reserved) + reserved > kMaxFetchingBytes && reserved > 0) {
    fetching_bytes_.fetch_sub(reserved);
    read_through_.fetch_add(1);
    return store_->read(url, offset, size);
  }
  struct Release {
    std::atomic<int64_t>& bytes;
    int64_t amount;
    ~Release() { bytes.fetch_sub(amount); }
  } release{fetching_bytes_, reserved};
  std::vector<uint8_t> whole;
  RemoteObjectInfo info;
  try {
    // The header takes the URL, a version (an ETag: tens of bytes) and a size.
    const auto header_bytes = static_cast<int64_t>(kMagic.size() + url.size()) + kHeaderAllowance;
    info = store_->fetch(url, &whole, std::min(kMaxRemoteReadBytes, budget_bytes_ - header_bytes));
  } catch (const FetchError& e) {
    if (e.failure().kind != FetchFailure::Kind::kTooLarge) throw;
    // Larger than the cache may hold: read as asked, never fetched whole again.
    std::lock_guard guard(mu_);
    uncacheable_.insert(url);
    read_through_.fetch_add(1);
    return store_->read(url, offset, size);
  }
  misses_.fetch_add(1);
  insert(url, info, whole);
  return slice(whole, offset, size);
}

void CachingStore::insert(const std::string& url, const RemoteObjectInfo& info,
                          const std::vector<uint8_t>& data) const {
  const std::string header = header_of(url, info);
  if (url.find('\n') != std::string::npos || info.version.find('\n') != std::string::npos ||
      header.size() > kMaxHeader || static_cast<int64_t>(header.size() + data.size()) > budget_bytes_) {
    return;  // Not cacheable: read through.
  }
  const std::string path = directory_ + "/" + file_name(url);
  // In the object's own subfolder: the rename stays within one folder.
  const std::string temporary = subfolder_of(url) + "/.tmp-" + std::to_string(::getpid()) + "-" +
                                std::to_string(std::hash<std::thread::id>{}(std::this_thread::get_id())) + "-" +
                                file_name(url).substr(3) + ".part";
  bool written = false;
  {
    Fd file(::open(temporary.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644));
    if (file.fd < 0 && errno == ENOENT) {
      // Its subfolder was removed since this store made it (a user emptied the folder).
      ::mkdir(temporary.substr(0, temporary.rfind('/')).c_str(), 0755);
      file.fd = ::open(temporary.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    }
    written = file.fd >= 0 && write_all(file.fd, reinterpret_cast<const uint8_t*>(header.data()), header.size()) &&
              write_all(file.fd, data.data(), data.size()) && ::fsync(file.fd) == 0;
  }
  if (!written || ::rename(temporary.c_str(), path.c_str()) != 0) {
    ::unlink(temporary.c_str());
    write_errors_.fetch_add(1);
    return;
  }
  {
    std::lock_guard lock(mu_);
    validated_[url] = {info.size, info.version, true};
    on_disk_[file_name(url)] = url;
  }
  evict(path, static_cast<int64_t>(header.size() + data.size()));
}

void CachingStore::evict(const std::string& keep, int64_t added) const {
  // The folder's usage is kept in a file under a folder-wide lock, so that
  // every process sharing the folder counts every insertion; the folder is
  // only scanned when the count passes the budget (or is missing).
  const std::string lock_path = directory_ + "/" + std::string(kFolderLock);
  Fd lock(::open(lock_path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644));
  if (lock.fd < 0 || ::flock(lock.fd, LOCK_EX) != 0) return;
  const std::string usage_path = directory_ + "/" + std::string(kUsageFile);
  int64_t usage = -1;
  {
    Fd file(::open(usage_path.c_str(), O_RDONLY | O_CLOEXEC));
    char text[32] = {};
    if (file.fd >= 0 && ::read(file.fd, text, sizeof text - 1) > 0) {
      int64_t parsed = 0;
      if (std::from_chars(text, text + std::strlen(text), parsed).ec == std::errc()) usage = parsed;
    }
  }
  if (usage >= 0) usage += added;
  if (usage < 0 || usage > budget_bytes_) {
    struct Entry {
      std::string path;
      int64_t bytes;
      std::filesystem::file_time_type used;
    };
    std::vector<Entry> entries;
    usage = 0;
    for_each_cached_object(directory_, [&](const std::filesystem::directory_entry& item) {
      std::error_code item_error;
      const auto bytes = static_cast<int64_t>(item.file_size(item_error));
      const auto used = item.last_write_time(item_error);
      if (item_error) return;
      entries.push_back({item.path().string(), bytes, used});
      usage += bytes;
    });
    std::sort(entries.begin(), entries.end(), [](const Entry& a, const Entry& b) { return a.used < b.used; });
    // Down to a low-water mark, so that the next insertions do not each
    // scan the folder again.
    const int64_t target = budget_bytes_ / 10 * 9;
    for (const Entry& entry : entries) {
      if (usage <= target) break;
      if (entry.path == keep) continue;
      // Its lock file stays: a process may hold it (unlinking would let a
      // third one lock a new file and fetch the object at the same time).
      if (::unlink(entry.path.c_str()) == 0) {
        usage -= entry.bytes;
        evictions_.fetch_add(1);
        std::lock_guard guard(mu_);
        on_disk_.erase(entry.path.substr(directory_.size() + 1));  // file_name()'s form.
      }
    }
  }
  const std::string text = std::to_string(usage);
  const std::string temporary = usage_path + ".tmp-" + std::to_string(::getpid());
  {
    Fd file(::open(temporary.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644));
    if (file.fd < 0 || !write_all(file.fd, reinterpret_cast<const uint8_t*>(text.data()), text.size())) return;
  }
  ::rename(temporary.c_str(), usage_path.c_str());
}

int64_t CachingStore::folder_bytes() const {
  int64_t total = 0;
  for_each_cached_object(directory_, [&](const std::filesystem::directory_entry& item) {
    std::error_code item_error;
    const auto bytes = static_cast<int64_t>(item.file_size(item_error));
    if (!item_error) total += bytes;
  });
  return total;
}

uint64_t CachingStore::size(const std::string& url) const { return stat(url).size; }

RemoteObjectInfo CachingStore::stat(const std::string& url) const {
  {
    std::lock_guard lock(mu_);
    auto it = validated_.find(url);
    if (it != validated_.end()) return {it->second.size, it->second.version};
  }
  // What the store says now is what a cached copy is checked against.
  const RemoteObjectInfo info = store_->stat(url);
  std::lock_guard lock(mu_);
  validated_[url] = {info.size, info.version};
  return info;
}

std::vector<RemoteObject> CachingStore::list(const std::string& prefix) const { return store_->list(prefix); }

bool CachingStore::serves_locally(const std::string& url) const {
  const std::string name = file_name(url);
  std::lock_guard lock(mu_);
  const auto it = on_disk_.find(name);
  return it != on_disk_.end() && it->second == url;
}

RemoteCacheCounters CachingStore::counters() const {
  return {hits_.load(),        misses_.load(),    read_through_.load(),
          validations_.load(), evictions_.load(), write_errors_.load()};
}

}  // namespace conveyor
