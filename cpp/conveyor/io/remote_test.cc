#include "conveyor/io/remote.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <future>
#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "conveyor/core/cancellation.h"
#include "conveyor/core/error.h"
#include "conveyor/io/source.h"
#include "conveyor/io/tar_shards.h"

namespace conveyor {
namespace {

using namespace std::chrono_literals;
using Kind = FetchFailure::Kind;

std::string as_string(const Bytes& bytes) { return {reinterpret_cast<const char*>(bytes.data()), bytes.size()}; }

// Objects in memory; the first `failures[url]` attempts on a URL fail with
// `failure`. Records every request (url, offset, size). An attempt on a URL
// of `waits_for` waits until that URL's first request (at most 10 s: a
// deadlock guard, counted in gate_timeouts()).
class FakeStore final : public RemoteStore {
 public:
  std::map<std::string, std::string> objects;
  std::map<std::string, int> failures;
  std::map<std::string, std::string> waits_for;
  bool whole = false;  // keeps_whole_objects(), as a cache folder's store.
  FetchFailure failure{Kind::kStatus, 503, "Service Unavailable"};

  std::vector<uint8_t> read(const std::string& url, uint64_t offset, int64_t size) const override {
    const std::string& object = attempt(url, offset, size);
    const std::string part = object.substr(std::min<size_t>(offset, object.size()),
                                           size < 0 ? std::string::npos : static_cast<size_t>(size));
    return {part.begin(), part.end()};
  }
  uint64_t size(const std::string& url) const override { return attempt(url, 0, -2).size(); }
  bool keeps_whole_objects() const override { return whole; }
  // With `asynchronous`, an attempt of read() on a thread of its own.
  bool start_read(const std::string& url, uint64_t offset, int64_t size, const Cancellation*,
                  std::function<void(RemoteAttempt)> done) const override {
    if (!asynchronous) return false;
    std::lock_guard lock(mu_);
    threads_.emplace_back([this, url, offset, size, done = std::move(done)] {
      RemoteAttempt attempt;
      try {
        attempt.data = read(url, offset, size);
      } catch (const FetchError& e) {
        attempt.failure = e.failure();
      }
      done(std::move(attempt));
    });
    return true;
  }
  bool asynchronous = false;
  ~FakeStore() override {
    for (std::thread& thread : threads_) thread.join();
  }

  std::vector<std::tuple<std::string, uint64_t, int64_t>> requests() const {
    std::lock_guard lock(mu_);
    return requests_;
  }
  int gate_timeouts() const {
    std::lock_guard lock(mu_);
    return gate_timeouts_;
  }

