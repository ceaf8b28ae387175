#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "conveyor/io/source.h"

namespace conveyor {

class Cancellation;  // core/cancellation.h

/// Whether `path` is a URL ("scheme://...", the scheme a letter followed by
/// letters, digits, "+", "-" or "."), read through a RemoteStore rather than
/// the file system: "https://host/a.jpg", "s3://bucket/a.tar".
bool is_url(std::string_view path);

/// `path` as errors, sample keys and skipped() show it: for a URL, the
/// password of its user info and the values of the query parameters that
/// carry credentials (a presigned URL's X-Amz-Signature and
/// X-Amz-Security-Token, GCS's X-Goog-Signature, Azure's sig, Signature,
/// token, access_token; names case-insensitive) become "***". Anything
/// else, and any path that is not a URL, is returned as it is.
std::string shown_path(std::string_view path);

/// The most bytes one remote read may return. A RemoteStore refuses a reply
/// whose declared length (Content-Length) is larger before reading its body,
/// and reads a body of no declared length no further than one byte past it
/// (FetchFailure kTooLarge), so that a server that streams without end
/// cannot grow the process; RemoteAccess::read refuses a larger result from
/// any store (a store that cannot bound its reads, such as fsspec's whole
/// reads, is then checked after the fact).
inline constexpr int64_t kMaxRemoteReadBytes = int64_t{1} << 31;

/// How remote reads retry transient failures. An attempt that fails with a
/// transient error (is_transient) is retried after a backoff that doubles
/// from `initial_backoff` up to `max_backoff` seconds, each drawn uniformly
/// from [half, all] of it (jitter, so that many readers do not retry in step);
/// the read gives up after `attempts` attempts in all, or when the next wait
/// would end more than `timeout` seconds after the first attempt started
/// (<= 0: no time limit). Permanent failures are never retried.
struct RetryPolicy {
  int attempts = 5;
  double initial_backoff = 0.2;
  double max_backoff = 5.0;
  double timeout = 60.0;

  /// Throws Error{kConfig} naming the field when a value is out of range:
  /// attempts >= 1, 0 <= initial_backoff <= max_backoff, all finite.
  void validate() const;
};

/// Why one attempt at a remote read failed, as the store saw it; whether it
/// is worth retrying is decided here (is_transient), not by the store.
struct FetchFailure {
  enum class Kind {
    kStatus,      ///< The server answered with an error status (`status`, e.g. 503, 404).
    kTimeout,     ///< No answer in time (connect or read timeout).
    kConnection,  ///< The connection failed or was reset.
    kNotFound,    ///< The object does not exist (a store's own "not found", no status).
    kPermission,  ///< Access denied (a store's own, no status).
    kInvalid,     ///< The URL is malformed or the request invalid.
    kCancelled,   ///< The read was cancelled (the loader stopped) while in flight.
    kTooLarge,    ///< The reply is larger than kMaxRemoteReadBytes.
    kOther,       ///< Anything else the store reported.
  };
  Kind kind = Kind::kOther;
  int status = 0;       ///< The HTTP status for kStatus, else 0.
  std::string message;  ///< The store's words (e.g. "Service Unavailable").
  /// Seconds the server asked the client to wait before trying again (HTTP
  /// Retry-After, in seconds), 0 when it did not: the next attempt waits at
  /// least this long, at most kMaxRetryAfterSeconds.
  double retry_after = 0;
  static constexpr double kMaxRetryAfterSeconds = 300;

  /// "HTTP 503 Service Unavailable", "timed out: ...", "connection failed: ...".
  std::string describe() const;
};

/// Transient failures are retried: HTTP 408, 429 and 5xx (but 501 Not
/// Implemented and 505), timeouts and connection failures. Everything else
/// (404, 403, 400, other 4xx, a malformed URL, ...) fails at once.
bool is_transient(const FetchFailure& failure);

/// Thrown by a RemoteStore for a failed attempt.
class FetchError : public std::runtime_error {
 public:
  explicit FetchError(FetchFailure failure);
  const FetchFailure& failure() const noexcept { return failure_; }

