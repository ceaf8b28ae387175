#include "conveyor/io/remote.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <functional>
#include <random>
#include <thread>
#include <utility>

#include "conveyor/core/cancellation.h"
#include "conveyor/core/error.h"

namespace conveyor {

namespace {

bool is_scheme_char(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '+' || c == '-' || c == '.';
}

// Jitter only spreads retries in time; it never affects what is read, so a
// per-thread generator seeded from the OS is enough.
double jitter() {
  thread_local std::minstd_rand generator(
      std::random_device{}() ^ static_cast<unsigned>(std::hash<std::thread::id>{}(std::this_thread::get_id())));
  return std::uniform_real_distribution<double>(0.5, 1.0)(generator);
}

std::string seconds_text(double seconds) {
  char text[32];
  std::snprintf(text, sizeof text, "%.1f s", seconds);
  return text;
}

Error cancelled(const std::string& key) {
  return Error(ErrorKind::kCancelled, "the remote read was cancelled (the loader stopped)", key);
}

// Runs `attempt` until it succeeds, fails permanently, or `policy` gives up;
// after `first`'s failure (an attempt made before, by start_read) when it
// has one. The backoff waits end early when the thread's Cancellation is
// cancelled.
template <class Attempt>
auto with_retries(const RetryPolicy& policy, const std::string& key, Attempt&& attempt,
                  const RemoteAttempt* first = nullptr) {
  using Clock = std::chrono::steady_clock;
  const Clock::time_point start =
      first != nullptr && first->started != Clock::time_point{} ? first->started : Clock::now();
  double backoff = policy.initial_backoff;
  int made = 0;
  // After the `made`th attempt failed: the error to throw, or the backoff.
  const auto after = [&](const FetchFailure& failure) {
    if (failure.kind == FetchFailure::Kind::kCancelled) throw cancelled(key);
    if (!is_transient(failure)) throw Error(ErrorKind::kRead, failure.describe(), key);
    const double wait = std::max(std::min(backoff, policy.max_backoff) * jitter(),
                                 std::min(failure.retry_after, FetchFailure::kMaxRetryAfterSeconds));
    const double elapsed = std::chrono::duration<double>(Clock::now() - start).count();
    if (made >= policy.attempts || (policy.timeout > 0 && elapsed + wait > policy.timeout)) {
      throw Error(ErrorKind::kRead,
                  failure.describe() + " (a transient error; gave up after " + std::to_string(made) +
                      (made == 1 ? " attempt" : " attempts") + " in " + seconds_text(elapsed) + ")",
                  key);
    }
    if (cancellation_requested() || sleep_unless_cancelled(std::chrono::duration_cast<std::chrono::nanoseconds>(
                                        std::chrono::duration<double>(wait)))) {
      throw cancelled(key);
    }
    backoff = std::min(backoff * 2, policy.max_backoff);
  };
  if (first != nullptr && first->failure) {
    made = 1;
    after(*first->failure);
  }
  while (true) {
    ++made;
    try {
      return attempt();
    } catch (const FetchError& e) {
      after(e.failure());
    }
  }
}

}  // namespace

bool is_url(std::string_view path) {
  const size_t colon = path.find("://");
  if (colon == std::string_view::npos || colon == 0) return false;
  const char first = path[0];
  if (!((first >= 'a' && first <= 'z') || (first >= 'A' && first <= 'Z'))) return false;
  return std::all_of(path.begin(), path.begin() + static_cast<std::ptrdiff_t>(colon), is_scheme_char);
}

std::string shown_path(std::string_view path) {
  if (!is_url(path)) return std::string(path);
  static constexpr std::string_view kSecretParameters[] = {
      "x-amz-signature", "x-amz-security-token", "x-goog-signature", "sig", "signature", "token", "access_token"};
  std::string shown(path);
  // A password in the user info: "scheme://user:***@host".
  const size_t authority = shown.find("://") + 3;
  const size_t authority_end = std::min(shown.find_first_of("/?#", authority), shown.size());
  const size_t at = shown.rfind('@', authority_end);
  if (at != std::string::npos && at >= authority) {
    const size_t colon = shown.find(':', authority);
    if (colon < at) shown.replace(colon + 1, at - colon - 1, "***");
  }
  const size_t query = shown.find('?');
  if (query == std::string::npos) return shown;
  std::string out = shown.substr(0, query + 1);
  const size_t query_end = std::min(shown.find('#', query), shown.size());
  size_t start = query + 1;
  while (start <= query_end) {
    const size_t end = std::min(shown.find('&', start), query_end);
    const std::string_view parameter = std::string_view(shown).substr(start, end - start);
    const size_t equals = parameter.find('=');
    std::string name(parameter.substr(0, equals));
    for (char& c : name) c = (c >= 'A' && c <= 'Z') ? static_cast<char>(c - 'A' + 'a') : c;
    const bool secret =
        equals != std::string_view::npos &&
        std::find(std::begin(kSecretParameters), std::end(kSecretParameters), name) != std::end(kSecretParameters);
    out += secret ? std::string(parameter.substr(0, equals + 1)) + "***" : std::string(parameter);
    if (end < query_end) out += '&';
    start = end + 1;
  }
  out += shown.substr(query_end);
  return out;
}

void RetryPolicy::validate() const {
  check_config(attempts >= 1, "RetryPolicy: attempts must be >= 1, got " + std::to_string(attempts));
  check_config(
      std::isfinite(initial_backoff) && initial_backoff >= 0,
      "RetryPolicy: initial_backoff must be a finite number of seconds >= 0, got " + std::to_string(initial_backoff));
  check_config(std::isfinite(max_backoff) && max_backoff >= initial_backoff,
               "RetryPolicy: max_backoff must be finite and >= initial_backoff (" + std::to_string(initial_backoff) +
                   "), got " + std::to_string(max_backoff));
  check_config(std::isfinite(timeout), "RetryPolicy: timeout must be finite (<= 0: no limit)");
}

std::string FetchFailure::describe() const {
  auto with = [this](std::string what) { return message.empty() ? what : what + ": " + message; };
  switch (kind) {
    case Kind::kStatus:
      return "HTTP " + std::to_string(status) + (message.empty() ? "" : " " + message);
    case Kind::kTimeout:
      return with("timed out");
    case Kind::kConnection:
      return with("connection failed");
    case Kind::kNotFound:
      return with("not found");
    case Kind::kPermission:
      return with("permission denied");
    case Kind::kInvalid:
      return with("invalid URL or request");
    case Kind::kCancelled:
      return with("cancelled");
    case Kind::kTooLarge:
      return with("too large");
    case Kind::kOther:
      break;
  }
  return message.empty() ? std::string("failed") : message;
}

bool is_transient(const FetchFailure& failure) {
  switch (failure.kind) {
    case FetchFailure::Kind::kStatus:
      // 408 Request Timeout, 429 Too Many Requests, and server errors except
      // those that say the request itself can never work.
      return failure.status == 408 || failure.status == 429 ||
             (failure.status >= 500 && failure.status <= 599 && failure.status != 501 && failure.status != 505);
    case FetchFailure::Kind::kTimeout:
    case FetchFailure::Kind::kConnection:
      return true;
    default:
      return false;
  }
}

FetchError::FetchError(FetchFailure failure) : std::runtime_error(failure.describe()), failure_(std::move(failure)) {}

namespace {

// `data`, read as [offset, offset + size) (the whole object when `size` < 0)
// of `key`, checked: Error{kRead} when it is longer than a read may return,
// or not `size` bytes.
Bytes checked_read(std::vector<uint8_t> data, uint64_t offset, int64_t size, const std::string& key) {
  if (data.size() > static_cast<uint64_t>(kMaxRemoteReadBytes)) {
    throw Error(ErrorKind::kRead,
                FetchFailure{FetchFailure::Kind::kTooLarge, 0,
                             std::to_string(data.size()) + " bytes, more than the " +
                                 std::to_string(kMaxRemoteReadBytes) + " bytes a read may return"}
                    .describe(),
                key);
  }
  if (size >= 0 && data.size() != static_cast<uint64_t>(size)) {
    throw Error(ErrorKind::kRead,
                "expected " + std::to_string(size) + " bytes at offset " + std::to_string(offset) + ", got " +
                    std::to_string(data.size()) +
                    " (the object changed since it was indexed, or the server ignored the byte range)",
                key);
  }
  return Bytes::from_vector(std::move(data));
}

}  // namespace

Bytes RemoteAccess::read(const std::string& url, uint64_t offset, int64_t size, const std::string& key) const {
  return checked_read(with_retries(retry, key, [&] { return store->read(url, offset, size); }), offset, size, key);
}

bool RemoteAccess::start_read(const std::string& url, const Cancellation* cancellation,
                              std::function<void(RemoteAttempt)> done) const {
  const auto started = std::chrono::steady_clock::now();
  return store->start_read(url, 0, -1, cancellation, [started, done = std::move(done)](RemoteAttempt attempt) {
    attempt.started = started;
    if (attempt.data && attempt.data->size() > static_cast<uint64_t>(kMaxRemoteReadBytes)) {
      const size_t size = attempt.data->size();
      attempt.data.reset();
      try {
        // What read() would refuse, as it words it.
        attempt.failure = FetchFailure{FetchFailure::Kind::kTooLarge, 0,
                                       std::to_string(size) + " bytes, more than the " +
                                           std::to_string(kMaxRemoteReadBytes) + " bytes a read may return"};
      } catch (...) {
        // Out of memory: neither, and the read is made anew (to fail so).
      }
    }
    done(std::move(attempt));
  });
}

Bytes RemoteAccess::read_after(const RemoteAttempt& first, const std::string& url, uint64_t offset, int64_t size,
                               const std::string& key) const {
  return checked_read(with_retries(
                          retry, key, [&] { return store->read(url, offset, size); }, &first),
                      offset, size, key);
}

std::optional<Bytes> RemoteAccess::read_if_present(const std::string& url, int64_t max_bytes,
                                                   const std::string& key) const {
  std::optional<std::vector<uint8_t>> data = with_retries(retry, key, [&]() -> std::optional<std::vector<uint8_t>> {
    std::vector<uint8_t> bytes;
    try {
      store->fetch(url, &bytes, max_bytes);
    } catch (const FetchError& e) {
      using Kind = FetchFailure::Kind;
      const FetchFailure& failure = e.failure();
      if (failure.kind == Kind::kNotFound || failure.kind == Kind::kPermission ||
          (failure.kind == Kind::kStatus &&
           (failure.status == 404 || failure.status == 403 || failure.status == 410))) {
        return std::nullopt;
      }
      throw;
    }
    return bytes;
  });
  if (!data) return std::nullopt;
  return Bytes::from_vector(std::move(*data));
}

uint64_t RemoteAccess::size(const std::string& url, const std::string& key) const {
  return with_retries(retry, key, [&] { return store->size(url); });
}

RemoteObjectInfo RemoteStore::stat(const std::string& url) const { return {size(url), ""}; }

RemoteObjectInfo RemoteStore::fetch(const std::string& url, std::vector<uint8_t>* data, int64_t max_bytes) const {
  *data = read(url, 0, -1);
  if (static_cast<int64_t>(data->size()) > max_bytes) {
    throw FetchError({FetchFailure::Kind::kTooLarge, 0, std::to_string(data->size()) + " bytes"});
  }
  return {data->size(), ""};
}

RemoteObjectInfo RemoteAccess::stat(const std::string& url, const std::string& key) const {
  return with_retries(retry, key, [&] { return store->stat(url); });
}

bool RemoteStore::serves_locally(const std::string& /*url*/) const { return false; }

bool RemoteStore::start_read(const std::string& /*url*/, uint64_t /*offset*/, int64_t /*size*/,
                             const Cancellation* /*cancellation*/, std::function<void(RemoteAttempt)> /*done*/) const {
  return false;
}

std::vector<RemoteObject> RemoteStore::list(const std::string&) const {
  throw FetchError({FetchFailure::Kind::kInvalid, 0, "this store cannot list objects"});
}

std::vector<RemoteObject> RemoteAccess::list(const std::string& prefix, const std::string& key) const {
  return with_retries(retry, key, [&] { return store->list(prefix); });
}

}  // namespace conveyor