 private:
  const std::string& attempt(const std::string& url, uint64_t offset, int64_t size) const {
    std::unique_lock lock(mu_);
    requests_.emplace_back(url, offset, size);
    requested_.notify_all();
    if (auto gate = waits_for.find(url); gate != waits_for.end()) {
      const auto seen = [&] {
        return std::any_of(requests_.begin(), requests_.end(),
                           [&](const auto& request) { return std::get<0>(request) == gate->second; });
      };
      if (!requested_.wait_for(lock, 10s, seen)) ++gate_timeouts_;
    }
    auto failing = failures.find(url);
    if (failing != failures.end() && failing->second != 0) {
      if (failing->second > 0) --const_cast<int&>(failing->second);
      throw FetchError(failure);
    }
    auto it = objects.find(url);
    if (it == objects.end()) throw FetchError({Kind::kStatus, 404, "Not Found"});
    return it->second;
  }
  mutable std::mutex mu_;
  mutable std::condition_variable requested_;
  mutable std::vector<std::tuple<std::string, uint64_t, int64_t>> requests_;
  mutable int gate_timeouts_ = 0;
  mutable std::vector<std::thread> threads_;
};

RemoteAccess access(std::shared_ptr<FakeStore> store, int attempts = 5) {
  return RemoteAccess{std::move(store), RetryPolicy{attempts, 0.0, 0.0, 0.0}};
}

TEST(RemoteTest, IsUrl) {
  EXPECT_TRUE(is_url("http://host/a.jpg"));
  EXPECT_TRUE(is_url("s3://bucket/key"));
  EXPECT_TRUE(is_url("git+https://x/y"));
  EXPECT_FALSE(is_url("/data/a.jpg"));
  EXPECT_FALSE(is_url("relative/http://x"));
  EXPECT_FALSE(is_url("://x"));
  EXPECT_FALSE(is_url("1http://x"));
  EXPECT_FALSE(is_url("C:\\data\\a.jpg"));
}

TEST(RemoteTest, AShownUrlHidesItsPasswordAndTheQuerysCredentials) {
  EXPECT_EQ(shown_path("/data/a.jpg?sig=1"), "/data/a.jpg?sig=1");  // Not a URL.
  EXPECT_EQ(shown_path("https://h/a.jpg"), "https://h/a.jpg");
  EXPECT_EQ(shown_path("https://user:pa:ss@h:8/a@b.jpg"), "https://user:***@h:8/a@b.jpg");
  EXPECT_EQ(shown_path("https://user@h/a.jpg"), "https://user@h/a.jpg");
  EXPECT_EQ(shown_path("https://b.s3.amazonaws.com/k.tar?X-Amz-Algorithm=AWS4-HMAC-SHA256&X-Amz-Credential=AKID%2F1"
                       "&X-Amz-Security-Token=tok&X-Amz-Signature=abc#f"),
            "https://b.s3.amazonaws.com/k.tar?X-Amz-Algorithm=AWS4-HMAC-SHA256&X-Amz-Credential=AKID%2F1"
            "&X-Amz-Security-Token=***&X-Amz-Signature=***#f");
  EXPECT_EQ(shown_path("https://a.blob.core.windows.net/c/k?sv=1&SIG=s&token=t&access_token=x&a&=y&sig"),
            "https://a.blob.core.windows.net/c/k?sv=1&SIG=***&token=***&access_token=***&a&=y&sig");
}

TEST(RemoteTest, Classification) {
  for (int status : {408, 429, 500, 502, 503, 504, 599}) {
    EXPECT_TRUE(is_transient({Kind::kStatus, status, ""})) << status;
  }
  for (int status : {400, 401, 403, 404, 410, 416, 501, 505}) {
    EXPECT_FALSE(is_transient({Kind::kStatus, status, ""})) << status;
  }
  EXPECT_TRUE(is_transient({Kind::kTimeout, 0, ""}));
  EXPECT_TRUE(is_transient({Kind::kConnection, 0, ""}));
  for (Kind kind :
       {Kind::kNotFound, Kind::kPermission, Kind::kInvalid, Kind::kOther, Kind::kCancelled, Kind::kTooLarge}) {
    EXPECT_FALSE(is_transient({kind, 0, ""}));
  }
  EXPECT_EQ(FetchFailure({Kind::kStatus, 404, "Not Found"}).describe(), "HTTP 404 Not Found");
  EXPECT_EQ(FetchFailure({Kind::kTimeout, 0, "read"}).describe(), "timed out: read");
  EXPECT_EQ(FetchFailure({Kind::kConnection, 0, ""}).describe(), "connection failed");
  EXPECT_EQ(FetchFailure({Kind::kTooLarge, 0, "Content-Length: 1000000000000000"}).describe(),
            "too large: Content-Length: 1000000000000000");
}

TEST(RemoteTest, TransientFailuresAreRetriedThenSucceed) {
  auto store = std::make_shared<FakeStore>();
  store->objects["http://h/a"] = "abcdef";
  store->failures["http://h/a"] = 3;
  EXPECT_EQ(as_string(access(store).read("http://h/a", 1, 3, "key")), "bcd");
  EXPECT_EQ(store->requests().size(), 4u);
}

TEST(RemoteTest, GivesUpAfterTheAttemptsNamingTheKeyAndStatus) {
  auto store = std::make_shared<FakeStore>();
  store->objects["http://h/a"] = "abc";
  store->failures["http://h/a"] = -1;  // Always.
  try {
    access(store, 3).read("http://h/a", 0, -1, "http://h/a");
    FAIL() << "expected a ReadError";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kRead);
    EXPECT_EQ(e.key(), "http://h/a");
    EXPECT_EQ(e.cause().rfind("HTTP 503 Service Unavailable (a transient error; gave up after 3 attempts in ", 0), 0u)
        << e.cause();
  }
  EXPECT_EQ(store->requests().size(), 3u);
}

TEST(RemoteTest, PermanentFailuresFailAtOnce) {
  auto store = std::make_shared<FakeStore>();
  try {
    access(store).read("http://h/missing", 0, -1, "http://h/missing");
    FAIL() << "expected a ReadError";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kRead);
    EXPECT_EQ(std::string(e.what()), "http://h/missing: HTTP 404 Not Found");
  }
  EXPECT_EQ(store->requests().size(), 1u);
}

// `attempt` as start_read's `done` got it, at `url` of `access`'s store.
RemoteAttempt started(const RemoteAccess& access, const std::string& url) {
  auto promise = std::make_shared<std::promise<RemoteAttempt>>();
  std::future<RemoteAttempt> future = promise->get_future();
  if (!access.start_read(url, nullptr, [promise](RemoteAttempt attempt) { promise->set_value(std::move(attempt)); })) {
    ADD_FAILURE() << "not started: " << url;
    return {};
  }
  return future.get();
}

TEST(RemoteTest, AReadAfterAStartedAttemptCountsItsFailureAsTheFirstOfItsAttempts) {
  auto store = std::make_shared<FakeStore>();
  store->asynchronous = true;
  store->objects["http://h/a"] = "abc";
  store->failures["http://h/a"] = 1;
  const RemoteAccess twice = access(store, 2);
  RemoteAttempt first = started(twice, "http://h/a");
  ASSERT_TRUE(first.failure.has_value());
  EXPECT_GT(first.started.time_since_epoch().count(), 0);
  EXPECT_EQ(as_string(twice.read_after(first, "http://h/a", 0, -1, "a")), "abc");
  EXPECT_EQ(store->requests().size(), 2u);

  // Its policy's attempts include it: one more here, then the error.
  store->failures["http://h/a"] = -1;
  try {
    twice.read_after(started(twice, "http://h/a"), "http://h/a", 0, -1, "a");
    FAIL() << "expected a ReadError";
  } catch (const Error& e) {
    EXPECT_EQ(e.cause().rfind("HTTP 503 Service Unavailable (a transient error; gave up after 2 attempts in ", 0), 0u)
        << e.cause();
  }
  EXPECT_EQ(store->requests().size(), 4u);

  // A permanent failure is the error at once; no failure (nor bytes) is a
  // read made anew.
  try {
    twice.read_after(started(twice, "http://h/missing"), "http://h/missing", 0, -1, "http://h/missing");
    FAIL() << "expected a ReadError";
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()), "http://h/missing: HTTP 404 Not Found");
  }
  EXPECT_EQ(store->requests().size(), 5u);
  store->failures["http://h/a"] = 0;
  EXPECT_EQ(as_string(twice.read_after(RemoteAttempt{}, "http://h/a", 1, 2, "a")), "bc");
  EXPECT_EQ(store->requests().size(), 6u);
  RemoteAttempt cancelled;
  cancelled.failure = FetchFailure{Kind::kCancelled, 0, "the loader stopped"};
  try {
    twice.read_after(cancelled, "http://h/a", 0, -1, "a");
    FAIL() << "expected a cancellation";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kCancelled);
  }
  EXPECT_EQ(store->requests().size(), 6u);
}

