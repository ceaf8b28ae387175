#include "conveyor/io/remote_cache.h"

#include <gtest/gtest.h>
#include <sys/stat.h>

#include <atomic>
#include <filesystem>
#include <fstream>
#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "conveyor/core/error.h"
#include "conveyor/io/testing/temp_dir.h"

namespace conveyor {
namespace {

std::string text(const std::vector<uint8_t>& bytes) { return {bytes.begin(), bytes.end()}; }

// "u3", ... (appended: gcc 12 at -O3 warns falsely on name("u", i)).
std::string name(const char* prefix, int i) {
  std::string out = prefix;
  out += std::to_string(i);
  return out;
}

// Objects in memory with a version each; counts every request by kind.
class VersionedStore final : public RemoteStore {
 public:
  void put(const std::string& url, std::string data, std::string version) {
    std::lock_guard lock(mu_);
    objects_[url] = {std::move(data), std::move(version)};
  }
  std::vector<uint8_t> read(const std::string& url, uint64_t offset, int64_t size) const override {
    count("read");
    const std::string data = object(url).first;
    const std::string part =
        data.substr(std::min<size_t>(offset, data.size()), size < 0 ? std::string::npos : static_cast<size_t>(size));
    return {part.begin(), part.end()};
  }
  uint64_t size(const std::string& url) const override { return stat(url).size; }
  RemoteObjectInfo stat(const std::string& url) const override {
    count("stat");
    if (refuse_stat) throw FetchError({FetchFailure::Kind::kStatus, 403, "Forbidden"});
    const auto [data, version] = object(url);
    return {data.size(), version};
  }
  RemoteObjectInfo fetch(const std::string& url, std::vector<uint8_t>* data, int64_t max_bytes) const override {
    count("fetch");
    const auto [bytes, version] = object(url);
    if (static_cast<int64_t>(bytes.size()) > max_bytes) throw FetchError({FetchFailure::Kind::kTooLarge, 0, "big"});
    data->assign(bytes.begin(), bytes.end());
    return {bytes.size(), version};
  }
  bool refuse_stat = false;  // As a URL presigned for GET refuses a HEAD.
  int requests(const std::string& kind) const {
    std::lock_guard lock(mu_);
    auto it = counts_.find(kind);
    return it == counts_.end() ? 0 : it->second;
  }

