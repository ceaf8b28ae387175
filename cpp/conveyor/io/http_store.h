#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "conveyor/io/remote.h"
#include "conveyor/io/s3.h"

namespace conveyor {

/// How an HttpStore connects and bounds its transfers.
struct HttpStoreOptions {
  /// Seconds allowed to connect (and finish TLS); past it the attempt is a
  /// (transient) timeout.
  double connect_timeout = 10.0;
  /// A transfer that receives less than kStallBytesPerSecond on average over
  /// this many seconds (a server that does not answer, or trickles) is a
  /// (transient) timeout.
  double read_timeout = 30.0;
  /// Seconds a connect to a host whose connects are not measured yet may
  /// take before it counts as an overload (the SYN was dropped: Linux sends
  /// it again after 1 s), and is started again. The host's first new
  /// connection measures them; from then on the bound is a few times their
  /// time (kSlowConnectFactor, kMinSlowConnect in http_store.cc).
  double first_slow_connect = 1.0;
  /// The most bytes one read may return (kMaxRemoteReadBytes; lower in tests).
  int64_t max_read_bytes = kMaxRemoteReadBytes;
  /// Reads in flight to one host (scheme://host:port) at most, and at most
  /// half the process's open-file limit (RLIMIT_NOFILE), so that sockets
  /// never starve the process's other files. Within it the
  /// store adapts each host's limit (ConnectionLimit, io/connection_limit.h),
  /// starting at initial_connections_per_host. Idle connections are kept
  /// open for reuse, as many as this (all hosts together), and at most an
  /// eighth of the open-file limit.
  int max_connections_per_host = 1024;
  int initial_connections_per_host = 4;
  /// Sent with every http(s):// request (not with s3://, whose requests are signed).
  std::vector<std::pair<std::string, std::string>> headers;
  /// Where s3:// URLs go; none: an s3:// URL is an invalid request.
  std::optional<S3Config> s3;
  /// Where gs:// URLs go: GCS's S3-compatible XML API with HMAC keys
  /// (gcs_config()); none: a gs:// URL is an invalid request.
  std::optional<S3Config> gcs;

  /// The average rate below which a transfer counts as stalled.
  static constexpr long kStallBytesPerSecond = 1024;

  /// Throws Error{kConfig} naming the field when a value is out of range.
  void validate() const;
};

/// What an HttpStore has done, for benchmarks and stats().
struct HttpStoreCounters {
  int64_t requests = 0;          ///< Attempts finished (any outcome).
  int64_t connections = 0;       ///< Connections opened (the rest reused one).
  int64_t bytes = 0;             ///< Body bytes received.
  int64_t overloaded = 0;        ///< Times a host's limit was halved.
  int connections_per_host = 0;  ///< The largest current per-host limit.
  int queued = 0;                ///< Requests waiting now for a slot under their host's limit.
};

/// A RemoteStore for http://, https://, s3:// and gs:// URLs on libcurl's multi
/// interface: one event-loop thread ("conveyor-http"; epoll and the
/// multi_socket API on Linux, so a wake-up costs what is ready, not every
/// transfer in flight) drives every transfer (connections, TLS sessions and
/// DNS answers reused; HTTP/2 multiplexed where the server offers it), while
/// the io threads that call read() wait without the GIL.
/// Whole reads are one GET, ranged reads a GET with `Range` (a server that
/// ignores it is sliced), size() a HEAD; http(s) redirects are followed (5
/// at most). s3:// requests are signed with AWS SigV4 (S3Config), and S3's
/// XML error code joins the status ("HTTP 404 Not Found (NoSuchKey)").
/// Bodies are bounded by max_read_bytes before they are read (the declared
/// Content-Length) and while they are (a body of no declared length).
/// A read whose thread's Cancellation (core/cancellation.h) is cancelled
/// ends at once (the wait subscribes to it; nothing polls), its transfer
/// removed by the loop.
///
/// Thread-safety: read() and size() may be called from any number of threads.
class HttpStore final : public RemoteStore {
 public:
  /// Starts the event-loop thread. Throws Error{kConfig} for bad options.
  explicit HttpStore(HttpStoreOptions options = {});
  /// Ends every transfer still in flight (their reads fail as cancelled) and
  /// joins the event-loop thread.
  ~HttpStore() override;
  HttpStore(const HttpStore&) = delete;
  HttpStore& operator=(const HttpStore&) = delete;

  std::vector<uint8_t> read(const std::string& url, uint64_t offset, int64_t size) const override;
  /// One attempt at read(), its `done` run on the event-loop thread; false
  /// where a role's credentials are not at hand (reading them may wait:
  /// RefreshingRoleCredentials::at_hand), for an empty or too large read,
  /// and for a URL that read() refuses.
  bool start_read(const std::string& url, uint64_t offset, int64_t size, const Cancellation* cancellation,
                  std::function<void(RemoteAttempt)> done) const override;
  bool starts_reads() const override { return true; }
  uint64_t size(const std::string& url) const override;
  /// A HEAD: Content-Length, and ETag (else Last-Modified) as the version.
  /// Where the HEAD is refused (403, 405, 501: a URL presigned for GET), a
  /// GET of the first byte: the total of its Content-Range.
  RemoteObjectInfo stat(const std::string& url) const override;
  /// One GET of the whole object, with its ETag (else Last-Modified); a
  /// declared length past `max_bytes` is refused before the body.
  RemoteObjectInfo fetch(const std::string& url, std::vector<uint8_t>* data, int64_t max_bytes) const override;
  /// The objects under an `s3://bucket/prefix` (or `gs://`), in the store's
  /// order (by key's UTF-8 bytes), every page of a ListObjectsV2 listing.
  /// Other schemes cannot list (FetchError kInvalid).
  std::vector<RemoteObject> list(const std::string& prefix) const override;

  HttpStoreCounters counters() const;
  const HttpStoreOptions& options() const;

 private:
  class Loop;
  std::unique_ptr<Loop> loop_;
};

}  // namespace conveyor