TEST(RemoteTest, AFileSourceStartsAUrlsReadAndGivesItsRecordOrTheAttemptToContinue) {
  auto store = std::make_shared<FakeStore>();
  store->asynchronous = true;
  store->objects["http://h/a.jpg"] = "remote bytes";
  store->failures["http://h/b.jpg"] = 1;
  store->objects["http://h/b.jpg"] = "more bytes";
  FileSource source({"http://h/a.jpg", "http://h/b.jpg", "/local/c.jpg"}, {3, 4, 5}, {},
                    std::make_shared<RemoteAccess>(access(store)));
  auto start = [&](int64_t index) {
    auto promise = std::make_shared<std::promise<AsyncRead>>();
    std::future<AsyncRead> future = promise->get_future();
    if (!source.start_read(index, nullptr, [promise](AsyncRead end) { promise->set_value(std::move(end)); })) {
      ADD_FAILURE() << "not started: " << index;
      return AsyncRead{};
    }
    return future.get();
  };
  const AsyncRead a = start(0);
  ASSERT_TRUE(a.record.has_value());
  EXPECT_EQ(as_string(a.record->data), "remote bytes");
  EXPECT_EQ(a.record->label, 3);
  EXPECT_EQ(a.record->key, "http://h/a.jpg");
  const AsyncRead b = start(1);
  ASSERT_FALSE(b.record.has_value());
  ASSERT_NE(b.attempt, nullptr);
  const Record continued = source.read_after(1, *b.attempt);
  EXPECT_EQ(as_string(continued.data), "more bytes");
  EXPECT_EQ(continued.label, 4);
  // A file is not started: the loader reads it on an io thread.
  EXPECT_FALSE(source.start_read(2, nullptr, [](AsyncRead) { ADD_FAILURE() << "a file's read was started"; }));
  EXPECT_EQ(store->requests().size(), 3u);
}

TEST(RemoteTest, SourcesWithUrlsDoNotReadLocally) {
  // The loader runs only local reads on its cpu threads (Source::local_reads).
  auto remote = std::make_shared<RemoteAccess>(access(std::make_shared<FakeStore>()));
  EXPECT_FALSE(FileSource({"/data/a.jpg", "http://h/a.jpg"}, {}, {}, remote).local_reads());
  EXPECT_TRUE(FileSource({"/data/a.jpg", "/data/b.jpg"}, {}, {}, remote).local_reads());
  EXPECT_TRUE(FileSource({"http://h/a.jpg"}).local_reads());  // Without remote access a URL is a file path.
  // Reads of URLs wait on a network (the loader's first reads in flight).
  EXPECT_TRUE(FileSource({"/data/a.jpg", "http://h/a.jpg"}, {}, {}, remote).network_reads());
  EXPECT_FALSE(FileSource({"/data/a.jpg", "/data/b.jpg"}, {}, {}, remote).network_reads());
  // Per sample: only a URL whose object a cache holds (here none) is a cached read.
  const FileSource mixed({"/data/a.jpg", "http://h/a.jpg"}, {}, {}, remote);
  EXPECT_FALSE(mixed.read_is_at_hand(0, nullptr));
  EXPECT_FALSE(mixed.read_is_at_hand(1, nullptr));
}

TEST(RemoteTest, ShortRangeIsAReadError) {
  auto store = std::make_shared<FakeStore>();
  store->objects["http://h/a"] = "abc";
  try {
    access(store).read("http://h/a", 1, 5, "k");
    FAIL() << "expected a ReadError";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kRead);
    EXPECT_EQ(e.cause().rfind("expected 5 bytes at offset 1, got 2 (", 0), 0u) << e.cause();
  }
}

TEST(RemoteTest, CancellationEndsABackoffAtOnce) {
  auto store = std::make_shared<FakeStore>();
  store->objects["http://h/a"] = "abc";
  store->failures["http://h/a"] = -1;
  // A budget of a day between attempts: only cancellation can end the read.
  const RemoteAccess remote{store, RetryPolicy{1000000, 3600.0, 3600.0, 0.0}};
  Cancellation cancellation;
  auto read = std::async(std::launch::async, [&] {
    const ScopedCancellation scope(cancellation);
    try {
      remote.read("http://h/a", 0, -1, "http://h/a");
    } catch (const Error& e) {
      return e.kind();
    }
    return ErrorKind::kInternal;
  });
  while (store->requests().empty()) std::this_thread::sleep_for(1ms);
  cancellation.cancel();
  ASSERT_EQ(read.wait_for(60s), std::future_status::ready);
  EXPECT_EQ(read.get(), ErrorKind::kCancelled);
  EXPECT_EQ(store->requests().size(), 1u);
}