 private:
  FetchFailure failure_;
};

/// How one attempt started by RemoteStore::start_read ended: `data` when it
/// succeeded, `failure` when it failed, neither when the store learnt
/// something that makes the read worth making anew at once (S3 named the
/// bucket's region), which no retry policy counts as an attempt.
struct RemoteAttempt {
  std::optional<std::vector<uint8_t>> data;
  std::optional<FetchFailure> failure;
  /// Its wait for a slot under the store's limit on requests in flight (as
  /// thread_queue_wait_ns() counts it for read()): not the read's latency.
  std::chrono::nanoseconds queue_wait{0};
  /// When it was started (RemoteAccess::start_read sets it): a retry
  /// policy's time limit counts from then (RemoteAccess::read_after).
  std::chrono::steady_clock::time_point started{};
};

/// What a store says about one object: its size and a tag that changes when
/// the object does (HTTP's ETag, else its Last-Modified; empty when the store
/// gives none).
struct RemoteObjectInfo {
  uint64_t size = 0;
  std::string version;
};

/// One object found by RemoteStore::list.
struct RemoteObject {
  std::string url;  ///< "s3://bucket/key".
  uint64_t size = 0;
};

/// What remote reads go through: one attempt at a time, no retries (the
/// callers retry with a RetryPolicy). Implemented outside the core, e.g. by
/// fsspec in the Python bindings (PythonRemoteStore).
///
/// Thread-safety: read() and size() are called from many io threads at once.
class RemoteStore {
 public:
  virtual ~RemoteStore() = default;
  /// The bytes [offset, offset + size) of `url`, or the whole object when
  /// `size` < 0. May return fewer bytes at the end of the object. Throws
  /// FetchError.
  virtual std::vector<uint8_t> read(const std::string& url, uint64_t offset, int64_t size) const = 0;
  /// Starts one attempt at read(url, offset, size) and returns without
  /// waiting for it, where the store can; false where it cannot (the
  /// default, or a read that would wait before its request is sent, e.g. to
  /// read credentials), and `done` is then never called: the caller calls
  /// read() on a thread that may wait. Otherwise `done` is called exactly
  /// once, on the store's own thread (never on the caller's, though perhaps
  /// before start_read returns): it must be quick, must not wait for the
  /// store (e.g. in read()) and must not throw; it may start another read.
  /// The attempt ends as
  /// kCancelled soon after `cancellation` (null: none; it must outlive the
  /// attempt) is cancelled, as read() ends under the thread's Cancellation.
  virtual bool start_read(const std::string& url, uint64_t offset, int64_t size, const Cancellation* cancellation,
                          std::function<void(RemoteAttempt)> done) const;
  /// Whether start_read() may start reads at all (false: it never does, the
  /// default), so that a caller that cannot use it keeps its plain path.
  virtual bool starts_reads() const { return false; }
  /// The size of the object at `url` in bytes. Throws FetchError.
  virtual uint64_t size(const std::string& url) const = 0;
  /// The size and version of the object at `url`. Throws FetchError. The
  /// default is size() with no version.
  virtual RemoteObjectInfo stat(const std::string& url) const;
  /// The whole object at `url` into `data`, with its size and version from
  /// the same request; FetchError kTooLarge, before its body is read where
  /// the store can tell, when it is larger than `max_bytes`. Throws
  /// FetchError. The default is read(url, 0, -1) with no version, checked
  /// after.
  virtual RemoteObjectInfo fetch(const std::string& url, std::vector<uint8_t>* data, int64_t max_bytes) const;
  /// Whether a read of `url` now reads only local storage (a cache's object
  /// already checked in this process), so that the loader may run it on the
  /// cpu thread that decodes it. A hint: the object may be gone by the time
  /// it is read (another process evicted it), and is then fetched. Never
  /// waits. The default: false.
  virtual bool serves_locally(const std::string& url) const;
  /// Whether a read of part of an object fetches it whole (a cache that
  /// keeps whole objects), so that reading several parts in one request
  /// saves nothing (TarShardSource::plan_reads). The default: false.
  virtual bool keeps_whole_objects() const { return false; }
  /// Every object whose URL starts with `prefix` (one page of a listing per
  /// attempt is not enough: the whole listing, in the store's order). Throws
  /// FetchError; kInvalid for a store or scheme that cannot list (the default).
  virtual std::vector<RemoteObject> list(const std::string& prefix) const;
};

/// A RemoteStore with the RetryPolicy its reads follow: what the sources that
/// accept URLs (FileSource, TarShardSource) hold.
///
/// Thread-safety: immutable; read() and size() may be called from many threads.
struct RemoteAccess {
  std::shared_ptr<const RemoteStore> store;
  RetryPolicy retry;

  /// store->read(url, offset, size) retried under `retry`. Throws Error{kRead}
  /// naming `key` with the failure ("HTTP 404 Not Found", or "HTTP 503 Service
  /// Unavailable (a transient error; gave up after 5 attempts in 3.1 s)"), and
  /// Error{kCancelled} when the calling thread's current Cancellation
  /// (core/cancellation.h) is cancelled: a backoff then ends at once. With
  /// `size` >= 0 a shorter answer is an Error{kRead} too ("expected N bytes at
  /// offset O, got M"): the object shrank, or the server ignored the range.
  Bytes read(const std::string& url, uint64_t offset, int64_t size, const std::string& key) const;
  /// store->start_read(url, 0, -1, ...): one attempt at the whole object,
  /// not retried. `done` is called on the store's thread with `started`
  /// set, and with data only within what read() accepts (larger is a
  /// kTooLarge failure). False where the store cannot start it so: read()
  /// it then.
  bool start_read(const std::string& url, const Cancellation* cancellation,
                  std::function<void(RemoteAttempt)> done) const;
  /// read(url, offset, size, key) after `first`, an attempt of start_read
  /// that gave no bytes (its bytes, if any, are not looked at):
  /// its failure is the policy's first attempt (a permanent one is the
  /// error at once, a transient one is retried after the first backoff, the
  /// time limit counted from `first.started`), as if read() had made it;
  /// without a failure the read starts anew.
  Bytes read_after(const RemoteAttempt& first, const std::string& url, uint64_t offset, int64_t size,
                   const std::string& key) const;
  /// The whole object at `url` through store->fetch() retried under `retry`,
  /// or none when the store says it is not there: HTTP 404, 410, or 403
  /// (S3's answer for a missing key to a caller that may not list the
  /// bucket), a store's own not found or permission denied. An object
  /// larger than `max_bytes` is an Error{kRead}; other errors as read().
  std::optional<Bytes> read_if_present(const std::string& url, int64_t max_bytes, const std::string& key) const;
  /// store->size(url) retried under `retry`; errors as read().
  uint64_t size(const std::string& url, const std::string& key) const;
  /// store->stat(url) retried under `retry`; errors as read().
  RemoteObjectInfo stat(const std::string& url, const std::string& key) const;
  /// store->list(prefix) retried under `retry`; errors as read().
  std::vector<RemoteObject> list(const std::string& prefix, const std::string& key) const;
};

}  // namespace conveyor
