#include "conveyor/io/http_store.h"

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <functional>
#include <future>
#include <initializer_list>
#include <iterator>
#include <map>
#include <mutex>
#include <optional>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "conveyor/core/cancellation.h"
#include "conveyor/core/cpu_time.h"
#include "conveyor/core/error.h"
#include "conveyor/io/testing/http_test_server.h"

namespace conveyor {
namespace {

using detail::HttpTestConnection;
using detail::HttpTestRequest;
using detail::HttpTestServer;
using Kind = FetchFailure::Kind;

std::string text(const std::vector<uint8_t>& bytes) { return {bytes.begin(), bytes.end()}; }

// An environment of `variables` only. The local credential endpoints get a
// timeout no loaded machine reaches (the SDKs' variable).
GetEnv env_of(std::map<std::string, std::string> variables) {
  variables.emplace("AWS_METADATA_SERVICE_TIMEOUT", "60");
  return [variables](const std::string& name) -> std::optional<std::string> {
    const auto it = variables.find(name);
    return it == variables.end() ? std::nullopt : std::optional(it->second);
  };
}

// The object every "file" request gets: 1000 bytes, all different mod 251.
std::string object() {
  std::string data(1000, '\0');
  for (size_t i = 0; i < data.size(); ++i) data[i] = static_cast<char>(i % 251);
  return data;
}

// Serves object() at any path, honouring "Range: bytes=a-b" (unless told not
// to), with keep-alive.
HttpTestServer::Handler file_handler(bool ranges = true) {
  return [ranges](const HttpTestRequest& request, HttpTestConnection& connection) {
    const std::string data = object();
    auto range = request.headers.find("range");
    if (ranges && range != request.headers.end()) {
      const size_t first = std::stoul(range->second.substr(6));
      const size_t last = std::stoul(range->second.substr(range->second.find('-') + 1));
      return connection.send(HttpTestServer::reply(206, "Partial Content", data.substr(first, last - first + 1)));
    }
    if (request.method == "HEAD") {
      return connection.send("HTTP/1.1 200 OK\r\nContent-Length: " + std::to_string(data.size()) + "\r\n\r\n");
    }
    return connection.send(HttpTestServer::reply(200, "OK", data));
  };
}

FetchFailure failure_of(const HttpStore& store, const std::string& url, uint64_t offset = 0, int64_t size = -1) {
  try {
    store.read(url, offset, size);
  } catch (const FetchError& e) {
    return e.failure();
  }
  ADD_FAILURE() << "no FetchError for " << url;
  return {};
}

TEST(HttpStoreTest, WholeAndRangedReadsAndSizesAreTheServersBytes) {
  HttpTestServer server(file_handler());
  HttpStore store;
  EXPECT_EQ(text(store.read(server.url("/a.jpg"), 0, -1)), object());
  EXPECT_EQ(text(store.read(server.url("/a.jpg"), 100, 50)), object().substr(100, 50));
  EXPECT_EQ(store.size(server.url("/a.jpg")), 1000u);
  const std::vector<HttpTestRequest> requests = server.requests();
  ASSERT_EQ(requests.size(), 3u);
  EXPECT_EQ(requests[0].headers.count("range"), 0u);
  EXPECT_EQ(requests[1].headers.at("range"), "bytes=100-149");
  EXPECT_EQ(requests[2].method, "HEAD");
  // Keep-alive: one connection for the three.
  EXPECT_EQ(server.connections(), 1);
  EXPECT_EQ(store.counters().connections, 1);
  EXPECT_EQ(store.counters().requests, 3);
}

TEST(HttpStoreTest, AServerThatIgnoresTheRangeIsSliced) {
  HttpTestServer server(file_handler(/*ranges=*/false));
  HttpStore store;
  EXPECT_EQ(text(store.read(server.url("/a"), 990, 20)), object().substr(990));
}

TEST(HttpStoreTest, HeadersAreSentWithEveryRequest) {
  HttpTestServer server(file_handler());
  HttpStoreOptions options;
  options.headers = {{"Authorization", "Bearer t0ken"}};
  HttpStore store(options);
  store.read(server.url("/a"), 0, 10);
  EXPECT_EQ(server.requests().at(0).headers.at("authorization"), "Bearer t0ken");
  options.headers = {{"Bad\r\nName", "x"}};
  EXPECT_THROW(HttpStore{options}, Error);
}

TEST(HttpStoreTest, ErrorStatusesCarryTheirReasonAndRetryAfter) {
  HttpTestServer server([](const HttpTestRequest& request, HttpTestConnection& connection) {
    if (request.target == "/missing") return connection.send(HttpTestServer::reply(404, "Not Found", "no"));
    if (request.target == "/busy") {
      return connection.send(HttpTestServer::reply(429, "Too Many Requests", "", "Retry-After: 3\r\n"));
    }
    return connection.send(HttpTestServer::reply(503, "Service Unavailable", ""));
  });
  HttpStore store;
  const FetchFailure missing = failure_of(store, server.url("/missing"));
  EXPECT_EQ(missing.describe(), "HTTP 404 Not Found");
  EXPECT_FALSE(is_transient(missing));
  const FetchFailure busy = failure_of(store, server.url("/busy"));
  EXPECT_EQ(busy.describe(), "HTTP 429 Too Many Requests");
  EXPECT_EQ(busy.retry_after, 3.0);
  EXPECT_TRUE(is_transient(busy));
  EXPECT_EQ(failure_of(store, server.url("/down")).describe(), "HTTP 503 Service Unavailable");
}

TEST(HttpStoreTest, ATruncatedBodyIsATransientConnectionFailure) {
  HttpTestServer server([](const HttpTestRequest&, HttpTestConnection& connection) {
    connection.send("HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\nonly this");
    return false;  // Hangs up 91 bytes short.
  });
  HttpStore store;
  const FetchFailure failure = failure_of(store, server.url("/a"));
  EXPECT_EQ(failure.kind, Kind::kConnection);
  EXPECT_TRUE(is_transient(failure));
}

TEST(HttpStoreTest, ADeclaredLengthPastTheCapIsRefusedBeforeAnyBody) {
  HttpTestServer server([](const HttpTestRequest&, HttpTestConnection& connection) {
    connection.send("HTTP/1.1 200 OK\r\nContent-Length: 1000000000000000\r\n\r\nJFIF");
    connection.wait_for_hang_up();
    return false;
  });
  HttpStore store;
  const FetchFailure failure = failure_of(store, server.url("/a"));
  EXPECT_EQ(failure.describe(),
            "too large: Content-Length: 1000000000000000, more than the 2147483648 bytes a read may return");
  EXPECT_FALSE(is_transient(failure));
}

// A reply of `status_line` whose chunked body never ends: 64 KiB chunks
// until the client hangs up, counted in `sent`.
HttpTestServer::Handler endless_chunked_body(std::string status_line, std::atomic<int64_t>& sent) {
  return [status_line, &sent](const HttpTestRequest&, HttpTestConnection& connection) {
    connection.send(status_line + "\r\nTransfer-Encoding: chunked\r\n\r\n");
    const std::string chunk = "10000\r\n" + std::string(0x10000, 'x') + "\r\n";
    while (connection.send(chunk)) sent += 0x10000;
    return false;
  };
}

TEST(HttpStoreTest, AnEndlessChunkedBodyIsReadNoFurtherThanTheCap) {
  std::atomic<int64_t> sent{0};
  HttpTestServer server(endless_chunked_body("HTTP/1.1 200 OK", sent));
  HttpStoreOptions options;
  options.max_read_bytes = 1 << 20;
  HttpStore store(options);
  EXPECT_EQ(failure_of(store, server.url("/a")).describe(),
            "too large: a body of no declared length, more than the 1048576 bytes a read may return");
  server.wait_for_hang_ups(1);
  EXPECT_LT(sent.load(), int64_t{64} << 20);  // The rest sits in socket buffers at most.
}

TEST(HttpStoreTest, AnErrorReplysEndlessBodyEndsAtItsCapWithItsStatus) {
  // Kept at 64 KiB, it was read on for ever: no failure, a core busy.
  std::atomic<int64_t> sent{0};
  HttpTestServer server(endless_chunked_body("HTTP/1.1 404 Not Found", sent));
  HttpStore store;
  const FetchFailure failure = failure_of(store, server.url("/a"));
  EXPECT_EQ(failure.describe(), "HTTP 404 Not Found");
  EXPECT_FALSE(is_transient(failure));
  server.wait_for_hang_ups(1);
  EXPECT_LT(sent.load(), int64_t{64} << 20);  // The rest sits in socket buffers at most.
}

TEST(HttpStoreTest, ARepliesFaultsAreNamedAsTheServersNotTheUrls) {
  HttpTestServer server([](const HttpTestRequest& request, HttpTestConnection& connection) {
    if (request.target == "/garbage") connection.send("garbage\r\n\r\n");
    if (request.target == "/file") connection.send("HTTP/1.1 302 Found\r\nLocation: file:///etc/passwd\r\n\r\n");
    if (request.target == "/big") {
      connection.send("HTTP/1.1 200 OK\r\nX-Big: " + std::string(200 << 10, 'x') + "\r\nContent-Length: 0\r\n\r\n");
    }
    return false;
  });
  HttpStore store;
  const FetchFailure garbage = failure_of(store, server.url("/garbage"));
  EXPECT_EQ(garbage.kind, Kind::kOther);
  EXPECT_EQ(garbage.describe().rfind("unusable reply: ", 0), 0u) << garbage.describe();
  const FetchFailure redirect = failure_of(store, server.url("/file"));
  EXPECT_EQ(redirect.describe().rfind("unusable reply: ", 0), 0u) << redirect.describe();
  const FetchFailure big = failure_of(store, server.url("/big"));
  EXPECT_EQ(big.describe().rfind("a header line of the reply past libcurl's 100 KiB, or ", 0), 0u) << big.describe();
}

TEST(HttpStoreTest, AWholeObjectStoredGzippedIsReadDecoded) {
  // As S3 serves an object uploaded with Content-Encoding: gzip, whatever
  // the request asks for.
  const std::string gzipped(
      "\x1f\x8b\x08\x00\x00\x00\x00\x00\x02\x03\x2b\xc9\x48\x55\x48\xaa\x2c\x49\x2d\x56\xc8\x4f\x53\x28\x01\x72"
      "\xf2\x93\xb2\x52\x93\x4b\x00\x7e\x8d\xc7\xe5\x17\x00\x00\x00",
      41);
  HttpTestServer server([&gzipped](const HttpTestRequest&, HttpTestConnection& connection) {
    return connection.send(HttpTestServer::reply(200, "OK", gzipped, "Content-Encoding: gzip\r\n"));
  });
  HttpStore store;
  EXPECT_EQ(text(store.read(server.url("/a.txt"), 0, -1)), "the bytes of the object");
  EXPECT_EQ(server.requests().at(0).headers.at("accept-encoding"), "identity");
}

TEST(HttpStoreTest, APartialReplyOfAnotherRangeThanAskedIsRefused) {
  // A faulty server or proxy: the range one byte on, of the length asked for.
  HttpTestServer server([](const HttpTestRequest& request, HttpTestConnection& connection) {
    const std::string range = request.headers.at("range");  // "bytes=a-b"
    const size_t first = std::stoul(range.substr(6)) + (request.target == "/shifted" ? 1 : 0);
    const size_t last = std::stoul(range.substr(range.find('-') + 1)) + (request.target == "/shifted" ? 1 : 0) +
                        (request.target == "/longer" ? 10 : 0);
    return connection.send(HttpTestServer::reply(
        206, "Partial Content", object().substr(first, last - first + 1),
        "Content-Range: bytes " + std::to_string(first) + "-" + std::to_string(last) + "/1000\r\n"));
  });
  HttpStore store;
  EXPECT_EQ(text(store.read(server.url("/right"), 100, 50)), object().substr(100, 50));
  // More than asked for, from the first byte asked for: the bytes asked for.
  EXPECT_EQ(text(store.read(server.url("/longer"), 100, 50)), object().substr(100, 50));
  const FetchFailure failure = failure_of(store, server.url("/shifted"), 100, 50);
  EXPECT_EQ(failure.describe(), "asked for bytes 100-149, the server answered with bytes 101-150 (Content-Range)");
  EXPECT_FALSE(is_transient(failure));
}

TEST(HttpStoreTest, TheSizeOfAUrlThatRefusesAHeadIsTheTotalOfAGetOfItsFirstByte) {
  // A URL presigned for GET (S3 signs the method) answers a HEAD with 403.
  HttpTestServer server([](const HttpTestRequest& request, HttpTestConnection& connection) {
    if (request.method == "HEAD" || request.target == "/forbidden") {
      return connection.send("HTTP/1.1 403 Forbidden\r\nContent-Length: 0\r\n\r\n");
    }
    if (request.target == "/whole") {  // Ignores the range; its ETag after its Content-Length.
      return connection.send(HttpTestServer::reply(200, "OK", object(), "ETag: \"w\"\r\n"));
    }
    if (request.target == "/empty") {
      return connection.send(HttpTestServer::reply(416, "Range Not Satisfiable", "", "Content-Range: bytes */0\r\n"));
    }
    return connection.send(
        HttpTestServer::reply(206, "Partial Content", object().substr(0, 1),
                              "ETag: \"e\"\r\nContent-Range: bytes 0-0/" + std::to_string(object().size()) + "\r\n"));
  });
  HttpStore store;
  const RemoteObjectInfo ranged = store.stat(server.url("/shard.tar?X-Amz-Signature=abc"));
  EXPECT_EQ(ranged.size, 1000u);
  EXPECT_EQ(ranged.version, "\"e\"");
  std::vector<HttpTestRequest> requests = server.requests();
  ASSERT_EQ(requests.size(), 2u);
  EXPECT_EQ(requests[1].method, "GET");
  EXPECT_EQ(requests[1].headers.at("range"), "bytes=0-0");
  const RemoteObjectInfo whole = store.stat(server.url("/whole"));
  EXPECT_EQ(whole.size, 1000u);
  EXPECT_EQ(whole.version, "\"w\"");
  EXPECT_EQ(store.stat(server.url("/empty")).size, 0u);
  try {
    store.stat(server.url("/forbidden"));
    ADD_FAILURE() << "no FetchError";
  } catch (const FetchError& e) {
    EXPECT_EQ(e.failure().describe(), "HTTP 403 Forbidden");
  }
}

// Headers, then a body that never comes, until the client hangs up.
HttpTestServer::Handler body_that_never_comes() {
  return [](const HttpTestRequest&, HttpTestConnection& connection) {
    connection.send("HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\nabc");
    connection.wait_for_hang_up();
    return false;
  };
}

// A store that waits a day for a stalled body: only a cancellation ends it.
HttpStoreOptions without_read_timeout() {
  HttpStoreOptions options;
  options.read_timeout = 24 * 3600;
  return options;
}

TEST(HttpStoreTest, ACancelledReadEndsAndItsConnectionIsClosed) {
  // Headers, then a body that never comes: only the cancellation ends the read.
  HttpTestServer server(body_that_never_comes());
  HttpStore store(without_read_timeout());
  Cancellation cancellation;
  std::vector<std::thread> readers;
  std::atomic<int> cancelled{0};
  for (int i = 0; i < 4; ++i) {
    readers.emplace_back([&] {
      ScopedCancellation scope(cancellation);
      if (failure_of(store, server.url("/a")).kind == Kind::kCancelled) ++cancelled;
    });
  }
  server.wait_for_requests(4);
  cancellation.cancel();
  for (std::thread& reader : readers) reader.join();
  EXPECT_EQ(cancelled.load(), 4);
  server.wait_for_hang_ups(4);  // The store dropped each transfer's connection.
  // The store still works.
  HttpTestServer healthy(file_handler());
  EXPECT_EQ(text(store.read(healthy.url("/b"), 0, 3)), object().substr(0, 3));
}

// What one attempt of store.start_read gave its `done`, and on which thread;
// nothing when the store would not start it (or `done` never came in 20 s,
// a failure).
struct Started {
  RemoteAttempt attempt;
  std::thread::id thread;
};
std::optional<Started> started_read(const HttpStore& store, const std::string& url, uint64_t offset = 0,
                                    int64_t size = -1, const Cancellation* cancellation = nullptr) {
  auto promise = std::make_shared<std::promise<Started>>();
  std::future<Started> future = promise->get_future();
  if (!store.start_read(url, offset, size, cancellation, [promise](RemoteAttempt attempt) {
        promise->set_value({std::move(attempt), std::this_thread::get_id()});
      })) {
    return std::nullopt;
  }
  if (future.wait_for(std::chrono::seconds(20)) != std::future_status::ready) {
    ADD_FAILURE() << "no answer to the started read of " << url;
    return std::nullopt;
  }
  return future.get();
}

TEST(HttpStoreTest, AStartedReadGivesItsBytesOrFailureOnTheStoresThreadWithNoThreadWaiting) {
  HttpTestServer server(file_handler());
  HttpStore store;
  std::optional<Started> whole = started_read(store, server.url("/a.jpg"));
  ASSERT_TRUE(whole.has_value());
  ASSERT_TRUE(whole->attempt.data.has_value());
  EXPECT_EQ(text(*whole->attempt.data), object());
  EXPECT_FALSE(whole->attempt.failure.has_value());
  EXPECT_NE(whole->thread, std::this_thread::get_id());
  std::optional<Started> ranged = started_read(store, server.url("/a.jpg"), 100, 50);
  ASSERT_TRUE(ranged.has_value() && ranged->attempt.data.has_value());
  EXPECT_EQ(text(*ranged->attempt.data), object().substr(100, 50));
  EXPECT_EQ(ranged->thread, whole->thread);  // The event loop's.
  EXPECT_EQ(server.requests().at(1).headers.at("range"), "bytes=100-149");

  HttpTestServer missing([](const HttpTestRequest&, HttpTestConnection& connection) {
    return connection.send(HttpTestServer::reply(404, "Not Found", ""));
  });
  std::optional<Started> failed = started_read(store, missing.url("/gone"));
  ASSERT_TRUE(failed.has_value() && failed->attempt.failure.has_value());
  EXPECT_FALSE(failed->attempt.data.has_value());
  EXPECT_EQ(failed->attempt.failure->describe(), "HTTP 404 Not Found");

  // What read() answers without a request, it answers: none started.
  EXPECT_FALSE(started_read(store, server.url("/a.jpg"), 0, 0).has_value());
  EXPECT_FALSE(started_read(store, "ftp://host/a").has_value());
  HttpStoreOptions small;
  small.max_read_bytes = 10;
  EXPECT_FALSE(started_read(HttpStore(small), server.url("/a.jpg"), 0, 11).has_value());
  EXPECT_EQ(server.requests().size(), 2u);
}

TEST(HttpStoreTest, CancellingStartedReadsEndsThemAsCancelledAndClosesTheirConnections) {
  HttpTestServer server(body_that_never_comes());
  HttpStore store(without_read_timeout());
  Cancellation cancellation;
  std::vector<std::future<std::optional<Started>>> reads;
  for (int i = 0; i < 4; ++i) {
    reads.push_back(
        std::async(std::launch::async, [&] { return started_read(store, server.url("/a"), 0, -1, &cancellation); }));
  }
  server.wait_for_requests(4);
  cancellation.cancel();
  for (auto& read : reads) {
    const std::optional<Started> started = read.get();
    ASSERT_TRUE(started.has_value() && started->attempt.failure.has_value());
    EXPECT_EQ(started->attempt.failure->kind, Kind::kCancelled);
  }
  server.wait_for_hang_ups(4);
  // Started under a cancelled Cancellation: cancelled without a request.
  const std::optional<Started> late = started_read(store, server.url("/b"), 0, -1, &cancellation);
  ASSERT_TRUE(late.has_value() && late->attempt.failure.has_value());
  EXPECT_EQ(late->attempt.failure->kind, Kind::kCancelled);
  EXPECT_EQ(server.requests().size(), 4u);
}

TEST(HttpStoreTest, AStoreClosedWithStartedReadsInFlightEndsEachAsCancelled) {
  HttpTestServer server([](const HttpTestRequest&, HttpTestConnection& connection) {
    connection.wait_for_hang_up();
    return false;
  });
  std::vector<std::future<RemoteAttempt>> attempts;
  {
    HttpStore store;
    for (int i = 0; i < 3; ++i) {
      auto promise = std::make_shared<std::promise<RemoteAttempt>>();
      attempts.push_back(promise->get_future());
      ASSERT_TRUE(store.start_read(server.url("/a"), 0, -1, nullptr,
                                   [promise](RemoteAttempt attempt) { promise->set_value(std::move(attempt)); }));
    }
    server.wait_for_requests(3);
  }
  for (auto& attempt : attempts) {
    ASSERT_EQ(attempt.wait_for(std::chrono::seconds(0)), std::future_status::ready);
    const RemoteAttempt ended = attempt.get();
    ASSERT_TRUE(ended.failure.has_value());
    EXPECT_EQ(ended.failure->describe(), "cancelled: the store was closed");
  }
}

TEST(HttpStoreTest, TrickledHeadersEndAsATimeout) {
  HttpTestServer server([](const HttpTestRequest&, HttpTestConnection& connection) {
    connection.send("HTTP/1.1 200 OK\r\n");
    while (connection.send("X")) std::this_thread::sleep_for(std::chrono::milliseconds(100));
    return false;
  });
  HttpStoreOptions options;
  options.read_timeout = 1;
  HttpStore store(options);
  const FetchFailure failure = failure_of(store, server.url("/a"));
  EXPECT_EQ(failure.kind, Kind::kTimeout);
  EXPECT_TRUE(is_transient(failure));
}

TEST(HttpStoreTest, ARefusedConnectionIsATransientConnectionFailure) {
  int port;
  {
    HttpTestServer closed(file_handler());
    port = closed.port();
  }
  HttpStore store;
  const FetchFailure failure = failure_of(store, "http://127.0.0.1:" + std::to_string(port) + "/a");
  EXPECT_EQ(failure.kind, Kind::kConnection);
}

TEST(HttpStoreTest, OptionsOutOfRangeAreConfigErrorsNamingTheOption) {
  auto error_of = [](const std::function<void(HttpStoreOptions&)>& change) -> std::string {
    HttpStoreOptions options;
    change(options);
    try {
      options.validate();
    } catch (const Error& e) {
      return e.kind() == ErrorKind::kConfig ? e.what() : "not a config error";
    }
    return "valid";
  };
  EXPECT_EQ(error_of([](HttpStoreOptions&) {}), "valid");
  EXPECT_EQ(error_of([](HttpStoreOptions& o) { o.first_slow_connect = 0; }),
            "HttpStore: first_slow_connect must be a finite number of seconds > 0");
  EXPECT_EQ(error_of([](HttpStoreOptions& o) { o.connect_timeout = -1; }),
            "HttpStore: connect_timeout must be a finite number of seconds > 0");
  EXPECT_EQ(error_of([](HttpStoreOptions& o) { o.read_timeout = 0.5; }),
            "HttpStore: read_timeout must be a finite number of seconds >= 1");
}

TEST(HttpStoreTest, OtherSchemesAndS3WithoutSettingsAreInvalid) {
  HttpStore store;
  EXPECT_EQ(failure_of(store, "ftp://host/a").kind, Kind::kInvalid);
  EXPECT_EQ(failure_of(store, "s3://bucket/a").describe(),
            "invalid URL or request: this store has no S3 settings for s3:// URLs");
}

TEST(HttpStoreTest, ManyThreadsReadingAtOnceGetTheirOwnBytes) {
  HttpTestServer server(file_handler());
  HttpStoreOptions options;
  options.initial_connections_per_host = 2;
  HttpStore store(options);
  std::vector<std::thread> readers;
  std::atomic<int> wrong{0};
  for (int i = 0; i < 16; ++i) {
    readers.emplace_back([&, i] {
      for (int j = 0; j < 20; ++j) {
        const uint64_t offset = static_cast<uint64_t>((i * 20 + j) % 900);
        if (text(store.read(server.url("/f"), offset, 100)) != object().substr(offset, 100)) ++wrong;
      }
    });
  }
  for (std::thread& reader : readers) reader.join();
  EXPECT_EQ(wrong.load(), 0);
  EXPECT_EQ(store.counters().requests, 320);
  // Connections were reused (a cut of the limit on a loaded machine may
  // change how many were opened, never that most reads reused one).
  EXPECT_LT(store.counters().connections, 320);
}

TEST(HttpStoreTest, ANewHostTakesMoreConnectionsBeforeItsFirstAnswer) {
  // A far store: no answer comes until every read's request has arrived
  // (or, for the test to end when the limit waits for answers to grow, 20 s
  // have passed; then every request is answered at once). Each connection
  // the host takes at once raises the limit from its 4, before any answer.
  constexpr int kReads = 32;
  std::mutex mu;
  std::condition_variable arrived_cv;
  int arrived = 0;
  int arrived_before_first_answer = -1;
  HttpTestServer server([&](const HttpTestRequest&, HttpTestConnection& connection) {
    {
      std::unique_lock lock(mu);
      ++arrived;
      arrived_cv.notify_all();
      arrived_cv.wait_for(lock, std::chrono::seconds(20),
                          [&] { return arrived >= kReads || arrived_before_first_answer >= 0; });
      if (arrived_before_first_answer < 0) arrived_before_first_answer = arrived;
      arrived_cv.notify_all();
    }
    return connection.send(HttpTestServer::reply(200, "OK", "x"));
  });
  HttpStore store;
  ASSERT_EQ(store.options().initial_connections_per_host, 4);
  std::vector<std::thread> readers;
  std::atomic<int> read{0};
  for (int i = 0; i < kReads; ++i) {
    readers.emplace_back([&] {
      if (text(store.read(server.url("/a"), 0, -1)) == "x") ++read;
    });
  }
  for (std::thread& reader : readers) reader.join();
  EXPECT_EQ(read.load(), kReads);
  std::lock_guard lock(mu);
  EXPECT_EQ(arrived_before_first_answer, kReads);
  EXPECT_GE(store.counters().connections_per_host, kReads);
}

TEST(HttpStoreTest, TheConnectionsOfABurstOfReadsServeTheNextBurst) {
  // Two bursts of reads, each answered once all its requests have arrived
  // (or after 20 s, for the test to end if they never do): the second reuses
  // the first's connections, though no read was in flight between them.
  constexpr int kReads = 32;
  std::mutex mu;
  std::condition_variable arrived_cv;
  int arrived = 0;
  HttpTestServer server([&](const HttpTestRequest&, HttpTestConnection& connection) {
    {
      std::unique_lock lock(mu);
      const int burst_end = (arrived / kReads + 1) * kReads;
      ++arrived;
      arrived_cv.notify_all();
      arrived_cv.wait_for(lock, std::chrono::seconds(20), [&] { return arrived >= burst_end; });
    }
    return connection.send(HttpTestServer::reply(200, "OK", "x"));
  });
  HttpStore store;
  std::atomic<int> read{0};
  for (int burst = 0; burst < 2; ++burst) {
    std::vector<std::thread> readers;
    for (int i = 0; i < kReads; ++i) {
      readers.emplace_back([&] {
        if (text(store.read(server.url("/a"), 0, -1)) == "x") ++read;
      });
    }
    for (std::thread& reader : readers) reader.join();
  }
  EXPECT_EQ(read.load(), 2 * kReads);
  EXPECT_EQ(server.connections(), kReads);
  EXPECT_EQ(store.counters().connections, kReads);
}

TEST(HttpStoreTest, AReadWaitingForASlotUnderItsHostsLimitCountsThatWaitAsQueueWait) {
  // One connection: the second read waits for the first, which the server
  // answers only once the store says a request is queued (or after 20 s,
  // for the test to end if it never does).
  std::mutex mu;
  std::condition_variable answer_cv;
  bool answer = false;
  HttpTestServer server([&](const HttpTestRequest&, HttpTestConnection& connection) {
    {
      std::unique_lock lock(mu);
      answer_cv.wait_for(lock, std::chrono::seconds(20), [&] { return answer; });
    }
    return connection.send(HttpTestServer::reply(200, "OK", "x"));
  });
  HttpStoreOptions options;
  options.initial_connections_per_host = 1;
  options.max_connections_per_host = 1;
  HttpStore store(options);
  int64_t first_wait = -1, second_wait = -1;
  std::thread first([&] {
    EXPECT_EQ(text(store.read(server.url("/a"), 0, -1)), "x");
    first_wait = thread_queue_wait_ns();
  });
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  while (server.requests().empty() && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  std::thread second([&] {
    EXPECT_EQ(text(store.read(server.url("/b"), 0, -1)), "x");
    second_wait = thread_queue_wait_ns();
  });
  while (store.counters().queued == 0 && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  EXPECT_EQ(store.counters().queued, 1);
  {
    std::lock_guard lock(mu);
    answer = true;
  }
  answer_cv.notify_all();
  first.join();
  second.join();
  EXPECT_EQ(first_wait, 0);
  EXPECT_GT(second_wait, 0);
  EXPECT_EQ(store.counters().queued, 0);
}

// A server whose listen queue is full: a listening socket with a backlog of
// 1, where two connections that wait unaccepted (fill()) make the kernel
// drop the SYNs of the next connects (whatever tcp_syncookies says). Its
// reads wait at most 20 s (for a test to end if nothing comes).
class FullListenQueue {
 public:
  FullListenQueue(const FullListenQueue&) = delete;
  FullListenQueue& operator=(const FullListenQueue&) = delete;
  FullListenQueue() {
    address_.sin_family = AF_INET;
    address_.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t length = sizeof(address_);
    if (::bind(listener_, reinterpret_cast<sockaddr*>(&address_), sizeof(address_)) != 0 ||
        ::listen(listener_, 1) != 0 || ::getsockname(listener_, reinterpret_cast<sockaddr*>(&address_), &length) != 0) {
      ADD_FAILURE() << "no listening socket";
    }
  }
  ~FullListenQueue() {
    drain();
    ::close(listener_);
  }
  std::string url(const std::string& path) const {
    return "http://127.0.0.1:" + std::to_string(ntohs(address_.sin_port)) + path;
  }
  /// Two connections wait in the queue (a backlog of 1 holds 2): the next
  /// SYNs are dropped.
  void fill() {
    drain();
    for (int& filler : fillers_) {
      filler = ::socket(AF_INET, SOCK_STREAM, 0);
      EXPECT_EQ(::connect(filler, reinterpret_cast<const sockaddr*>(&address_), sizeof(address_)), 0);
    }
  }
  /// The waiting connections go: room for the next connects.
  void drain() {
    for (int& filler : fillers_) {
      if (filler < 0) continue;
      if (readable(listener_)) ::close(::accept(listener_, nullptr, nullptr));
      ::close(filler);
      filler = -1;
    }
  }
  /// The next connection, once its request has arrived; -1 if none came.
  int accept_request() const {
    if (!readable(listener_)) return -1;
    const int connection = ::accept(listener_, nullptr, nullptr);
    read_request(connection);
    return connection;
  }
  /// Answers `body` to every connection that sends a request until `done`
  /// (or 60 s, for a test to end if it never comes). Not only to the first:
  /// a connect the store gave up on may have got through on its resent SYN
  /// just before the store closed it, and then waits in the queue first.
  void answer_requests_until(const std::atomic<bool>& done, const std::string& body) const {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
    while (!done.load() && std::chrono::steady_clock::now() < deadline) {
      pollfd p{listener_, POLLIN, 0};
      if (::poll(&p, 1, 10) != 1) continue;
      const int connection = ::accept(listener_, nullptr, nullptr);
      if (connection < 0) continue;
      if (read_request(connection)) {
        answer(connection, body);
      } else {
        ::close(connection);
      }
    }
  }
  /// Answers `body` on `connection` and closes it.
  static void answer(int connection, const std::string& body) {
    const std::string reply =
        "HTTP/1.1 200 OK\r\nContent-Length: " + std::to_string(body.size()) + "\r\nConnection: close\r\n\r\n" + body;
    EXPECT_EQ(::send(connection, reply.data(), reply.size(), MSG_NOSIGNAL), static_cast<ssize_t>(reply.size()));
    ::close(connection);
  }

 private:
  static bool readable(int fd) {
    pollfd p{fd, POLLIN, 0};
    return ::poll(&p, 1, 20000) == 1;
  }
  // Whether a whole request came on `connection` (not an end or nothing).
  static bool read_request(int connection) {
    std::string request;
    char buffer[4096];
    while (request.find("\r\n\r\n") == std::string::npos && readable(connection)) {
      const ssize_t n = ::recv(connection, buffer, sizeof(buffer), 0);
      if (n <= 0) return false;
      request.append(buffer, static_cast<size_t>(n));
    }
    return request.find("\r\n\r\n") != std::string::npos;
  }

  int listener_ = ::socket(AF_INET, SOCK_STREAM, 0);
  int fillers_[2] = {-1, -1};
  sockaddr_in address_{};
};

// The bytes of `url`, or why there are none.
std::string read_or_why(HttpStore& store, const std::string& url) {
  try {
    return text(store.read(url, 0, -1));
  } catch (const std::exception& e) {
    return e.what();
  }
}

// Waits up to 20 s (for a test to end if it never comes) for `store` to
// report an overload.
int64_t overloads_within_20s(const HttpStore& store) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  while (store.counters().overloaded == 0 && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return store.counters().overloaded;
}

TEST(HttpStoreTest, AConnectTheHostDidNotTakeInTimeCountsAsQueueWait) {
  // The read's SYN is dropped. After first_slow_connect (no connect to the
  // host measured yet) the store calls that an overload and connects again:
  // that second waited for the host, not for the read.
  FullListenQueue server;
  server.fill();
  HttpStore store;
  ASSERT_EQ(store.options().first_slow_connect, 1.0);
  int64_t wait = -1;
  std::string got;
  std::atomic<bool> done{false};
  std::thread reader([&] {
    got = read_or_why(store, server.url("/a"));
    wait = thread_queue_wait_ns();
    done = true;
  });
  EXPECT_GE(overloads_within_20s(store), 1);
  server.drain();
  server.answer_requests_until(done, "x");
  reader.join();
  EXPECT_EQ(got, "x");
  EXPECT_GE(wait, 1000000000);
}

TEST(HttpStoreTest, TheHostsFirstConnectionMeasuresHowLongAConnectMayTake) {
  // A first burst: one read connects (its request held unanswered), the
  // next one's SYN is dropped. The first connection's time (well under
  // 0.2 s here) sets the bound, so the dropped SYN shows as an overload
  // long before first_slow_connect's minute.
  FullListenQueue server;
  HttpStoreOptions options;
  options.first_slow_connect = 60;
  HttpStore store(options);
  std::string first, second;
  std::atomic<bool> second_done{false};
  std::thread first_reader([&] { first = read_or_why(store, server.url("/a")); });
  const int first_connection = server.accept_request();
  server.fill();
  std::thread second_reader([&] {
    second = read_or_why(store, server.url("/b"));
    second_done = true;
  });
  EXPECT_GE(overloads_within_20s(store), 1);
  // The cut limit (1) admits the second read again once the first ends.
  if (first_connection >= 0) FullListenQueue::answer(first_connection, "x");
  server.drain();
  server.answer_requests_until(second_done, "x");
  first_reader.join();
  second_reader.join();
  EXPECT_EQ(first, "x");
  EXPECT_EQ(second, "x");
}

// A reply built from `seed`: a status line (valid or not), headers with
// lengths that lie, chunk sizes that are not numbers, lines past any sane
// length, bodies cut short or longer than declared; the server then hangs up.
std::string random_reply(uint32_t seed) {
  std::mt19937 random(seed);
  auto pick = [&](std::initializer_list<std::string> options) {
    return *(options.begin() + static_cast<std::ptrdiff_t>(random() % options.size()));
  };
  std::string reply =
      pick({"HTTP/1.1 200 OK\r\n", "HTTP/1.1 206 Partial Content\r\n", "HTTP/1.1 404 Not Found\r\n", "HTTP/1.1 503\r\n",
            "HTTP/1.0 200\r\n", "HTTP/1.1 999 Odd\r\n", "HTTP/9 2\r\n", "garbage\r\n", "HTTP/1.1 200 OK\n", ""});
  const int headers = static_cast<int>(random() % 5);
  for (int i = 0; i < headers; ++i) {
    reply += pick({"Content-Length: " + std::to_string(random() % 100) + "\r\n", "Content-Length: -5\r\n",
                   "Content-Length: 99999999999999999999999\r\n", "Content-Length: x\r\n",
                   "Transfer-Encoding: chunked\r\n", "Retry-After: " + std::to_string(random() % 5) + "\r\n",
                   "Retry-After: Wed, 21 Oct 2015 07:28:00 GMT\r\n", "X-Long: " + std::string(70000, 'a') + "\r\n",
                   "Location: /elsewhere\r\n", "NoColonHere\r\n", std::string(1, '\0') + ": nul\r\n"});
  }
  if (random() % 4 != 0) reply += "\r\n";
  const int pieces = static_cast<int>(random() % 4);
  for (int i = 0; i < pieces; ++i) {
    reply += pick({std::string(random() % 200, 'b'), "5\r\nhello\r\n", "zz\r\nhello\r\n", "0\r\n\r\n",
                   "ffffffffffffffff\r\n", std::string(1, static_cast<char>(random()))});
  }
  return reply;
}

TEST(HttpStoreTest, RandomMalformedRepliesEndInBytesOrANamedFailure) {
  // Under ASan/UBSan and TSan in `make test`: no reply may crash, hang or leak.
  std::atomic<uint32_t> seed{0};
  HttpTestServer server([&seed](const HttpTestRequest&, HttpTestConnection& connection) {
    connection.send(random_reply(seed.load()));
    return false;
  });
  HttpStoreOptions options;
  options.read_timeout = 1;
  options.max_read_bytes = 1 << 16;
  HttpStore store(options);
  int failures = 0;
  for (uint32_t i = 0; i < 300; ++i) {
    seed = i;
    try {
      const std::vector<uint8_t> bytes = store.read(server.url("/a"), i % 3 == 0 ? 10 : 0, i % 3 == 0 ? 20 : -1);
      EXPECT_LE(bytes.size(), size_t{1} << 16) << "seed " << i;
    } catch (const FetchError& e) {
      EXPECT_FALSE(e.failure().describe().empty()) << "seed " << i;
      ++failures;
    }
  }
  EXPECT_GT(failures, 100);  // Most of them are broken.
}

// A store signing s3:// requests to `server` for `region` with the AWS
// documentation's example keys.
HttpStoreOptions signed_at(const HttpTestServer& server, const std::string& region) {
  HttpStoreOptions options;
  options.s3 = resolve_s3_config({{"key", "AKIDEXAMPLE"},
                                  {"secret", "wJalrXUtnFEMIK7MDENGbPxRfiCYEXAMPLEKEY"},
                                  {"endpoint_url", server.url("")},
                                  {"region", region}},
                                 [](const std::string&) { return std::nullopt; });
  return options;
}

TEST(HttpStoreTest, S3RequestsAreSignedAndErrorsNameTheS3Code) {
  HttpTestServer server([](const HttpTestRequest& request, HttpTestConnection& connection) {
    if (request.target == "/bucket/dir/a%20b.jpg") return connection.send(HttpTestServer::reply(200, "OK", "abc"));
    return connection.send(HttpTestServer::reply(
        404, "Not Found", "<?xml version=\"1.0\"?><Error><Code>NoSuchKey</Code><Message>gone</Message></Error>"));
  });
  HttpStoreOptions options;
  options.s3 = resolve_s3_config({{"key", "AKIDEXAMPLE"},
                                  {"secret", "wJalrXUtnFEMIK7MDENGbPxRfiCYEXAMPLEKEY"},
                                  {"token", "SESSIONTOKEN"},
                                  {"endpoint_url", server.url("")},
                                  {"region", "eu-west-1"}},
                                 [](const std::string&) { return std::nullopt; });
  HttpStore store(options);
  EXPECT_EQ(text(store.read("s3://bucket/dir/a b.jpg", 0, -1)), "abc");
  // "." and ".." are part of an S3 key: sent as they are, never squashed.
  failure_of(store, "s3://bucket/a/../../other/key");
  EXPECT_EQ(server.requests().back().target, "/bucket/a/../../other/key");
  const HttpTestRequest request = server.requests().at(0);
  ASSERT_EQ(request.target, "/bucket/dir/a%20b.jpg");
  const std::string& authorization = request.headers.at("authorization");
  EXPECT_EQ(authorization.rfind("AWS4-HMAC-SHA256 Credential=AKIDEXAMPLE/", 0), 0u) << authorization;
  EXPECT_NE(authorization.find("/eu-west-1/s3/aws4_request"), std::string::npos) << authorization;
  EXPECT_NE(authorization.find("x-amz-content-sha256"), std::string::npos) << authorization;
  EXPECT_NE(authorization.find("x-amz-security-token"), std::string::npos) << authorization;
  EXPECT_EQ(request.headers.at("x-amz-security-token"), "SESSIONTOKEN");
  for (const auto& [name, value] : request.headers) {
    EXPECT_EQ(value.find("wJalrXUtnFEMIK7MDENG"), std::string::npos) << name;  // The secret never travels.
  }
  const FetchFailure missing = failure_of(store, "s3://bucket/nope");
  EXPECT_EQ(missing.describe(), "HTTP 404 Not Found (NoSuchKey)");
}

TEST(HttpStoreTest, AListingWhoseContinuationTokensComeRoundAgainEndsWithAFailure) {
  // Tokens A, B, A, B, ...: a check of the last token alone listed for ever.
  HttpTestServer server([](const HttpTestRequest& request, HttpTestConnection& connection) {
    const bool after_a = request.target.find("continuation-token=A") != std::string::npos;
    return connection.send(HttpTestServer::reply(
        200, "OK",
        std::string("<ListBucketResult><Contents><Key>k</Key><Size>1</Size></Contents><IsTruncated>true"
                    "</IsTruncated><NextContinuationToken>") +
            (after_a ? "B" : "A") + "</NextContinuationToken></ListBucketResult>"));
  });
  const HttpStoreOptions options = signed_at(server, "us-east-1");
  HttpStore store(options);
  try {
    store.list("s3://bucket/");
    ADD_FAILURE() << "no FetchError";
  } catch (const FetchError& e) {
    EXPECT_EQ(e.failure().describe(), "the listing repeats a continuation token at page 3 (a faulty server)");
  }
  EXPECT_EQ(server.requests().size(), 3u);
}

TEST(HttpStoreTest, ABucketInAnotherRegionIsLearntFromS3sReplyAndSignedForIt) {
  // As S3 answers a request signed for the wrong region: 301 (GET, HEAD) or
  // 400 (a listing), naming the bucket's region in x-amz-bucket-region.
  HttpTestServer server([](const HttpTestRequest& request, HttpTestConnection& connection) {
    const std::string& authorization = request.headers.at("authorization");
    if (request.target.rfind("/elsewhere/", 0) != 0) {
      return connection.send(
          HttpTestServer::reply(301, "Moved Permanently", "<Error><Code>PermanentRedirect</Code></Error>"));
    }
    if (authorization.find("/eu-west-1/s3/aws4_request") == std::string::npos) {
      const bool listing = request.target.find("list-type=2") != std::string::npos;
      return connection.send(HttpTestServer::reply(listing ? 400 : 301, listing ? "Bad Request" : "Moved Permanently",
                                                   "<Error><Code>AuthorizationHeaderMalformed</Code></Error>",
                                                   "x-amz-bucket-region: eu-west-1\r\n"));
    }
    if (request.target.find("list-type=2") != std::string::npos) {
      return connection.send(HttpTestServer::reply(
          200, "OK", "<ListBucketResult><Contents><Key>a</Key><Size>3</Size></Contents></ListBucketResult>"));
    }
    return connection.send(HttpTestServer::reply(200, "OK", "abc", "ETag: \"e\"\r\n"));
  });
  const HttpStoreOptions options = signed_at(server, "us-east-1");
  HttpStore store(options);
  EXPECT_EQ(text(store.read("s3://elsewhere/a", 0, -1)), "abc");
  EXPECT_EQ(server.requests().size(), 2u);  // Refused once, then signed for eu-west-1.
  // Learnt: the next requests to the bucket are signed for its region at once.
  EXPECT_EQ(store.stat("s3://elsewhere/a").size, 3u);
  EXPECT_EQ(text(store.read("s3://elsewhere/a", 1, 2)), "bc");
  const std::vector<RemoteObject> listed = store.list("s3://elsewhere/");
  ASSERT_EQ(listed.size(), 1u);
  EXPECT_EQ(listed[0].url, "s3://elsewhere/a");
  EXPECT_EQ(server.requests().size(), 5u);
  // A redirect that names no region is an error saying so, tried once.
  EXPECT_EQ(failure_of(store, "s3://moved/a").describe(),
            "HTTP 301 Moved Permanently (PermanentRedirect); the bucket is in another region than us-east-1");
  EXPECT_EQ(server.requests().size(), 6u);

  // A started read of a bucket not yet learnt ends with neither bytes nor
  // a failure (to be made anew), and the region is learnt.
  HttpStore fresh(options);
  std::optional<Started> first = started_read(fresh, "s3://elsewhere/a");
  ASSERT_TRUE(first.has_value());
  EXPECT_FALSE(first->attempt.data.has_value());
  EXPECT_FALSE(first->attempt.failure.has_value());
  std::optional<Started> second = started_read(fresh, "s3://elsewhere/a");
  ASSERT_TRUE(second.has_value() && second->attempt.data.has_value());
  EXPECT_EQ(text(*second->attempt.data), "abc");
  EXPECT_EQ(server.requests().size(), 8u);
}

TEST(HttpStoreTest, AnUnsignedS3RequestThatIsForbiddenSaysNoCredentialsWereFound) {
  HttpTestServer server([](const HttpTestRequest& request, HttpTestConnection& connection) {
    EXPECT_EQ(request.headers.count("authorization"), 0u);
    return connection.send(HttpTestServer::reply(
        403, "Forbidden", "<Error><Code>AccessDenied</Code><Message>Access Denied</Message></Error>"));
  });
  HttpStoreOptions options;
  options.s3 = resolve_s3_config({{"endpoint_url", server.url("")}}, env_of({{"AWS_EC2_METADATA_DISABLED", "true"}}));
  HttpStore store(options);
  EXPECT_EQ(failure_of(store, "s3://bucket/a").describe(),
            "HTTP 403 Forbidden (AccessDenied); the request was unsigned (credentials: none found (looked in "
            "storage_options, AWS_ACCESS_KEY_ID, ~/.aws/credentials and ~/.aws/config [default]))");
}

// A fake instance metadata service (IMDSv2) for role "trainer", whose
// credentials expire `lifetime` from now; counts the requests it answers.
struct FakeInstanceMetadata {
  std::atomic<int> requests{0};
  std::chrono::seconds lifetime{3600};
  bool session_tokens = true;  // false: IMDSv1 (the token PUT is refused with 405).
  std::string keys = R"("AccessKeyId":"ASIAROLE","SecretAccessKey":"ROLESECRETROLESECRET","Token":"ROLETOKEN")";
  HttpTestServer server{[this](const HttpTestRequest& request, HttpTestConnection& connection) {
    ++requests;
    if (request.method == "PUT" && request.target == "/latest/api/token") {
      if (!session_tokens) return connection.send(HttpTestServer::reply(405, "Method Not Allowed", ""));
      EXPECT_EQ(request.headers.at("x-aws-ec2-metadata-token-ttl-seconds"), "21600");
      return connection.send(HttpTestServer::reply(200, "OK", "SESSION"));
    }
    EXPECT_EQ(request.headers.count("x-aws-ec2-metadata-token"), session_tokens ? 1u : 0u) << request.target;
    if (request.target == "/latest/meta-data/iam/security-credentials/") {
      return connection.send(HttpTestServer::reply(200, "OK", "trainer"));
    }
    if (request.target == "/latest/meta-data/iam/security-credentials/trainer") {
      const std::time_t expires = std::chrono::system_clock::to_time_t(std::chrono::system_clock::now() + lifetime);
      char when[32];
      std::strftime(when, sizeof when, "%Y-%m-%dT%H:%M:%SZ", std::gmtime(&expires));
      return connection.send(
          HttpTestServer::reply(200, "OK", R"({"Code":"Success",)" + keys + R"(,"Expiration":")" + when + "\"}"));
    }
    return connection.send(HttpTestServer::reply(404, "Not Found", ""));
  }};
  GetEnv env() { return env_of({{"AWS_EC2_METADATA_SERVICE_ENDPOINT", server.url("")}}); }
};

// An S3 server that answers only requests signed with the role's keys.
HttpTestServer role_checking_s3() {
  return HttpTestServer([](const HttpTestRequest& request, HttpTestConnection& connection) {
    const auto authorization = request.headers.find("authorization");
    const auto token = request.headers.find("x-amz-security-token");
    if (authorization == request.headers.end() ||
        authorization->second.rfind("AWS4-HMAC-SHA256 Credential=ASIAROLE/", 0) != 0 ||
        token == request.headers.end() || token->second != "ROLETOKEN") {
      return connection.send(HttpTestServer::reply(403, "Forbidden", "<Error><Code>AccessDenied</Code></Error>"));
    }
    for (const auto& [name, value] : request.headers) {
      EXPECT_EQ(value.find("ROLESECRET"), std::string::npos) << name;  // The secret never travels.
    }
    return connection.send(HttpTestServer::reply(200, "OK", "abc"));
  });
}

// Reads s3://bucket/a whole and in part from an S3 server that accepts only
// the role's signature, with the store's S3 settings found in `variables`;
// a started read too, once the credentials are at hand (before, it is not
// started: reading them may wait).
void expect_the_roles_signature(const GetEnv& variables) {
  HttpTestServer s3 = role_checking_s3();
  HttpStoreOptions options;
  options.s3 = resolve_s3_config({{"endpoint_url", s3.url("")}}, variables);
  HttpStore store(options);
  EXPECT_FALSE(started_read(store, "s3://bucket/a").has_value());
  EXPECT_EQ(text(store.read("s3://bucket/a", 0, -1)), "abc");
  EXPECT_EQ(text(store.read("s3://bucket/a", 1, 1)), "b");
  const std::optional<Started> started = started_read(store, "s3://bucket/a", 1, 2);
  ASSERT_TRUE(started.has_value() && started->attempt.data.has_value());
  EXPECT_EQ(text(*started->attempt.data), "bc");
}

TEST(HttpStoreTest, WithoutKeysTheInstanceRolesCredentialsSignTheRequests) {
  for (const bool session_tokens : {true, false}) {
    FakeInstanceMetadata metadata;
    metadata.session_tokens = session_tokens;
    expect_the_roles_signature(metadata.env());
    EXPECT_EQ(metadata.requests.load(), 3) << "read once: token, role, credentials (IMDSv1: a refused token)";
  }
}

TEST(HttpStoreTest, WithoutKeysAContainersRoleSignsTheRequests) {
  // ECS/EKS: the endpoint in AWS_CONTAINER_CREDENTIALS_FULL_URI, with its token.
  std::atomic<int> reads{0};
  HttpTestServer container([&](const HttpTestRequest& request, HttpTestConnection& connection) {
    ++reads;
    EXPECT_EQ(request.headers.at("authorization"), "PODTOKEN");
    return connection.send(HttpTestServer::reply(
        200, "OK",
        R"({"AccessKeyId":"ASIAROLE","SecretAccessKey":"ROLESECRETROLESECRET","Token":"ROLETOKEN",)"
        R"("Expiration":"2100-01-01T00:00:00Z"})"));
  });
  expect_the_roles_signature(env_of({{"AWS_CONTAINER_CREDENTIALS_FULL_URI", container.url("/creds")},
                                     {"AWS_CONTAINER_AUTHORIZATION_TOKEN", "PODTOKEN"}}));
  EXPECT_EQ(reads.load(), 1);
}

TEST(HttpStoreTest, WithoutKeysEksWebIdentitySignsTheRequests) {
  // IRSA: the pod's token exchanged at STS (AssumeRoleWithWebIdentity) for the role's keys.
  const std::filesystem::path token =
      std::filesystem::temp_directory_path() / ("conveyor-web-identity-" + std::to_string(::getpid()));
  std::ofstream(token) << "eyJ.pod";
  std::atomic<int> exchanges{0};
  HttpTestServer sts([&](const HttpTestRequest& request, HttpTestConnection& connection) {
    ++exchanges;
    EXPECT_NE(request.body.find("&WebIdentityToken=eyJ.pod"), std::string::npos) << request.body;
    return connection.send(HttpTestServer::reply(
        200, "OK",
        "<AssumeRoleWithWebIdentityResponse><AssumeRoleWithWebIdentityResult><Credentials>"
        "<AccessKeyId>ASIAROLE</AccessKeyId><SecretAccessKey>ROLESECRETROLESECRET</SecretAccessKey>"
        "<SessionToken>ROLETOKEN</SessionToken><Expiration>2100-01-01T00:00:00Z</Expiration>"
        "</Credentials></AssumeRoleWithWebIdentityResult></AssumeRoleWithWebIdentityResponse>"));
  });
  expect_the_roles_signature(env_of({{"AWS_WEB_IDENTITY_TOKEN_FILE", token.string()},
                                     {"AWS_ROLE_ARN", "arn:aws:iam::1:role/trainer"},
                                     {"AWS_ENDPOINT_URL_STS", sts.url("")}}));
  EXPECT_EQ(exchanges.load(), 1);
  std::filesystem::remove(token);
}

TEST(HttpStoreTest, WithoutKeysAProfilesCredentialProcessSignsTheRequests) {
  // A credential helper (aws-vault, a company's SSO tool) named by the profile.
  const std::filesystem::path home =
      std::filesystem::temp_directory_path() / ("conveyor-process-" + std::to_string(::getpid()));
  std::filesystem::create_directories(home / ".aws");
  const std::filesystem::path helper = home / "helper.sh";
  const std::filesystem::path runs = home / "runs";
  std::ofstream(helper) << "#!/bin/sh\necho run >> \"$1\"\n"
                           "echo '{\"Version\": 1, \"AccessKeyId\": \"ASIAROLE\", "
                           "\"SecretAccessKey\": \"ROLESECRETROLESECRET\", \"SessionToken\": \"ROLETOKEN\", "
                           "\"Expiration\": \"2100-01-01T00:00:00Z\"}'\n";
  std::filesystem::permissions(helper, std::filesystem::perms::owner_all);
  std::ofstream(home / ".aws/config") << "[default]\ncredential_process = " << helper.string() << " " << runs.string()
                                      << "\n";
  expect_the_roles_signature(env_of({{"HOME", home.string()}}));
  std::ifstream read_runs(runs);
  const std::string ran((std::istreambuf_iterator<char>(read_runs)), std::istreambuf_iterator<char>());
  EXPECT_EQ(ran, "run\n");  // Once: its credentials do not expire for decades.
  // Long-term keys (no SessionToken, no Expiration) send no session token.
  std::ofstream(helper) << "#!/bin/sh\necho '{\"Version\": 1, \"AccessKeyId\": \"AKIAKEYS\", "
                           "\"SecretAccessKey\": \"KEYSSECRET\"}'\n";
  std::atomic<int> signed_with_keys{0};
  HttpTestServer s3([&](const HttpTestRequest& request, HttpTestConnection& connection) {
    const auto authorization = request.headers.find("authorization");
    if (authorization != request.headers.end() &&
        authorization->second.rfind("AWS4-HMAC-SHA256 Credential=AKIAKEYS/", 0) == 0 &&
        request.headers.count("x-amz-security-token") == 0) {
      ++signed_with_keys;
    }
    return connection.send(HttpTestServer::reply(200, "OK", "abc"));
  });
  HttpStoreOptions options;
  options.s3 = resolve_s3_config({{"endpoint_url", s3.url("")}}, env_of({{"HOME", home.string()}}));
  EXPECT_EQ(text(HttpStore(options).read("s3://bucket/a", 0, -1)), "abc");
  EXPECT_EQ(signed_with_keys.load(), 1);
  std::filesystem::remove_all(home);
}

TEST(HttpStoreTest, AProfilesRoleIsAssumedAtStsWithItsSourceProfilesKeys) {
  // Cross-account access: the base profile's keys sign AssumeRole; the
  // role's keys sign the reads.
  const std::filesystem::path home =
      std::filesystem::temp_directory_path() / ("conveyor-assume-" + std::to_string(::getpid()));
  std::filesystem::create_directories(home / ".aws");
  std::ofstream(home / ".aws/credentials") << "[base]\naws_access_key_id = AKIABASE\n"
                                              "aws_secret_access_key = BASESECRETBASESECRET\n";
  std::ofstream(home / ".aws/config") << "[default]\nrole_arn = arn:aws:iam::2:role/ml\nsource_profile = base\n"
                                         "role_session_name = trainer\nexternal_id = ext-7\n";
  std::atomic<int> exchanges{0};
  HttpTestServer sts([&](const HttpTestRequest& request, HttpTestConnection& connection) {
    ++exchanges;
    EXPECT_EQ(request.method, "POST");
    EXPECT_EQ(request.body,
              "Action=AssumeRole&Version=2011-06-15&RoleArn=arn%3Aaws%3Aiam%3A%3A2%3Arole%2Fml"
              "&RoleSessionName=trainer&ExternalId=ext-7");
    const std::string& authorization = request.headers.at("authorization");
    EXPECT_EQ(authorization.rfind("AWS4-HMAC-SHA256 Credential=AKIABASE/", 0), 0u) << authorization;
    EXPECT_NE(authorization.find("/us-west-2/sts/aws4_request"), std::string::npos) << authorization;
    for (const auto& [name, value] : request.headers) {
      EXPECT_EQ(value.find("BASESECRET"), std::string::npos) << name;  // The secret never travels.
    }
    return connection.send(HttpTestServer::reply(
        200, "OK",
        "<AssumeRoleResponse><AssumeRoleResult><Credentials>"
        "<AccessKeyId>ASIAROLE</AccessKeyId><SecretAccessKey>ROLESECRETROLESECRET</SecretAccessKey>"
        "<SessionToken>ROLETOKEN</SessionToken><Expiration>2100-01-01T00:00:00.000Z</Expiration>"
        "</Credentials></AssumeRoleResult></AssumeRoleResponse>"));
  });
  expect_the_roles_signature(
      env_of({{"HOME", home.string()}, {"AWS_REGION", "us-west-2"}, {"AWS_ENDPOINT_URL_STS", sts.url("")}}));
  EXPECT_EQ(exchanges.load(), 1);
  std::filesystem::remove_all(home);
}

TEST(HttpStoreTest, AChainOfRolesIsAssumedInTurnFromTheInstancesRole) {
  // A profile whose role's source_profile assumes a role with the EC2
  // instance's credentials: each AssumeRole is signed with the keys the one
  // before gave.
  const std::filesystem::path home =
      std::filesystem::temp_directory_path() / ("conveyor-chain-" + std::to_string(::getpid()));
  std::filesystem::create_directories(home / ".aws");
  std::ofstream(home / ".aws/config") << "[profile ml]\nrole_arn = arn:aws:iam::2:role/ml\nsource_profile = hop\n"
                                         "[profile hop]\nrole_arn = arn:aws:iam::1:role/hop\n"
                                         "credential_source = Ec2InstanceMetadata\n";
  FakeInstanceMetadata metadata;
  metadata.keys = R"("AccessKeyId":"ASIAINSTANCE","SecretAccessKey":"INSTANCESECRET","Token":"INSTANCETOKEN")";
  std::vector<std::string> assumed;
  std::mutex assumed_mu;
  HttpTestServer sts([&](const HttpTestRequest& request, HttpTestConnection& connection) {
    // Who signed, and the role asked for; the answer is the next link's keys.
    const std::string& authorization = request.headers.at("authorization");
    const std::string signer = authorization.substr(0, authorization.find('/'));
    const std::string token =
        request.headers.count("x-amz-security-token") ? request.headers.at("x-amz-security-token") : "";
    const bool hop = request.body.find("RoleArn=arn%3Aaws%3Aiam%3A%3A1%3Arole%2Fhop") != std::string::npos;
    {
      std::lock_guard lock(assumed_mu);
      assumed.push_back((hop ? "hop by " : "ml by ") + signer + " " + token);
    }
    for (const auto& [name, value] : request.headers) {
      EXPECT_EQ(value.find("SECRET"), std::string::npos) << name;  // No secret travels.
    }
    const std::string keys = hop ? "<AccessKeyId>ASIAHOP</AccessKeyId><SecretAccessKey>HOPSECRET</SecretAccessKey>"
                                   "<SessionToken>HOPTOKEN</SessionToken>"
                                 : "<AccessKeyId>ASIAROLE</AccessKeyId><SecretAccessKey>ROLESECRETROLESECRET"
                                   "</SecretAccessKey><SessionToken>ROLETOKEN</SessionToken>";
    return connection.send(HttpTestServer::reply(200, "OK",
                                                 "<AssumeRoleResponse><AssumeRoleResult><Credentials>" + keys +
                                                     "<Expiration>2100-01-01T00:00:00Z</Expiration></Credentials>"
                                                     "</AssumeRoleResult></AssumeRoleResponse>"));
  });
  expect_the_roles_signature(env_of({{"HOME", home.string()},
                                     {"AWS_PROFILE", "ml"},
                                     {"AWS_EC2_METADATA_SERVICE_ENDPOINT", metadata.server.url("")},
                                     {"AWS_ENDPOINT_URL_STS", sts.url("")}}));
  std::lock_guard lock(assumed_mu);
  EXPECT_EQ(assumed, (std::vector<std::string>{"hop by AWS4-HMAC-SHA256 Credential=ASIAINSTANCE INSTANCETOKEN",
                                               "ml by AWS4-HMAC-SHA256 Credential=ASIAHOP HOPTOKEN"}));
  EXPECT_EQ(metadata.requests.load(), 3);
  std::filesystem::remove_all(home);
}

TEST(HttpStoreTest, WithoutKeysAnSsoProfilesRoleSignsTheRequests) {
  // A developer's `aws sso login`: the cached token exchanged at the portal for the role's keys.
  const std::filesystem::path home =
      std::filesystem::temp_directory_path() / ("conveyor-sso-" + std::to_string(::getpid()));
  std::filesystem::create_directories(home / ".aws/sso/cache");
  std::ofstream(home / ".aws/config") << "[default]\nsso_session = corp\nsso_account_id = 1\nsso_role_name = ml\n"
                                         "[sso-session corp]\nsso_start_url = https://corp.awsapps.com/start\n"
                                         "sso_region = eu-west-1\n";
  std::ofstream(home / ".aws/sso/cache/0a1b.json")
      << R"({"startUrl":"https://corp.awsapps.com/start","accessToken":"LOGIN","expiresAt":"2100-01-01T00:00:00Z"})";
  std::atomic<int> exchanges{0};
  HttpTestServer portal([&](const HttpTestRequest& request, HttpTestConnection& connection) {
    ++exchanges;
    EXPECT_EQ(request.headers.at("x-amz-sso_bearer_token"), "LOGIN");
    return connection.send(HttpTestServer::reply(
        200, "OK",
        R"({"roleCredentials":{"accessKeyId":"ASIAROLE","secretAccessKey":"ROLESECRETROLESECRET",)"
        R"("sessionToken":"ROLETOKEN","expiration":4102444800000}})"));
  });
  expect_the_roles_signature(env_of({{"HOME", home.string()}, {"AWS_ENDPOINT_URL_SSO", portal.url("")}}));
  EXPECT_EQ(exchanges.load(), 1);
  std::filesystem::remove_all(home);
}

TEST(HttpStoreTest, InstanceRoleCredentialsAboutToExpireAreReadAgainAtMostEvery30Seconds) {
  // Within the 10 minutes before expiry, as the service answered: the two
  // reads do not ask again (RefreshingRoleCredentials's tests show the re-read).
  FakeInstanceMetadata metadata;
  metadata.lifetime = std::chrono::seconds(300);
  expect_the_roles_signature(metadata.env());
  EXPECT_EQ(metadata.requests.load(), 3);
}

TEST(HttpStoreTest, OffEc2TheMetadataServiceIsAskedOnceAndARefusalSaysWhy) {
  HttpTestServer metadata([](const HttpTestRequest& request, HttpTestConnection& connection) {
    if (request.method == "PUT") return connection.send(HttpTestServer::reply(200, "OK", "SESSION"));
    return connection.send(HttpTestServer::reply(404, "Not Found", ""));  // No role.
  });
  HttpTestServer s3 = role_checking_s3();
  HttpStoreOptions options;
  options.s3 = resolve_s3_config({{"endpoint_url", s3.url("")}},
                                 env_of({{"AWS_EC2_METADATA_SERVICE_ENDPOINT", metadata.url("")}}));
  HttpStore store(options);
  // Not started before the service is asked: asking it may take a second.
  EXPECT_FALSE(started_read(store, "s3://bucket/a").has_value());
  const std::string expected =
      "HTTP 403 Forbidden (AccessDenied); the request was unsigned (credentials: none found "
      "(looked in storage_options, AWS_ACCESS_KEY_ID, ~/.aws/credentials and ~/.aws/config "
      "[default], then the instance metadata service at " +
      metadata.url("") + ": the instance's role (HTTP 404: the instance has no role)))";
  EXPECT_EQ(failure_of(store, "s3://bucket/a").describe(), expected);
  EXPECT_EQ(failure_of(store, "s3://bucket/a").describe(), expected);
  // Once it said there is no role, reads are started, unsigned.
  const std::optional<Started> started = started_read(store, "s3://bucket/a");
  ASSERT_TRUE(started.has_value() && started->attempt.failure.has_value());
  EXPECT_EQ(started->attempt.failure->describe(), expected);
  EXPECT_EQ(metadata.requests().size(), 2u);  // Token and role, once.
  ASSERT_EQ(s3.requests().size(), 3u);
  for (const HttpTestRequest& request : s3.requests()) EXPECT_EQ(request.headers.count("authorization"), 0u);
}

}  // namespace
}  // namespace conveyor