TEST(RemoteTest, PolicyValidation) {
  EXPECT_THROW((RetryPolicy{0, 0.1, 1, 1}.validate()), Error);
  EXPECT_THROW((RetryPolicy{1, -1, 1, 1}.validate()), Error);
  EXPECT_THROW((RetryPolicy{1, 2, 1, 1}.validate()), Error);
  EXPECT_NO_THROW((RetryPolicy{}.validate()));
}

TEST(RemoteTest, FileSourceReadsUrlsThroughTheStoreAndPathsFromDisk) {
  auto store = std::make_shared<FakeStore>();
  store->objects["http://h/a.jpg"] = "remote bytes";
  FileSource source({"http://h/a.jpg", "/no/such/file.jpg"}, {3, 4}, {}, std::make_shared<RemoteAccess>(access(store)));
  const Record record = source.read(0);
  EXPECT_EQ(as_string(record.data), "remote bytes");
  EXPECT_EQ(record.label, 3);
  EXPECT_EQ(record.key, "http://h/a.jpg");
  try {
    source.read(1);
    FAIL() << "expected a ReadError";
  } catch (const Error& e) {
    EXPECT_EQ(e.key(), "/no/such/file.jpg");  // The file system's error, not the store's.
  }
  EXPECT_EQ(store->requests().size(), 1u);
}

// A ustar member: header and content padded to 512 bytes.
std::string tar_member(const std::string& name, const std::string& bytes) {
  std::vector<char> h(512, 0);
  std::memcpy(h.data(), name.data(), name.size());
  std::snprintf(h.data() + 100, 8, "%07o", 0644);
  std::snprintf(h.data() + 124, 12, "%011zo", bytes.size());
  h[156] = '0';
  std::memcpy(h.data() + 257, "ustar", 6);
  std::memcpy(h.data() + 263, "00", 2);
  std::memset(h.data() + 148, ' ', 8);
  unsigned sum = 0;
  for (char c : h) sum += static_cast<unsigned char>(c);
  std::snprintf(h.data() + 148, 8, "%06o", sum);
  std::string out(h.begin(), h.end());
  out += bytes;
  out.resize((out.size() + 511) / 512 * 512, '\0');
  return out;
}

TEST(RemoteTest, TarShardsOverAStoreReadEachMemberWithOneRangeRequest) {
  auto store = std::make_shared<FakeStore>();
  const std::string shard = tar_member("a.cls", "7") + tar_member("a.jpg", "image a") + tar_member("b.cls", "8") +
                            tar_member("b.jpg", "image bb") + std::string(1024, '\0');
  store->objects["http://h/s.tar"] = shard;
  store->failures["http://h/s.tar"] = 2;  // Indexing retries too.
  const TarShardSource source({"http://h/s.tar"}, std::make_shared<RemoteAccess>(access(store)));
  ASSERT_EQ(source.size(), 2);
  EXPECT_FALSE(source.local_reads());
  EXPECT_TRUE(source.network_reads());
  const size_t indexing = store->requests().size();
  const Record b = source.read(1);
  EXPECT_EQ(as_string(b.data), "image bb");
  EXPECT_EQ(b.label, 8);
  EXPECT_EQ(b.key, "http://h/s.tar:b.jpg");
  const auto requests = store->requests();
  ASSERT_EQ(requests.size(), indexing + 1);
  EXPECT_EQ(requests.back(), std::make_tuple(std::string("http://h/s.tar"), uint64_t{3 * 1024 + 512}, int64_t{8}));
}

// Image bytes of sample `i` of a planned shard: `size` bytes that differ by sample.
std::string image_of(int i, size_t size) { return std::string(size, static_cast<char>('a' + i % 26)); }

// A shard of `count` samples "s<i>" (a cls, then a jpg of `image_bytes`).
std::string shard_of(int first, int count, size_t image_bytes, bool labels = true) {
  std::string shard;
  for (int i = first; i < first + count; ++i) {
    std::string prefix = std::to_string(i);
    prefix.insert(0, 1, 's');  // Not "s" + ...: GCC 12 warns wrongly (-Wrestrict) on that once inlined.
    if (labels) shard += tar_member(prefix + ".cls", std::to_string(i));
    shard += tar_member(prefix + ".jpg", image_of(i, image_bytes));
  }
  return shard + std::string(1024, '\0');
}

std::vector<int64_t> iota(int64_t from, int64_t to) {
  std::vector<int64_t> out;
  for (int64_t i = from; i < to; ++i) out.push_back(i);
  return out;
}

TEST(RemoteTest, APlanReadsTheSequentialOrderOfTarShardsWithOneRangeRequestPerShard) {
  auto store = std::make_shared<FakeStore>();
  store->objects["http://h/0.tar"] = shard_of(0, 3, 700);
  store->objects["http://h/1.tar"] = shard_of(3, 3, 700);
  const TarShardSource source({"http://h/0.tar", "http://h/1.tar"}, std::make_shared<RemoteAccess>(access(store)));
  std::vector<Record> alone;
  for (int64_t i = 0; i < 6; ++i) alone.push_back(source.read(i));
  const size_t before = store->requests().size();
  const std::vector<int64_t> order = iota(0, 6);
  std::shared_ptr<ReadPlan> plan = source.plan_reads(order);
  ASSERT_NE(plan, nullptr);
  for (int64_t i : order) {
    const Record record = source.read_planned(i, *plan);
    EXPECT_EQ(as_string(record.data), image_of(static_cast<int>(i), 700)) << i;
    EXPECT_EQ(record.label, i);
    EXPECT_EQ(record.key, alone[static_cast<size_t>(i)].key);
  }
  const auto requests = store->requests();
  ASSERT_EQ(requests.size(), before + 2);
  // From the first image (after its sample's cls header and block, and its
  // own header) to the end of the last: 3 samples of 5 blocks, less those 3
  // blocks and the last image's padding.
  const auto span = int64_t{3 * 5 * 512 - 3 * 512 - (1024 - 700)};
  EXPECT_EQ(requests[before], std::make_tuple(std::string("http://h/0.tar"), uint64_t{3 * 512}, span));
  EXPECT_EQ(requests[before + 1], std::make_tuple(std::string("http://h/1.tar"), uint64_t{3 * 512}, span));
}