 private:
  void count(const std::string& kind) const {
    std::lock_guard lock(mu_);
    ++counts_[kind];
  }
  std::pair<std::string, std::string> object(const std::string& url) const {
    std::lock_guard lock(mu_);
    auto it = objects_.find(url);
    if (it == objects_.end()) throw FetchError({FetchFailure::Kind::kStatus, 404, "Not Found"});
    return it->second;
  }
  mutable std::mutex mu_;
  std::map<std::string, std::pair<std::string, std::string>> objects_;
  mutable std::map<std::string, int> counts_;
};

class CachingStoreTest : public detail::TempDirTest {
 protected:
  std::shared_ptr<VersionedStore> remote_ = std::make_shared<VersionedStore>();
  std::string folder() const { return (dir_ / "cache").string(); }
  int64_t folder_bytes() const {
    int64_t total = 0;
    for (const auto& item : std::filesystem::recursive_directory_iterator(folder())) {
      if (item.path().extension() == ".obj") total += static_cast<int64_t>(item.file_size());
    }
    return total;
  }
};

TEST_F(CachingStoreTest, AFirstReadFetchesTheObjectWholeAndLaterReadsSendNothing) {
  remote_->put("s3://b/shard.tar", "0123456789abcdef", "\"v1\"");
  CachingStore cache(remote_, folder(), 1 << 20);
  EXPECT_FALSE(cache.serves_locally("s3://b/shard.tar"));
  EXPECT_EQ(text(cache.read("s3://b/shard.tar", 4, 3)), "456");
  EXPECT_TRUE(cache.serves_locally("s3://b/shard.tar"));  // The loader reads it on a cpu thread now.
  EXPECT_EQ(text(cache.read("s3://b/shard.tar", 10, 6)), "abcdef");
  EXPECT_EQ(text(cache.read("s3://b/shard.tar", 0, -1)), "0123456789abcdef");
  EXPECT_EQ(remote_->requests("fetch"), 1);
  EXPECT_EQ(remote_->requests("read") + remote_->requests("stat"), 0);
  const RemoteCacheCounters counters = cache.counters();
  EXPECT_EQ(counters.misses, 1);
  EXPECT_EQ(counters.hits, 2);
  EXPECT_TRUE(std::filesystem::exists(folder() + "/" + CachingStore::file_name("s3://b/shard.tar")));
}

TEST_F(CachingStoreTest, ANewStoreChecksEachObjectOnceAndRefetchesAChangedOne) {
  remote_->put("https://h/a.jpg", "first", "\"1\"");
  CachingStore(remote_, folder(), 1 << 20).read("https://h/a.jpg", 0, -1);
  {
    CachingStore next_run(remote_, folder(), 1 << 20);
    EXPECT_FALSE(next_run.serves_locally("https://h/a.jpg"));  // Not checked yet: the check is a request.
    EXPECT_EQ(text(next_run.read("https://h/a.jpg", 0, -1)), "first");
    EXPECT_TRUE(next_run.serves_locally("https://h/a.jpg"));
    EXPECT_EQ(text(next_run.read("https://h/a.jpg", 0, -1)), "first");
    EXPECT_EQ(remote_->requests("stat"), 1);  // One check, then nothing.
    EXPECT_EQ(remote_->requests("fetch"), 1);
    EXPECT_EQ(next_run.counters().validations, 1);
  }
  remote_->put("https://h/a.jpg", "second!", "\"2\"");
  CachingStore after_change(remote_, folder(), 1 << 20);
  EXPECT_EQ(text(after_change.read("https://h/a.jpg", 0, -1)), "second!");
  EXPECT_EQ(remote_->requests("fetch"), 2);
  CachingStore again(remote_, folder(), 1 << 20);
  EXPECT_EQ(text(again.read("https://h/a.jpg", 0, -1)), "second!");
  EXPECT_EQ(remote_->requests("fetch"), 2);
}

TEST_F(CachingStoreTest, TheBudgetHoldsAndTheLeastRecentlyUsedGoFirst) {
  const std::string data(1000, 'x');
  for (int i = 0; i < 8; ++i) remote_->put(name("u", i), data, "v");
  const int64_t object_file = 1000 + 27;  // Its header: "conveyor-cache 1\nuN\nv\n1000\n".
  const int64_t budget = 3 * object_file + 500;
  {
    CachingStore cache(remote_, folder(), budget);
    for (int i = 0; i < 8; ++i) {
      cache.read(name("u", i), 0, -1);
      EXPECT_LE(folder_bytes(), budget) << "after object " << i;
    }
    EXPECT_EQ(cache.counters().evictions, 5);
    // What it evicted is read from the store again: not on a decoding thread.
    for (int i = 0; i < 8; ++i) EXPECT_EQ(cache.serves_locally(name("u", i)), i >= 5) << i;
  }
  // The last ones read are those kept.
  CachingStore next(remote_, folder(), budget);
  const int fetched = remote_->requests("fetch");
  next.read("u7", 0, -1);
  EXPECT_EQ(remote_->requests("fetch"), fetched);
  next.read("u0", 0, -1);
  EXPECT_EQ(remote_->requests("fetch"), fetched + 1);
}

TEST_F(CachingStoreTest, SubfoldersRemovedWhileTheBudgetIsHeldNeverFailARead) {
  // A user cleaning the folder up, or another process evicting: the scan of
  // the folder met a subfolder gone and threw out of the read.
  const std::string data(1000, 'x');
  for (int i = 0; i < 200; ++i) remote_->put(name("u", i), data, "v");
  CachingStore cache(remote_, folder(), 30000);  // Every few reads evict: a scan of ~30 subfolders.
  std::atomic<bool> done{false};
  std::thread cleaner([&] {
    for (int i = 0; !done.load(); ++i) {
      const std::filesystem::path made = dir_ / "cache" / name("zz", i % 50);
      std::error_code error;
      std::filesystem::create_directories(made / "a" / "b", error);
      std::filesystem::remove_all(made, error);
    }
  });
  try {
    for (int round = 0; round < 2; ++round) {
      for (int i = 0; i < 200; ++i) EXPECT_EQ(text(cache.read(name("u", i), 0, -1)), data) << round << " " << i;
    }
  } catch (const std::exception& e) {
    ADD_FAILURE() << e.what();
  }
  done = true;
  cleaner.join();
}

TEST_F(CachingStoreTest, ObjectsLieIn256SubfoldersAndAnOlderFlatCopyIsEvictedFirst) {
  // One folder serialises every file made in it; a cache made by an older
  // version (objects in the folder itself) still counts against the budget.
  const std::string name = CachingStore::file_name("u0");
  EXPECT_EQ(name.size(), 2 + 1 + 16 + 4);
  EXPECT_EQ(name[2], '/');
  std::filesystem::create_directories(folder());
  std::ofstream(folder() + "/0123456789abcdef.obj") << std::string(1500, 'o');  // Old and flat: least recent.
  std::filesystem::last_write_time(folder() + "/0123456789abcdef.obj",
                                   std::filesystem::file_time_type::clock::now() - std::chrono::hours(1));
  const std::string data(1000, 'x');
  for (int i = 0; i < 2; ++i) remote_->put("u" + std::to_string(i), data, "v");
  CachingStore cache(remote_, folder(), 3000);
  cache.read("u0", 0, -1);
  EXPECT_TRUE(std::filesystem::exists(folder() + "/" + name));
  cache.read("u1", 0, -1);  // 1500 + 2 x 1027 > 3000: the flat copy goes.
  EXPECT_FALSE(std::filesystem::exists(folder() + "/0123456789abcdef.obj"));
  EXPECT_EQ(cache.counters().evictions, 1);
  EXPECT_TRUE(cache.serves_locally("u0") && cache.serves_locally("u1"));
}

TEST_F(CachingStoreTest, AnObjectLargerThanTheBudgetIsReadThroughNotCached) {
  remote_->put("big", std::string(5000, 'b'), "v");
  CachingStore cache(remote_, folder(), 1000);
  EXPECT_EQ(cache.read("big", 4990, 10).size(), 10u);
  EXPECT_EQ(cache.read("big", 0, 1).size(), 1u);
  // One whole fetch tried (refused from its size), then ranged reads only.
  EXPECT_EQ(remote_->requests("fetch"), 1);
  EXPECT_EQ(remote_->requests("read"), 2);
  EXPECT_EQ(folder_bytes(), 0);
  EXPECT_FALSE(cache.serves_locally("big"));
}

TEST_F(CachingStoreTest, OnlyAnObjectFoundInTheFolderIsServedLocally) {
  remote_->put("https://h/a.jpg", "abc", "\"1\"");
  CachingStore cache(remote_, folder(), 1 << 20);
  EXPECT_EQ(cache.stat("https://h/a.jpg").size, 3u);  // Known (TarShards' indexing asks), not cached.
  EXPECT_FALSE(cache.serves_locally("https://h/a.jpg"));
  cache.read("https://h/a.jpg", 0, -1);
  EXPECT_TRUE(cache.serves_locally("https://h/a.jpg"));
  // Another rank evicted it: the next read finds it missing, fetches it, and it is local again.
  std::filesystem::remove(folder() + "/" + CachingStore::file_name("https://h/a.jpg"));
  EXPECT_TRUE(cache.serves_locally("https://h/a.jpg"));  // A hint: not seen yet.
  EXPECT_EQ(text(cache.read("https://h/a.jpg", 0, -1)), "abc");
  EXPECT_EQ(remote_->requests("fetch"), 2);
  EXPECT_TRUE(cache.serves_locally("https://h/a.jpg"));
}

TEST_F(CachingStoreTest, ACopyTheStoreCannotCheckIsFetchedAgainNotAnError) {
  remote_->put("presigned", "bytes", "\"1\"");
  CachingStore(remote_, folder(), 1 << 20).read("presigned", 0, -1);
  remote_->refuse_stat = true;
  CachingStore next_run(remote_, folder(), 1 << 20);
  EXPECT_EQ(text(next_run.read("presigned", 0, -1)), "bytes");
  EXPECT_EQ(text(next_run.read("presigned", 1, 2)), "yt");
  EXPECT_EQ(remote_->requests("fetch"), 2);  // Once per run; then served from the folder.
}

TEST_F(CachingStoreTest, ATornOrForeignFileIsNeverServed) {
  remote_->put("a", "the right bytes", "v");
  CachingStore(remote_, folder(), 1 << 20).read("a", 0, -1);
  const std::string path = folder() + "/" + CachingStore::file_name("a");
  std::filesystem::resize_file(path, std::filesystem::file_size(path) - 3);  // Torn.
  EXPECT_EQ(text(CachingStore(remote_, folder(), 1 << 20).read("a", 0, -1)), "the right bytes");
  std::ofstream(path, std::ios::binary) << "conveyor-cache 1\nb\nv\n15\nthe wrong bytes";  // Another URL's.
  EXPECT_EQ(text(CachingStore(remote_, folder(), 1 << 20).read("a", 0, -1)), "the right bytes");
  EXPECT_EQ(remote_->requests("fetch"), 3);
}

TEST_F(CachingStoreTest, ReadersOfSeveralStoresAtOnceGetWholeCorrectObjectsEachFetchedOnce) {
  // Four stores on one folder stand for four processes: their locks are
  // separate open files, as flock sees processes.
  for (int i = 0; i < 5; ++i) remote_->put(name("o", i), std::string(20000 + i, char('a' + i)), "v");
  std::vector<std::unique_ptr<CachingStore>> stores;
  for (int i = 0; i < 4; ++i) stores.push_back(std::make_unique<CachingStore>(remote_, folder(), 1 << 20));
  std::atomic<int> wrong{0};
  std::vector<std::thread> readers;
  for (int t = 0; t < 16; ++t) {
    readers.emplace_back([&, t] {
      for (int k = 0; k < 40; ++k) {
        const int object = (t + k) % 5;
        const uint64_t offset = static_cast<uint64_t>(k * 97 % 20000);
        const std::vector<uint8_t> got = stores[static_cast<size_t>(t % 4)]->read(name("o", object), offset, 50);
        if (got != std::vector<uint8_t>(50, static_cast<uint8_t>('a' + object))) ++wrong;
      }
    });
  }
  for (std::thread& reader : readers) reader.join();
  EXPECT_EQ(wrong.load(), 0);
  EXPECT_EQ(remote_->requests("fetch"), 5);  // Never two whole fetches of one object.
}

TEST_F(CachingStoreTest, AFolderThatCannotBeMadeIsAConfigError) {
  std::ofstream(dir_ / "file") << "x";
  EXPECT_THROW(CachingStore(remote_, (dir_ / "file" / "cache").string(), 1 << 20), Error);
  EXPECT_THROW(CachingStore(remote_, folder(), -1), Error);
  // 0: most of the space free on the folder's file system.
  const CachingStore defaulted(remote_, folder(), 0);
  const auto space = std::filesystem::space(folder());
  EXPECT_GT(defaulted.budget_bytes(), 0);
  EXPECT_LE(defaulted.budget_bytes(), static_cast<int64_t>(space.available));
}

}  // namespace
}  // namespace conveyor