TEST(RemoteTest, APlanReadsAloneTheSamplesOfARunWhoseRequestWouldFetchMuchMore) {
  // Images of 200 KB: a run of 8 is 1.6 MB. A third of them (a rank's share
  // of 3) would fetch it for 600 KB of images and 3 requests: read alone.
  auto store = std::make_shared<FakeStore>();
  store->objects["http://h/s.tar"] = shard_of(0, 8, 200'000, false);
  const TarShardSource source({"http://h/s.tar"}, std::make_shared<RemoteAccess>(access(store)));
  const std::vector<int64_t> a_third{0, 3, 6};
  EXPECT_EQ(source.plan_reads(a_third), nullptr);
  const std::vector<int64_t> one{5};
  EXPECT_EQ(source.plan_reads(one), nullptr);
  const std::vector<int64_t> half{7, 1, 4, 2};
  EXPECT_NE(source.plan_reads(half), nullptr);
  const std::vector<int64_t> not_its_samples{0, 1, 8};
  EXPECT_EQ(source.plan_reads(not_its_samples), nullptr);
  // Small images: the tar headers around them outweigh them, but not the
  // requests that reading them alone would cost.
  auto small = std::make_shared<FakeStore>();
  small->objects["http://h/s.tar"] = shard_of(0, 8, 100);
  const TarShardSource small_source({"http://h/s.tar"}, std::make_shared<RemoteAccess>(access(small)));
  EXPECT_NE(small_source.plan_reads(a_third), nullptr);
}

TEST(RemoteTest, NoPlanReadsAStoreThatKeepsWholeObjects) {
  // A cache folder fetches a shard whole at its first read: runs would only
  // add requests.
  struct WholeObjects final : RemoteStore {
    std::shared_ptr<FakeStore> inner = std::make_shared<FakeStore>();
    std::vector<uint8_t> read(const std::string& url, uint64_t offset, int64_t size) const override {
      return inner->read(url, offset, size);
    }
    uint64_t size(const std::string& url) const override { return inner->size(url); }
    bool keeps_whole_objects() const override { return true; }
  };
  auto store = std::make_shared<WholeObjects>();
  store->inner->objects["http://h/s.tar"] = shard_of(0, 4, 100);
  const TarShardSource source({"http://h/s.tar"},
                              std::make_shared<RemoteAccess>(RemoteAccess{store, RetryPolicy{1, 0.0, 0.0, 0.0}}));
  EXPECT_EQ(source.plan_reads(iota(0, 4)), nullptr);
}

TEST(RemoteTest, ASampleReadAgainUnderAPlanIsServedWhileItsRunIsHeld) {
  // A skipped sample re-issues the positions after it: their samples are
  // read again, and count once towards releasing the run.
  auto store = std::make_shared<FakeStore>();
  store->objects["http://h/s.tar"] = shard_of(0, 4, 100);
  const TarShardSource source({"http://h/s.tar"}, std::make_shared<RemoteAccess>(access(store)));
  const std::vector<int64_t> order = iota(0, 4);
  std::shared_ptr<ReadPlan> plan = source.plan_reads(order);
  ASSERT_NE(plan, nullptr);
  const size_t before = store->requests().size();
  EXPECT_FALSE(source.read_is_at_hand(2, plan.get()));  // Its run is not read yet.
  for (int64_t i : {0, 1, 1, 0, 2})
    EXPECT_EQ(as_string(source.read_planned(i, *plan).data), image_of(static_cast<int>(i), 100));
  EXPECT_EQ(store->requests().size(), before + 1);
  EXPECT_TRUE(source.read_is_at_hand(3, plan.get()));  // Served from the run's bytes, no request.
  // Served already: the run is not held for it (3's read may release it first).
  EXPECT_FALSE(source.read_is_at_hand(2, plan.get()));
  EXPECT_EQ(as_string(source.read_planned(3, *plan).data), image_of(3, 100));  // The last: the run is released.
  EXPECT_FALSE(source.read_is_at_hand(2, plan.get()));
  EXPECT_EQ(as_string(source.read_planned(2, *plan).data), image_of(2, 100));  // Read alone.
  EXPECT_EQ(store->requests().size(), before + 2);
}

TEST(RemoteTest, APlanHoldsAtMostItsBudgetOfRunsInMemory) {
  // 80 samples of nearly 4 MiB: 40 runs of two, read first the first sample
  // of each run, then the second ones in reverse. All 40 runs, each held
  // between its two reads, would hold 320 MiB at the middle of the order,
  // past kPlanBytes: halving the window keeps the 20 runs read within 40
  // positions (the inner ones, 160 MiB); the outer runs' samples are read
  // alone.
  const size_t image = (size_t{4} << 20) - 1024;
  const uint64_t sample_span = image + 512;  // An image and the next one's header.
  auto store = std::make_shared<FakeStore>();
  store->objects["http://h/s.tar"] = shard_of(0, 80, image, false);
  const TarShardSource source({"http://h/s.tar"}, std::make_shared<RemoteAccess>(access(store)));
  std::vector<int64_t> order;
  for (int64_t run = 0; run < 40; ++run) order.push_back(2 * run);
  for (int64_t run = 39; run >= 0; --run) order.push_back(2 * run + 1);
  std::shared_ptr<ReadPlan> plan = source.plan_reads(order);
  ASSERT_NE(plan, nullptr);
  const size_t before = store->requests().size();
  EXPECT_EQ(as_string(source.read_planned(0, *plan).data), image_of(0, image));    // Run 0: outer.
  EXPECT_EQ(as_string(source.read_planned(40, *plan).data), image_of(40, image));  // Run 20: inner.
  EXPECT_EQ(as_string(source.read_planned(41, *plan).data), image_of(41, image));
  const auto requests = store->requests();
  ASSERT_EQ(requests.size(), before + 2);
  EXPECT_EQ(requests[before], std::make_tuple(std::string("http://h/s.tar"), uint64_t{512}, int64_t(image)));
  EXPECT_EQ(requests[before + 1],
            std::make_tuple(std::string("http://h/s.tar"), 40 * sample_span + 512, int64_t(sample_span + image)));
}

TEST(RemoteTest, AFailedRunIsReadSampleBySampleAndEachErrorNamesItsMember) {
  auto store = std::make_shared<FakeStore>();
  store->objects["http://h/s.tar"] = shard_of(0, 4, 100);
  const TarShardSource source({"http://h/s.tar"}, std::make_shared<RemoteAccess>(access(store, 2)));
  const std::vector<int64_t> order = iota(0, 4);
  // The run's two attempts fail; its samples' own requests succeed.
  std::shared_ptr<ReadPlan> plan = source.plan_reads(order);
  ASSERT_NE(plan, nullptr);
  store->failures["http://h/s.tar"] = 2;
  const size_t before = store->requests().size();
  for (int64_t i : order) EXPECT_EQ(as_string(source.read_planned(i, *plan).data), image_of(static_cast<int>(i), 100));
  EXPECT_EQ(store->requests().size(), before + 2 + 4);
  // Gone: each sample's error is its own.
  plan = source.plan_reads(order);
  store->objects.erase("http://h/s.tar");
  try {
    source.read_planned(2, *plan);
    FAIL() << "expected a ReadError";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kRead);
    EXPECT_EQ(e.key(), "http://h/s.tar:s2.jpg");
    EXPECT_NE(std::string(e.what()).find("HTTP 404 Not Found"), std::string::npos) << e.what();
  }
}

TEST(RemoteTest, ThreadsReadingOneRunShareItsOneRequest) {
  auto store = std::make_shared<FakeStore>();
  store->objects["http://h/s.tar"] = shard_of(0, 64, 300);
  const TarShardSource source({"http://h/s.tar"}, std::make_shared<RemoteAccess>(access(store)));
  const std::vector<int64_t> order = iota(0, 64);
  std::shared_ptr<ReadPlan> plan = source.plan_reads(order);
  ASSERT_NE(plan, nullptr);
  const size_t before = store->requests().size();
  std::vector<std::thread> threads;
  std::atomic<int> wrong{0};
  for (int t = 0; t < 8; ++t) {
    threads.emplace_back([&, t] {
      for (int64_t i = t; i < 64; i += 8) {
        if (as_string(source.read_planned(i, *plan).data) != image_of(static_cast<int>(i), 300)) ++wrong;
      }
    });
  }
  for (auto& thread : threads) thread.join();
  EXPECT_EQ(wrong.load(), 0);
  EXPECT_EQ(store->requests().size(), before + 1);
}

TEST(RemoteTest, RemoteShardsAreIndexedSeveralAtATime) {
  auto store = std::make_shared<FakeStore>();
  std::vector<std::string> urls;
  for (int i = 0; i < 4; ++i) {
    urls.push_back("http://h/" + std::to_string(i) + ".tar");
    store->objects[urls.back()] = shard_of(3 * i, 3, 100);
  }
  // Shard 0 waits for a request on shard 3: indexed one after another, it
  // would wait in vain.
  store->waits_for[urls[0]] = urls[3];
  const TarShardSource source(urls, std::make_shared<RemoteAccess>(access(store)));
  EXPECT_EQ(store->gate_timeouts(), 0);
  // The index is the shards' in order, whichever finished first.
  ASSERT_EQ(source.size(), 12);
  for (int64_t i = 0; i < 12; ++i) {
    const Record record = source.read(i);
    EXPECT_EQ(record.key, urls[static_cast<size_t>(i / 3)] + ":s" + std::to_string(i) + ".jpg");
    EXPECT_EQ(record.label, i);
    EXPECT_EQ(as_string(record.data), image_of(static_cast<int>(i), 100));
  }
  EXPECT_EQ(source.shard_starts(), (std::vector<int64_t>{0, 3, 6, 9}));
}

TEST(RemoteTest, OfShardsIndexedAtOnceTheFirstFailingInOrderIsTheErrorRaised) {
  auto store = std::make_shared<FakeStore>();
  std::vector<std::string> urls;
  for (int i = 0; i < 6; ++i) {
    urls.push_back("http://h/" + std::to_string(i) + ".tar");
    if (i != 2 && i != 4) store->objects[urls.back()] = shard_of(3 * i, 3, 100);
  }
  // Shard 4 fails first; shard 2, which the order reaches first, is named.
  store->waits_for[urls[2]] = urls[4];
  try {
    const TarShardSource source(urls, std::make_shared<RemoteAccess>(access(store)));
    FAIL() << "expected a read error";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kRead);
    EXPECT_EQ(e.key(), "http://h/2.tar");
    EXPECT_NE(std::string(e.what()).find("HTTP 404 Not Found"), std::string::npos) << e.what();
  }
  EXPECT_EQ(store->gate_timeouts(), 0);
}

// The index TarShardSource::shard_index writes for `shard` (through a file).
std::string index_of(const std::string& shard) {
  const std::filesystem::path path = std::filesystem::temp_directory_path() /
                                     ("conveyor_index_" + std::to_string(::getpid()) + "_" +
                                      ::testing::UnitTest::GetInstance()->current_test_info()->name() + ".tar");
  {
    std::ofstream out(path, std::ios::binary);
    out << shard;
  }
  std::string index = TarShardSource::shard_index(path.string());
  std::filesystem::remove(path);
  return index;
}

TEST(RemoteTest, AShardIndexListsEveryMemberWithItsOffsetSizeAndLabelText) {
  const std::string shard =
      tar_member("a.cls", "7") + tar_member("a.jpg", "image a") + tar_member("README", "x") + std::string(1024, '\0');
  EXPECT_EQ(index_of(shard),
            R"({"format":"conveyor tar index","members":[["a.cls",512,1,"7"],["a.jpg",1536,7],["README",2560,1]],)"
            R"("shard_bytes":4096,"version":1})");
}

TEST(RemoteTest, AShardIndexIsRefusedForAShardTheSourceWouldRefuse) {
  try {
    index_of(tar_member("a.cls", "7") + tar_member("a.txt", "not an image") + std::string(1024, '\0'));
    FAIL() << "expected a read error";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kRead);
    EXPECT_NE(std::string(e.what()).find("sample has no image member"), std::string::npos) << e.what();
  }
}

TEST(RemoteTest, AShardWithAnIndexIsIndexedFromItWithoutReadingTheShard) {
  const std::string shard = shard_of(0, 3, 700);
  auto walked_store = std::make_shared<FakeStore>();
  walked_store->objects["http://h/s.tar"] = shard;
  const TarShardSource walked({"http://h/s.tar"}, std::make_shared<RemoteAccess>(access(walked_store)));

  auto store = std::make_shared<FakeStore>();
  store->objects["http://h/s.tar"] = shard;
  store->objects["http://h/s.tar.index.json"] = index_of(shard);
  const TarShardSource source({"http://h/s.tar"}, std::make_shared<RemoteAccess>(access(store)));
  // Its size, then the index: none of the shard's bytes.
  EXPECT_EQ(store->requests(), (std::vector<std::tuple<std::string, uint64_t, int64_t>>{
                                   {"http://h/s.tar", 0, -2}, {"http://h/s.tar.index.json", 0, -1}}));
  ASSERT_EQ(source.size(), walked.size());
  for (int64_t i = 0; i < source.size(); ++i) {
    const Record record = source.read(i), expected = walked.read(i);
    EXPECT_EQ(record.key, expected.key);
    EXPECT_EQ(record.label, expected.label);
    EXPECT_EQ(as_string(record.data), as_string(expected.data));
    EXPECT_EQ(source.fields(i), walked.fields(i));
  }
  EXPECT_EQ(source.max_label(), walked.max_label());
}

TEST(RemoteTest, AnIndexOfAShardOfAnotherSizeIsIgnoredAndTheShardWalked) {
  auto store = std::make_shared<FakeStore>();
  store->objects["http://h/s.tar"] = shard_of(0, 4, 700);  // Rewritten since its index.
  store->objects["http://h/s.tar.index.json"] = index_of(shard_of(0, 3, 700));
  const TarShardSource source({"http://h/s.tar"}, std::make_shared<RemoteAccess>(access(store)));
  ASSERT_EQ(source.size(), 4);
  EXPECT_EQ(as_string(source.read(3).data), image_of(3, 700));
}

TEST(RemoteTest, AListedShardIsIndexedWithoutAskingItsSizeOrForAnIndexTheListingLacks) {
  auto store = std::make_shared<FakeStore>();
  const std::string indexed = shard_of(0, 3, 700), plain = shard_of(3, 2, 700);
  store->objects["http://h/0.tar"] = indexed;
  store->objects["http://h/0.tar.index.json"] = index_of(indexed);
  store->objects["http://h/1.tar"] = plain;
  const TarShardSource source(
      {"http://h/0.tar", "http://h/1.tar"}, std::make_shared<RemoteAccess>(access(store)),
      {TarShardSource::Listed{indexed.size(), true}, TarShardSource::Listed{plain.size(), false}});
  ASSERT_EQ(source.size(), 5);
  EXPECT_EQ(as_string(source.read(4).data), image_of(4, 700));
  // No HEAD; shard 0's index; shard 1 read whole (one chunk), its index not asked for.
  auto requests = store->requests();
  requests.pop_back();  // The read above.
  std::sort(requests.begin(), requests.end());
  EXPECT_EQ(requests, (std::vector<std::tuple<std::string, uint64_t, int64_t>>{
                          {"http://h/0.tar.index.json", 0, -1}, {"http://h/1.tar", 0, int64_t(plain.size())}}));
  // A store that keeps whole objects (a cache) is asked each size: its own check.
  store->whole = true;
  const size_t before = store->requests().size();
  const TarShardSource cached({"http://h/0.tar"}, std::make_shared<RemoteAccess>(access(store)),
                              {TarShardSource::Listed{indexed.size(), true}});
  const auto all = store->requests();
  EXPECT_EQ(std::vector(all.begin() + static_cast<std::ptrdiff_t>(before), all.end()),
            (std::vector<std::tuple<std::string, uint64_t, int64_t>>{{"http://h/0.tar", 0, -2},
                                                                     {"http://h/0.tar.index.json", 0, -1}}));
  try {
    const TarShardSource mismatched({"http://h/0.tar"}, std::make_shared<RemoteAccess>(access(store)),
                                    {std::nullopt, std::nullopt});
    FAIL() << "expected a config error";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kConfig);
    EXPECT_STREQ(e.what(), "TarShards: listed has 2 entries for 1 shard(s)");
  }
}

TEST(RemoteTest, AShardUrlWithAQueryHasNoIndex) {
  // A presigned URL's signature covers the shard alone, and a suffix would
  // land in the query.
  auto store = std::make_shared<FakeStore>();
  store->objects["http://h/s.tar?X-Amz-Signature=abc"] = shard_of(0, 3, 700);
  const TarShardSource source({"http://h/s.tar?X-Amz-Signature=abc"}, std::make_shared<RemoteAccess>(access(store)));
  ASSERT_EQ(source.size(), 3);
  for (const auto& [url, offset, size] : store->requests()) EXPECT_EQ(url, "http://h/s.tar?X-Amz-Signature=abc");
}

TEST(RemoteTest, AShardIndexTheStoreForbidsIsTakenAsNone) {
  auto store = std::make_shared<FakeStore>();
  store->objects["http://h/s.tar"] = shard_of(0, 3, 700);
  store->failures["http://h/s.tar.index.json"] = -1;  // Every attempt.
  store->failure = {Kind::kStatus, 403, "Forbidden"};
  const TarShardSource source({"http://h/s.tar"}, std::make_shared<RemoteAccess>(access(store)));
  ASSERT_EQ(source.size(), 3);
  EXPECT_EQ(as_string(source.read(2).data), image_of(2, 700));
}

TEST(RemoteTest, AMalformedShardIndexIsAReadErrorNamingIt) {
  const std::string shard = shard_of(0, 2, 100);
  const std::string size = std::to_string(shard.size());
  const std::string head = R"({"format":"conveyor tar index","version":1,"shard_bytes":)" + size;
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"<html>", "malformed shard index: not JSON"},
      {R"({"format":"other"})", R"(malformed shard index: no "format": "conveyor tar index")"},
      {R"({"format":"conveyor tar index","version":2})",
       "malformed shard index: version 2; this conveyor reads version 1"},
      {head + "}", R"(malformed shard index: no "members" list)"},
      {head + R"(,"members":[["s0.jpg",512,-1]]})",
       "malformed shard index: member 0's size is not a whole number of bytes"},
      {head + R"(,"members":[["s0.jpg",512,100000]]})",
       "malformed shard index: member 0 ('s0.jpg') at offset 512 of 100000 bytes does not fit a " + size +
           "-byte shard after the member before it"},
      {head + R"(,"members":[["s0.jpg",1024,10],["s1.jpg",1024,10]]})",
       "malformed shard index: member 1 ('s1.jpg') at offset 1024 of 10 bytes does not fit a " + size +
           "-byte shard after the member before it"},
      {head + R"(,"members":[["s0.cls",512,1]]})",
       "malformed shard index: member 0 ('s0.cls'): a cls member, and only one, has its label text"},
      {head + R"(,"members":[["s0.cls",512,1,"12"]]})",
       "malformed shard index: member 0 ('s0.cls')'s label text is not a string of its 1 bytes"},
      {head + R"(,"members":[["s0.jpg",700,10]]})",
       "malformed shard index: member 0 ('s0.jpg') at offset 700: not at a 512-byte block"},
      {R"({"format":"conveyor tar index","version":[[[[1]]]]})",
       "malformed shard index: version of type array; this conveyor reads version 1"},
      // What the members say is the index's word.
      {head + R"(,"members":[["s0.txt",512,10]]})",
       "sample has no image member (jpg, jpeg, png, webp, tif, tiff, bmp, ppm or pgm); its members: s0.txt "
       "(as http://h/s.tar.index.json lists it)"},
  };
  for (const auto& [index, message] : cases) {
    auto store = std::make_shared<FakeStore>();
    store->objects["http://h/s.tar"] = shard;
    store->objects["http://h/s.tar.index.json"] = index;
    try {
      const TarShardSource source({"http://h/s.tar"}, std::make_shared<RemoteAccess>(access(store)));
      ADD_FAILURE() << "expected a read error for " << index;
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), ErrorKind::kRead);
      EXPECT_EQ(e.key(), message.starts_with("malformed") ? "http://h/s.tar.index.json" : "http://h/s.tar:s0");
      EXPECT_EQ(e.cause(), message) << index;
    }
  }
}

}  // namespace
}  // namespace conveyor
