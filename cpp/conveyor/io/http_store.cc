#include "conveyor/io/http_store.h"

#include <curl/curl.h>
#include <sys/resource.h>
#include <sys/stat.h>

#if defined(__linux__)
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <cerrno>
#endif

#include <algorithm>
#include <atomic>
#include <charconv>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <deque>
#include <functional>
#include <map>
#include <mutex>
#include <optional>
#include <set>
#include <string_view>
#include <system_error>
#include <thread>

#include "conveyor/core/cancellation.h"
#include "conveyor/core/cpu_time.h"
#include "conveyor/core/error.h"
#include "conveyor/core/thread_pool.h"
#include "conveyor/io/ca_certificates.h"
#include "conveyor/io/connection_limit.h"
#include "conveyor/io/curl_global.h"
#include "conveyor/io/role_credentials.h"

namespace conveyor {

namespace {

using Kind = FetchFailure::Kind;
using Clock = std::chrono::steady_clock;

constexpr long kMaxRedirects = 5;
// An error reply's body is kept only to find S3's error code in it.
constexpr size_t kMaxErrorBody = 64 << 10;
// A connect slower than this says the server's listen queue overflowed: the
// SYN was dropped and waits for its retransmission. Until a host's connects
// are measured the bound is HttpStoreOptions::first_slow_connect; then
// kSlowConnectFactor times their smoothed time, at least kMinSlowConnect, so
// that a transfer still connecting past it signals overload at once rather
// than a second late.
constexpr double kSlowConnectFactor = 4.0;
constexpr double kMinSlowConnect = 0.2;
// How often the loop looks for transfers stuck connecting.
constexpr auto kSlowConnectCheck = std::chrono::milliseconds(20);
// How long the loop sleeps at most with no transfer in flight.
constexpr auto kIdleWait = std::chrono::milliseconds(1000);
// A transfer stuck connecting is started again (at the head of its host's
// queue) at most this many times; after that it waits out the kernel's SYN
// retransmissions and its connect timeout.
constexpr int kMaxConnectRestarts = 3;
// The empty payload's SHA-256: what S3 wants in x-amz-content-sha256 for a
// GET or HEAD (libcurl signs the same hash).
constexpr const char* kEmptyPayloadSha256 = "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855";

bool starts_with_nocase(std::string_view text, std::string_view prefix) {
  if (text.size() < prefix.size()) return false;
  for (size_t i = 0; i < prefix.size(); ++i) {
    if (std::tolower(static_cast<unsigned char>(text[i])) != prefix[i]) return false;
  }
  return true;
}

std::string_view trim(std::string_view text) {
  while (!text.empty() && (text.front() == ' ' || text.front() == '\t')) text.remove_prefix(1);
  while (!text.empty() && (text.back() == ' ' || text.back() == '\t' || text.back() == '\r' || text.back() == '\n')) {
    text.remove_suffix(1);
  }
  return text;
}

// The reason phrase of the statuses HTTP/2 replies carry none for.
std::string standard_reason(long status) {
  static const std::map<long, std::string> reasons = {{301, "Moved Permanently"},
                                                      {302, "Found"},
                                                      {307, "Temporary Redirect"},
                                                      {400, "Bad Request"},
                                                      {401, "Unauthorized"},
                                                      {403, "Forbidden"},
                                                      {404, "Not Found"},
                                                      {408, "Request Timeout"},
                                                      {416, "Range Not Satisfiable"},
                                                      {429, "Too Many Requests"},
                                                      {500, "Internal Server Error"},
                                                      {501, "Not Implemented"},
                                                      {502, "Bad Gateway"},
                                                      {503, "Service Unavailable"},
                                                      {504, "Gateway Timeout"}};
  auto it = reasons.find(status);
  return it == reasons.end() ? std::string() : it->second;
}

// "scheme://host:port" of a URL: the key of the per-host limit.
std::string host_of(const std::string& url) {
  const size_t authority = url.find("://");
  if (authority == std::string::npos) return url;
  return url.substr(0, url.find_first_of("/?#", authority + 3));
}

// Which API a transfer speaks: plain HTTP, or S3's (signed) at AWS or at
// GCS's S3-compatible XML API.
enum class Api { kHttp, kS3, kGcs };

// A libcurl string list, freed with it.
struct HeaderList {
  curl_slist* list = nullptr;
  HeaderList() = default;
  HeaderList(const HeaderList&) = delete;
  HeaderList& operator=(const HeaderList&) = delete;
  ~HeaderList() { curl_slist_free_all(list); }
  void add(const std::string& line) {
    curl_slist* grown = curl_slist_append(list, line.c_str());
    if (grown == nullptr) throw std::bad_alloc();
    list = grown;
  }
};

struct Transfer {
  // The request: set before submission, read-only after.
  std::string url;  // http(s)
  std::string host;
  bool head = false;
  Api api = Api::kHttp;
  std::string range;  // "first-last", or empty for the whole object
  int64_t max_bytes = 0;
  std::string bucket;                           // S3: the bucket, whose region a reply may name.
  std::string signed_region;                    // S3: the region the request is signed for.
  std::string sigv4;                            // S3: libcurl's SigV4 provider string for that region.
  bool unsigned_request = false;                // S3, GCS: sent without a signature.
  std::string credentials_source;               // S3, GCS: where its credentials came from (a refusal's message says).
  std::shared_ptr<const RoleCredentials> role;  // S3: the role's credentials it is signed with.
  HeaderList role_headers;                      // Their headers (the session token), when `role`.
  int in_flight_at_start = 0;  // Transfers to the host in flight when this one started, itself included.
  Clock::time_point started{};
  bool slow_connect = false;  // Reported as an overload while still connecting.
  int connect_restarts = 0;
  // Waiting for a slot under its host's limit: set by the loop once a round
  // of admissions left it waiting (the waiting transfers so marked are the
  // front of their host's queue), cleared when it starts; a connect the
  // host did not take in time (report_slow_connects) counts from its start.
  // A transfer abandoned or cancelled while queued reports no wait (only at
  // a stop).
  bool queued = false;
  Clock::time_point queued_since{};
  Clock::duration queue_wait{};  // Summed over its waits; read by the waiter once `done`.
  // Before its host's first answer (ConnectionLimit::counts_connections):
  // the limit that a new connection of this attempt ready within
  // `quick_connect` of its start is counted by (ConnectionLimit::connected),
  // once; set by the loop, read and cleared by curl's callbacks on the loop
  // thread (on_new_socket, on_connection_ready).
  ConnectionLimit* counts_connection = nullptr;
  Clock::duration quick_connect{};
  bool new_socket = false;
  const CaCertificates* ca = nullptr;  // What TLS is verified against (the loop's; set by configure()).

  // The reply: written by the loop thread, read by the waiter once `done`.
  CURLcode code = CURLE_OK;
  long status = 0;
  std::string reason;
  std::vector<uint8_t> body;
  std::string error_body;
  int64_t declared_length = -1;
  int64_t range_first = -1;     // The first byte of a 206's Content-Range, or -1.
  int64_t range_last = -1;      // Its last byte.
  int64_t range_total = -1;     // The object's size it gives, or -1 ("*").
  std::string too_large;        // What was too large ("Content-Length: N"), or empty.
  std::string out_of_memory;    // What could not be allocated in a callback, or empty.
  bool error_body_cut = false;  // An error reply's body went on past kMaxErrorBody: not read further.
  std::string etag;
  std::string last_modified;
  double retry_after = 0;
  std::string bucket_region;  // S3's x-amz-bucket-region: where the bucket really is.
  char error[CURL_ERROR_SIZE] = {};
  bool cancelled = false;  // Ended by the store's destructor.

  std::atomic<bool> abandoned{false};  // The waiter gave up (its loader stopped).
  bool stop_waiting = false;           // Set (under mu) by the waiter's Cancellation.
  std::mutex mu;
  std::condition_variable cv;
  bool done = false;

  // An asynchronous read's (HttpStore::start_read): run by the loop thread
  // when the transfer ends, instead of waking a waiter; and what ends it
  // when the reader's Cancellation is cancelled. Set before submission.
  // Last: the subscription's callback writes `abandoned`, so it goes first.
  std::function<void(Transfer&)> on_done;
  std::optional<Cancellation::Subscription> cancelled_by;
};

struct ContentRange {
  int64_t first = -1;
  int64_t last = -1;
  int64_t total = -1;  // -1: "*", unknown.
};

// "bytes FIRST-LAST/TOTAL" (RFC 9110's Content-Range of a 206), or nullopt.
std::optional<ContentRange> content_range(std::string_view value) {
  if (!starts_with_nocase(value, "bytes ")) return std::nullopt;
  value = trim(value.substr(6));
  int64_t first = -1;
  int64_t last = -1;
  const char* end = value.data() + value.size();
  if (value.starts_with("*/")) {  // A 416's: the size alone.
    int64_t total = -1;
    const auto [total_end, total_error] = std::from_chars(value.data() + 2, end, total);
    if (total_error != std::errc() || total_end != end || total < 0) return std::nullopt;
    return ContentRange{-1, -1, total};
  }
  const auto [dash, first_error] = std::from_chars(value.data(), end, first);
  if (first_error != std::errc() || dash == end || *dash != '-') return std::nullopt;
  const auto [slash, last_error] = std::from_chars(dash + 1, end, last);
  if (last_error != std::errc() || slash == end || *slash != '/' || last < first) return std::nullopt;
  int64_t total = -1;
  const auto [total_end, total_error] = std::from_chars(slash + 1, end, total);
  if (total_error != std::errc() || total_end != end || total <= last) total = -1;
  return ContentRange{first, last, total};
}

size_t read_header(Transfer& t, char* data, size_t count) {
  const std::string_view line(data, count);
  if (line.substr(0, 5) == "HTTP/") {
    // Each reply (a redirect's, an interim 100's, the final one) starts anew.
    const size_t space = line.find(' ');
    const std::string_view rest = space == std::string_view::npos ? std::string_view{} : line.substr(space + 1);
    long status = 0;
    std::from_chars(rest.data(), rest.data() + rest.size(), status);
    t.status = status;
    const size_t reason = rest.find(' ');
    t.reason = reason == std::string_view::npos ? std::string() : std::string(trim(rest.substr(reason + 1)));
    t.declared_length = -1;
    t.range_first = t.range_last = t.range_total = -1;
    t.retry_after = 0;
    t.error_body.clear();
    t.etag.clear();
    t.last_modified.clear();
    t.bucket_region.clear();
  } else if (starts_with_nocase(line, "x-amz-bucket-region:")) {
    t.bucket_region = std::string(trim(line.substr(20)));
  } else if (starts_with_nocase(line, "content-length:")) {
    const std::string_view value = trim(line.substr(15));
    int64_t length = -1;
    const auto [end, ec] = std::from_chars(value.data(), value.data() + value.size(), length);
    if (ec == std::errc() && end == value.data() + value.size()) t.declared_length = length;
    if (ec == std::errc::result_out_of_range || (ec == std::errc() && length > t.max_bytes)) {
      // Refused before any of the body is read, once the headers (an ETag
      // after it) are.
      if (!t.head && t.status >= 200 && t.status < 300) t.too_large = "Content-Length: " + std::string(value);
    }
  } else if (trim(line).empty()) {
    if (!t.too_large.empty()) return 0;  // The end of a reply's headers.
  } else if (starts_with_nocase(line, "content-range:")) {
    if (const auto range = content_range(trim(line.substr(14)))) {
      t.range_first = range->first;
      t.range_last = range->last;
      t.range_total = range->total;
    }
  } else if (starts_with_nocase(line, "etag:")) {
    t.etag = std::string(trim(line.substr(5)));
  } else if (starts_with_nocase(line, "last-modified:")) {
    t.last_modified = std::string(trim(line.substr(14)));
  } else if (starts_with_nocase(line, "retry-after:")) {
    const std::string_view value = trim(line.substr(12));
    double seconds = 0;
    const auto [end, ec] = std::from_chars(value.data(), value.data() + value.size(), seconds);
    if (ec == std::errc() && std::isfinite(seconds) && seconds > 0) t.retry_after = seconds;  // A date: ignored.
  }
  return count;
}

// libcurl's callbacks are C: an exception must not cross them. Returning 0
// ends the transfer (CURLE_WRITE_ERROR), and failure_of() says why.
size_t on_header(char* data, size_t, size_t count, void* user) {
  Transfer& t = *static_cast<Transfer*>(user);
  try {
    return read_header(t, data, count);
  } catch (const std::bad_alloc&) {
    t.out_of_memory = "a header of the reply";
    return 0;
  }
}

int on_new_socket(void* user, curl_socket_t, curlsocktype purpose) {
  if (purpose == CURLSOCKTYPE_IPCXN) static_cast<Transfer*>(user)->new_socket = true;
  return CURL_SOCKOPT_OK;
}

// Called when the transfer's connection (a new or a reused one) is ready,
// TLS included, before the request is sent. Its time counts from the
// transfer's start (DNS, TLS and the loop's delay included): it errs towards
// not counting a connection.
int on_connection_ready(void* user, char*, char*, int, int) {
  Transfer& t = *static_cast<Transfer*>(user);
  if (t.new_socket && t.counts_connection != nullptr) {
    if (Clock::now() - t.started < t.quick_connect) t.counts_connection->connected();
    t.counts_connection = nullptr;
  }
  return CURL_PREREQFUNC_OK;
}

size_t on_body(char* data, size_t, size_t count, void* user) {
  Transfer& t = *static_cast<Transfer*>(user);
  if (t.abandoned.load(std::memory_order_relaxed)) return 0;
  try {
    if (t.status < 200 || t.status >= 300) {
      // Its status says what failed; a body past the cap (one that never
      // ends, faster than the low-speed limit) is not read on.
      const size_t room = kMaxErrorBody - std::min(kMaxErrorBody, t.error_body.size());
      t.error_body.append(data, std::min(room, count));
      if (count > room) t.error_body_cut = true;
      return count > room ? 0 : count;
    }
    if (static_cast<int64_t>(t.body.size() + count) > t.max_bytes) {
      t.too_large = "a body of no declared length";
      return 0;
    }
    if (t.body.empty() && t.declared_length > 0) t.body.reserve(static_cast<size_t>(t.declared_length));
    t.body.insert(t.body.end(), data, data + count);
  } catch (const std::bad_alloc&) {
    t.out_of_memory = "its body (" +
                      (t.declared_length > 0 ? "Content-Length: " + std::to_string(t.declared_length)
                                             : std::to_string(t.body.size() + count) + " bytes so far") +
                      ")";
    return 0;
  }
  return count;
}

// libcurl's compiled-in CA bundle and folder.
CaCertificates builtin_ca_certificates() {
  CaCertificates builtin;
  CURL* easy = curl_easy_init();
  if (easy == nullptr) throw std::bad_alloc();
  char* file = nullptr;
  char* folder = nullptr;
  if (curl_easy_getinfo(easy, CURLINFO_CAINFO, &file) == CURLE_OK && file != nullptr) builtin.file = file;
  if (curl_easy_getinfo(easy, CURLINFO_CAPATH, &folder) == CURLE_OK && folder != nullptr) builtin.folder = folder;
  curl_easy_cleanup(easy);
  return builtin;
}

bool is_regular_file(const std::string& path) {
  struct stat status {};
  return ::stat(path.c_str(), &status) == 0 && S_ISREG(status.st_mode);
}

FetchFailure failure_of(const Transfer& t, const S3Config* s3) {
  if (!t.too_large.empty()) {
    return {Kind::kTooLarge, 0,
            t.too_large + ", more than the " + std::to_string(t.max_bytes) + " bytes a read may return"};
  }
  if (t.cancelled) return {Kind::kCancelled, 0, "the store was closed"};
  if (!t.out_of_memory.empty()) return {Kind::kOther, 0, "out of memory for " + t.out_of_memory};
  const std::string detail = t.error[0] != '\0' ? std::string(t.error) : std::string(curl_easy_strerror(t.code));
  switch (t.code) {
    case CURLE_OK:
      break;
    case CURLE_WRITE_ERROR:
      if (t.error_body_cut) break;  // Its status says what failed.
      return {Kind::kOther, 0, detail};
    case CURLE_OPERATION_TIMEDOUT:
      return {Kind::kTimeout, 0, detail};
    case CURLE_COULDNT_CONNECT:
    case CURLE_COULDNT_RESOLVE_HOST:
    case CURLE_COULDNT_RESOLVE_PROXY:
    case CURLE_SEND_ERROR:
    case CURLE_RECV_ERROR:
    case CURLE_GOT_NOTHING:
    case CURLE_PARTIAL_FILE:
    case CURLE_HTTP2:
    case CURLE_HTTP2_STREAM:
    case CURLE_SSL_CONNECT_ERROR:
      return {Kind::kConnection, 0, detail};
    case CURLE_TOO_MANY_REDIRECTS:
      return {Kind::kOther, 0, "more than " + std::to_string(kMaxRedirects) + " redirects"};
    case CURLE_URL_MALFORMAT:
      return {Kind::kInvalid, 0, detail};
    case CURLE_UNSUPPORTED_PROTOCOL:
      // The URL's scheme was checked before: the server's reply (HTTP/0.9,
      // an unknown version) or its redirect (to file://) is what is refused.
      return {Kind::kOther, 0, "unusable reply: " + detail};
    case CURLE_OUT_OF_MEMORY:
      // libcurl says so, too, of a header line past its limit (100 KiB).
      if (t.status != 0) return {Kind::kOther, 0, "a header line of the reply past libcurl's 100 KiB, or " + detail};
      return {Kind::kOther, 0, detail};
    case CURLE_PEER_FAILED_VERIFICATION:
    case CURLE_SSL_CACERT_BADFILE: {
      // Where the trust came from (io/ca_certificates.h), and how to change it.
      std::string trust = " (verified against ";
      if (t.ca != nullptr && !t.ca->file.empty()) trust += t.ca->file;
      if (t.ca != nullptr && !t.ca->file.empty() && !t.ca->folder.empty()) trust += " and ";
      if (t.ca != nullptr && !t.ca->folder.empty()) trust += t.ca->folder;
      if (t.ca == nullptr || (t.ca->file.empty() && t.ca->folder.empty())) trust += "no CA certificates";
      return {Kind::kOther, 0, detail + trust + "; SSL_CERT_FILE, CURL_CA_BUNDLE or SSL_CERT_DIR name others)"};
    }
    default:
      return {Kind::kOther, 0, detail};
  }
  std::string reason = t.reason.empty() ? standard_reason(t.status) : t.reason;
  if (s3 != nullptr) {
    const std::string code = s3_error_code(t.error_body);
    if (!code.empty()) reason += " (" + code + ")";
    if ((t.status == 403 || t.status == 401) && t.unsigned_request) {
      reason += "; the request was unsigned (credentials: " + t.credentials_source + ")";
    }
    if (t.status == 301) reason += "; the bucket is in another region than " + s3->region;
  }
  FetchFailure failure{Kind::kStatus, static_cast<int>(t.status), reason};
  failure.retry_after = t.retry_after;
  return failure;
}

// Waits for the sockets of one CURLM's transfers, for a wake-up from
// another thread or for a deadline, and lets curl act on what is ready.
//
// On Linux, curl's multi_socket API over epoll: a wake-up costs what is
// ready, whatever the transfers in flight. curl_multi_poll and
// curl_multi_perform (the fallback elsewhere) visit every transfer at each
// wake-up: at 100 ms a request and ~3 000 images/s, several hundred of
// them thousands of times a second.
//
// Thread-safety: wake() from any thread; the rest from the loop thread.
class MultiDriver {
 public:
  explicit MultiDriver(CURLM* multi) : multi_(multi) {
#if defined(__linux__)
    epoll_ = ::epoll_create1(EPOLL_CLOEXEC);
    wake_ = ::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    if (epoll_ < 0 || wake_ < 0) {
      const int error = errno;
      close_descriptors();
      throw std::system_error(error, std::generic_category(), "HttpStore: epoll or eventfd");
    }
    epoll_event event{};
    event.events = EPOLLIN;
    event.data.fd = wake_;
    ::epoll_ctl(epoll_, EPOLL_CTL_ADD, wake_, &event);
    curl_multi_setopt(multi_, CURLMOPT_SOCKETFUNCTION, on_socket);
    curl_multi_setopt(multi_, CURLMOPT_SOCKETDATA, this);
    curl_multi_setopt(multi_, CURLMOPT_TIMERFUNCTION, on_timer);
    curl_multi_setopt(multi_, CURLMOPT_TIMERDATA, this);
#endif
  }

  ~MultiDriver() {
#if defined(__linux__)
    close_descriptors();
#endif
  }

  MultiDriver(const MultiDriver&) = delete;
  MultiDriver& operator=(const MultiDriver&) = delete;

  void wake() {
#if defined(__linux__)
    const uint64_t one = 1;
    // Fails only when the counter is full, which leaves it readable anyway.
    (void)!::write(wake_, &one, sizeof one);
#else
    curl_multi_wakeup(multi_);
#endif
  }

  // Lets curl start the transfers added since the last call, at once.
  void start_added() {
    int running = 0;
#if defined(__linux__)
    timer_.reset();
    curl_multi_socket_action(multi_, CURL_SOCKET_TIMEOUT, 0, &running);
#else
    curl_multi_perform(multi_, &running);
#endif
  }

  // Waits at most `max_wait` (less when curl has a deadline sooner), then
  // lets curl read, write, time out and finish what it can.
  void wait_and_act(std::chrono::milliseconds max_wait) {
    int running = 0;
#if defined(__linux__)
    long wait_ms = max_wait.count();
    if (timer_) {
      const auto left = std::chrono::ceil<std::chrono::milliseconds>(*timer_ - Clock::now()).count();
      wait_ms = std::clamp<long>(left, 0, wait_ms);
    }
    epoll_event events[kEventsPerWait];
    const int ready = ::epoll_wait(epoll_, events, kEventsPerWait, static_cast<int>(wait_ms));
    for (int i = 0; i < ready; ++i) {
      const int fd = events[i].data.fd;
      if (fd == wake_) {
        uint64_t count = 0;
        (void)!::read(wake_, &count, sizeof count);
        continue;
      }
      const uint32_t e = events[i].events;
      const int mask = ((e & EPOLLIN) ? CURL_CSELECT_IN : 0) | ((e & EPOLLOUT) ? CURL_CSELECT_OUT : 0) |
                       ((e & (EPOLLERR | EPOLLHUP)) ? CURL_CSELECT_ERR : 0);
      // A socket that an earlier action of this round closed is unknown to
      // curl now, which then does nothing.
      curl_multi_socket_action(multi_, fd, mask, &running);
    }
    if (timer_ && Clock::now() >= *timer_) {
      timer_.reset();
      curl_multi_socket_action(multi_, CURL_SOCKET_TIMEOUT, 0, &running);
    }
#else
    curl_multi_poll(multi_, nullptr, 0, static_cast<int>(max_wait.count()), nullptr);
    curl_multi_perform(multi_, &running);
#endif
  }

 private:
#if defined(__linux__)
  static constexpr int kEventsPerWait = 256;

  static int on_socket(CURL* /*easy*/, curl_socket_t socket, int what, void* self, void* /*socket_data*/) {
    const int epoll = static_cast<MultiDriver*>(self)->epoll_;
    if (what == CURL_POLL_REMOVE) {
      // Fails when curl closed it already, which removed it: nothing to undo.
      ::epoll_ctl(epoll, EPOLL_CTL_DEL, socket, nullptr);
      return 0;
    }
    epoll_event event{};
    event.events = ((what & CURL_POLL_IN) ? EPOLLIN : 0u) | ((what & CURL_POLL_OUT) ? EPOLLOUT : 0u);
    event.data.fd = socket;
    if (::epoll_ctl(epoll, EPOLL_CTL_MOD, socket, &event) == 0) return 0;
    // -1 (out of memory, too many watches): curl fails the transfer, which
    // would otherwise wait for events that never come.
    return errno == ENOENT && ::epoll_ctl(epoll, EPOLL_CTL_ADD, socket, &event) == 0 ? 0 : -1;
  }

  static int on_timer(CURLM* /*multi*/, long timeout_ms, void* self) {
    auto* driver = static_cast<MultiDriver*>(self);
    if (timeout_ms < 0) {
      driver->timer_.reset();
    } else {
      driver->timer_ = Clock::now() + std::chrono::milliseconds(timeout_ms);
    }
    return 0;
  }

  void close_descriptors() {
    if (epoll_ >= 0) ::close(epoll_);
    if (wake_ >= 0) ::close(wake_);
  }

  int epoll_ = -1;
  int wake_ = -1;                           // An eventfd: wake() makes it readable.
  std::optional<Clock::time_point> timer_;  // When curl wants CURL_SOCKET_TIMEOUT; none: no deadline.
#endif
  CURLM* multi_;
};

}  // namespace

void HttpStoreOptions::validate() const {
  check_config(std::isfinite(connect_timeout) && connect_timeout > 0,
               "HttpStore: connect_timeout must be a finite number of seconds > 0");
  check_config(std::isfinite(read_timeout) && read_timeout >= 1,
               "HttpStore: read_timeout must be a finite number of seconds >= 1");
  check_config(std::isfinite(first_slow_connect) && first_slow_connect > 0,
               "HttpStore: first_slow_connect must be a finite number of seconds > 0");
  check_config(max_read_bytes >= 0, "HttpStore: max_read_bytes must be >= 0");
  check_config(max_connections_per_host >= 1, "HttpStore: max_connections_per_host must be >= 1");
  check_config(initial_connections_per_host >= 1, "HttpStore: initial_connections_per_host must be >= 1");
  for (const auto& [name, value] : headers) {
    const auto bad = [](char c) { return c == '\r' || c == '\n' || c == '\0'; };
    check_config(!name.empty() && name.find(':') == std::string::npos && std::none_of(name.begin(), name.end(), bad) &&
                     std::none_of(value.begin(), value.end(), bad),
                 "HttpStore: header '" + name + "' is not a valid HTTP header (empty name, ':' or a line break)");
  }
}

class HttpStore::Loop {
 public:
  explicit Loop(HttpStoreOptions options) : options_(std::move(options)) {
    options_.validate();
    init_curl_once();
    ca_ = find_ca_certificates(process_env, is_regular_file, builtin_ca_certificates());
    for (const auto& [name, value] : options_.headers) http_headers_.add(name + ": " + value);
    if (options_.s3) s3_signer_.set(*options_.s3);
    if (options_.s3 && options_.s3->role_endpoint) {
      role_ = std::make_unique<RefreshingRoleCredentials>(*options_.s3->role_endpoint, ca_);
    }
    if (options_.gcs) gcs_signer_.set(*options_.gcs);
    multi_ = curl_multi_init();
    share_ = curl_share_init();
    if (multi_ == nullptr || share_ == nullptr) throw std::bad_alloc();
    // One thread uses the share, so it needs no lock callbacks.
    curl_share_setopt(share_, CURLSHOPT_SHARE, CURL_LOCK_DATA_DNS);
    curl_share_setopt(share_, CURLSHOPT_SHARE, CURL_LOCK_DATA_SSL_SESSION);
    curl_multi_setopt(multi_, CURLMOPT_PIPELINING, CURLPIPE_MULTIPLEX);
    rlimit files{};
    int idle_connections = options_.max_connections_per_host;
    if (::getrlimit(RLIMIT_NOFILE, &files) == 0 && files.rlim_cur != RLIM_INFINITY) {
      options_.max_connections_per_host =
          std::max(1, std::min(options_.max_connections_per_host, static_cast<int>(files.rlim_cur / 2)));
      // Idle sockets stay open between epochs, in each store of the process
      // (a training set's and a validation set's): a smaller share.
      idle_connections = std::min(options_.max_connections_per_host, static_cast<int>(files.rlim_cur / 8));
    }
    curl_multi_setopt(multi_, CURLMOPT_MAX_HOST_CONNECTIONS, static_cast<long>(options_.max_connections_per_host));
    // libcurl keeps at most 4 idle connections per transfer in flight unless
    // told otherwise: each time the reads in flight dipped (a full queue, a
    // pause) it closed the connections the next burst then opened again, a
    // TCP (and TLS) handshake per ~10 reads.
    curl_multi_setopt(multi_, CURLMOPT_MAXCONNECTS, static_cast<long>(std::max(4, idle_connections)));
    driver_.emplace(multi_);
    thread_ = std::thread([this] {
      set_current_thread_name("conveyor-http");
      run();
    });
  }

  ~Loop() {
    {
      std::lock_guard lock(mu_);
      stopping_ = true;
    }
    driver_->wake();
    thread_.join();
    for (CURL* easy : idle_) curl_easy_cleanup(easy);
    curl_multi_cleanup(multi_);
    curl_share_cleanup(share_);
  }

  Loop(const Loop&) = delete;
  Loop& operator=(const Loop&) = delete;

  // A role's credentials, when the store's S3 credentials come from a
  // container's endpoint or the instance metadata service; null otherwise.
  RefreshingRoleCredentials* role_credentials() { return role_.get(); }

  // The region S3 said `bucket` is in, once a reply said so.
  std::optional<std::string> bucket_region(const std::string& bucket) {
    std::lock_guard lock(regions_mu_);
    const auto it = bucket_regions_.find(bucket);
    return it == bucket_regions_.end() ? std::nullopt : std::optional<std::string>(it->second);
  }

  // Whether S3 answered `t` that its bucket is in another region than the
  // one it was signed for (a redirect or a refused signature naming the
  // region in x-amz-bucket-region); the region is then learnt.
  bool learnt_bucket_region(const Transfer& t) {
    const bool elsewhere = t.api == Api::kS3 && !t.bucket.empty() && !t.bucket_region.empty() &&
                           t.bucket_region != t.signed_region &&
                           (t.status == 301 || t.status == 307 || t.status == 400);
    if (elsewhere) {
      std::lock_guard lock(regions_mu_);
      bucket_regions_[t.bucket] = t.bucket_region;
    }
    return elsewhere;
  }

  // Performs the transfer `make` gives; when S3 answers that its bucket is
  // in another region (learnt_bucket_region), performs `make`'s new
  // transfer once more.
  std::shared_ptr<Transfer> perform_in_bucket_region(const std::function<std::shared_ptr<Transfer>()>& make) {
    std::shared_ptr<Transfer> t = make();
    perform(t);
    if (learnt_bucket_region(*t)) {
      t = make();
      perform(t);
    }
    return t;
  }

  // Submits `t`, whose on_done the loop thread runs when it ends, and
  // returns at once; false (and on_done never runs) once the store is
  // closing. Ends as cancelled soon after `cancellation` is cancelled.
  bool start(const std::shared_ptr<Transfer>& t, const Cancellation* cancellation) {
    if (cancellation != nullptr) {
      // Before submission, so that the loop never sees it half made; at
      // once when already cancelled. The subscription lives in `t` and goes
      // before it (complete()), so the raw pointer stays valid.
      t->cancelled_by.emplace(*cancellation, [this, raw = t.get()] {
        raw->abandoned.store(true);
        abandoned_any_.store(true);
        driver_->wake();
      });
    }
    try {
      if (submit(t)) driver_->wake();
    } catch (const FetchError&) {
      return false;
    }
    return true;
  }

  // Hands `t` to the loop thread; returns whether the loop must be woken:
  // not when a transfer submitted before is still to be taken (its wake
  // is pending), so that a burst of reads costs one wake-up. Throws
  // FetchError kCancelled once the store is closing.
  bool submit(const std::shared_ptr<Transfer>& t) {
    std::lock_guard lock(mu_);
    if (stopping_) throw FetchError({Kind::kCancelled, 0, "the store was closed"});
    submitted_.push_back(t);
    return submitted_.size() == 1;
  }

  // Runs `t` on the loop thread and waits for it. Throws FetchError
  // kCancelled when the calling thread's Cancellation is cancelled.
  void perform(const std::shared_ptr<Transfer>& t) {
    if (submit(t)) driver_->wake();
    // The loader's stop ends the wait at once: no polling while it waits.
    std::optional<Cancellation::Subscription> subscription;
    if (const Cancellation* cancellation = current_cancellation()) {
      subscription.emplace(*cancellation, [t] {
        {
          std::lock_guard lock(t->mu);
          t->stop_waiting = true;
        }
        t->cv.notify_all();
      });
    }
    {
      std::unique_lock lock(t->mu);
      t->cv.wait(lock, [&] { return t->done || t->stop_waiting; });
      if (t->done) {
        add_thread_queue_wait_ns(std::chrono::duration_cast<std::chrono::nanoseconds>(t->queue_wait).count());
        return;
      }
    }
    t->abandoned.store(true);
    abandoned_any_.store(true);
    driver_->wake();  // The loop removes the transfer at once.
    throw FetchError({Kind::kCancelled, 0, "the loader stopped"});
  }

  const HttpStoreOptions& options() const { return options_; }

  // The transfer of one attempt at read(url, offset, size). Throws
  // FetchError kInvalid for a URL it cannot read; when not `may_wait`,
  // CredentialsNotAtHand rather than reading a role's credentials.
  std::shared_ptr<Transfer> read_transfer(const std::string& url, uint64_t offset, int64_t size, bool may_wait = true);

  HttpStoreCounters counters() const {
    HttpStoreCounters counters;
    counters.requests = requests_.load();
    counters.connections = connections_.load();
    counters.bytes = bytes_.load();
    counters.overloaded = overloaded_.load();
    counters.connections_per_host = largest_limit_.load();
    counters.queued = queued_.load();
    return counters;
  }

 private:
  struct Host {
    explicit Host(const HttpStoreOptions& options)
        : limit(options.initial_connections_per_host, options.max_connections_per_host),
          first_slow_connect(options.first_slow_connect) {}
    ConnectionLimit limit;
    int active = 0;
    std::deque<std::shared_ptr<Transfer>> waiting;
    double first_slow_connect;
    double connect_seconds = 0;  // Smoothed time of new connections; 0 before the first.

    // How long a connect may take before it counts as an overload.
    double slow_connect_seconds() const {
      return connect_seconds > 0 ? std::max(kMinSlowConnect, kSlowConnectFactor * connect_seconds) : first_slow_connect;
    }
  };

  void run() {
    std::vector<std::shared_ptr<Transfer>> incoming;
    while (true) {
      {
        std::lock_guard lock(mu_);
        if (stopping_) break;
        incoming.swap(submitted_);
      }
      for (std::shared_ptr<Transfer>& t : incoming) {
        // Cancelled while submitted: drop_abandoned may have taken its flag
        // before it was here to be found.
        if (t->abandoned.load()) {
          complete(*t);
          continue;
        }
        Host& host = hosts_.try_emplace(t->host, options_).first->second;
        host.waiting.push_back(std::move(t));
      }
      incoming.clear();
      drop_abandoned();
      // Connections ready while curl starts transfers may admit more at once.
      while (start_admitted()) driver_->start_added();
      mark_queued(Clock::now());
      bool finished = false;
      int left = 0;
      while (CURLMsg* message = curl_multi_info_read(multi_, &left)) {
        if (message->msg == CURLMSG_DONE) {
          finish(message->easy_handle, message->data.result);
          finished = true;
        }
      }
      const Clock::time_point now = Clock::now();
      bool restarted = false;
      if (now - last_slow_check_ >= kSlowConnectCheck) {
        restarted = report_slow_connects(now);
        last_slow_check_ = now;
      }
      // A restarted connect is admitted again at once, not after a wait
      // (a whole kIdleWait when it was the only transfer).
      if (!finished && !restarted) driver_->wait_and_act(active_.empty() ? kIdleWait : kSlowConnectCheck);
    }
    // Stopping: whatever is still in flight or queued ends as cancelled.
    {
      std::lock_guard lock(mu_);
      incoming.swap(submitted_);
    }
    for (std::shared_ptr<Transfer>& t : incoming) {
      t->cancelled = true;
      complete(*t);
    }
    for (auto& [easy, t] : active_) {
      curl_multi_remove_handle(multi_, easy);
      curl_easy_cleanup(easy);
      t->cancelled = true;
      complete(*t);
    }
    active_.clear();
    for (auto& [name, host] : hosts_) {
      for (std::shared_ptr<Transfer>& t : host.waiting) {
        t->cancelled = true;
        complete(*t);
      }
    }
  }

  void drop_abandoned() {
    // Most rounds have none: no visit of every transfer then.
    if (!abandoned_any_.exchange(false)) return;
    for (auto it = active_.begin(); it != active_.end();) {
      if (it->second->abandoned.load()) {
        curl_multi_remove_handle(multi_, it->first);
        --hosts_.at(it->second->host).active;
        recycle(it->first);
        complete(*it->second);
        it = active_.erase(it);
      } else {
        ++it;
      }
    }
    for (auto& [name, host] : hosts_) {
      std::erase_if(host.waiting, [](const std::shared_ptr<Transfer>& t) {
        if (!t->abandoned.load()) return false;
        complete(*t);  // An asynchronous read's on_done must run.
        return true;
      });
    }
  }

  void update_largest_limit() {
    int largest = 0;
    for (const auto& [name, each] : hosts_) largest = std::max(largest, each.limit.value());
    largest_limit_.store(largest);
  }

  // Marks the transfers that this round's admissions left waiting for a
  // slot: only the newest of each queue need a look (the marked ones are its
  // front). Also counts them for counters().queued.
  void mark_queued(Clock::time_point now) {
    int queued = 0;
    for (auto& [name, host] : hosts_) {
      queued += static_cast<int>(host.waiting.size());
      for (auto it = host.waiting.rbegin(); it != host.waiting.rend() && !(*it)->queued; ++it) {
        (*it)->queued = true;
        (*it)->queued_since = now;
      }
    }
    queued_.store(queued);
  }

  // Adds the transfers their hosts' limits admit; returns whether any.
  bool start_admitted() {
    bool started = false;
    for (auto& [name, host] : hosts_) {
      if (!host.waiting.empty() && host.limit.waiting()) update_largest_limit();
      while (host.active < host.limit.value() && !host.waiting.empty()) {
        std::shared_ptr<Transfer> t = std::move(host.waiting.front());
        host.waiting.pop_front();
        CURL* easy = handle();
        t->counts_connection = host.limit.counts_connections() ? &host.limit : nullptr;
        t->quick_connect =
            std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(host.slow_connect_seconds()));
        configure(easy, *t);
        if (curl_multi_add_handle(multi_, easy) != CURLM_OK) {
          t->code = CURLE_FAILED_INIT;
          recycle(easy);
          complete(*t);
          continue;
        }
        t->in_flight_at_start = ++host.active;
        t->started = Clock::now();
        if (t->queued) t->queue_wait += t->started - t->queued_since;
        t->queued = false;
        active_.emplace(easy, std::move(t));
        started = true;
      }
    }
    return started;
  }

  CURL* handle() {
    if (idle_.empty()) {
      CURL* easy = curl_easy_init();
      if (easy == nullptr) throw std::bad_alloc();
      return easy;
    }
    CURL* easy = idle_.back();
    idle_.pop_back();
    curl_easy_reset(easy);
    return easy;
  }

  void recycle(CURL* easy) { idle_.push_back(easy); }

  void configure(CURL* easy, Transfer& t) {
    curl_easy_setopt(easy, CURLOPT_URL, t.url.c_str());
    curl_easy_setopt(easy, CURLOPT_SHARE, share_);
    curl_easy_setopt(easy, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(easy, CURLOPT_PROTOCOLS_STR, "http,https");
    curl_easy_setopt(easy, CURLOPT_ERRORBUFFER, t.error);
    curl_easy_setopt(easy, CURLOPT_HEADERFUNCTION, on_header);
    curl_easy_setopt(easy, CURLOPT_HEADERDATA, &t);
    curl_easy_setopt(easy, CURLOPT_WRITEFUNCTION, on_body);
    curl_easy_setopt(easy, CURLOPT_WRITEDATA, &t);
    curl_easy_setopt(easy, CURLOPT_BUFFERSIZE, 64L << 10);
    if (t.counts_connection != nullptr) {
      t.new_socket = false;
      curl_easy_setopt(easy, CURLOPT_SOCKOPTFUNCTION, on_new_socket);
      curl_easy_setopt(easy, CURLOPT_SOCKOPTDATA, &t);
      curl_easy_setopt(easy, CURLOPT_PREREQFUNCTION, on_connection_ready);
      curl_easy_setopt(easy, CURLOPT_PREREQDATA, &t);
    }
    t.ca = &ca_;
    curl_easy_setopt(easy, CURLOPT_CAINFO, ca_.file.empty() ? nullptr : ca_.file.c_str());
    curl_easy_setopt(easy, CURLOPT_CAPATH, ca_.folder.empty() ? nullptr : ca_.folder.c_str());
    curl_easy_setopt(easy, CURLOPT_CONNECTTIMEOUT_MS, static_cast<long>(std::ceil(options_.connect_timeout * 1000)));
    curl_easy_setopt(easy, CURLOPT_LOW_SPEED_LIMIT, HttpStoreOptions::kStallBytesPerSecond);
    curl_easy_setopt(easy, CURLOPT_LOW_SPEED_TIME, static_cast<long>(std::ceil(options_.read_timeout)));
    if (t.head) curl_easy_setopt(easy, CURLOPT_NOBODY, 1L);
    if (!t.range.empty()) curl_easy_setopt(easy, CURLOPT_RANGE, t.range.c_str());
    // A whole object stored compressed (S3's Content-Encoding: gzip) is
    // decoded, as fsspec's clients do; none is asked for ("identity").
    // Ranges are of the stored bytes: not decoded.
    if (t.range.empty() && !t.head) curl_easy_setopt(easy, CURLOPT_ACCEPT_ENCODING, "identity");
    if (t.api != Api::kHttp) {
      // Signed requests are not redirected: S3's redirects say the region is
      // wrong. A key's "." and ".." segments are part of the key: libcurl
      // would otherwise squash them and read another object.
      const S3Config& config = t.api == Api::kS3 ? *options_.s3 : *options_.gcs;
      const Signer& signer = t.api == Api::kS3 ? s3_signer_ : gcs_signer_;
      curl_easy_setopt(easy, CURLOPT_PATH_AS_IS, 1L);
      curl_easy_setopt(easy, CURLOPT_HTTPHEADER, t.role ? t.role_headers.list : signer.headers.list);
      if (!t.unsigned_request) {
        curl_easy_setopt(easy, CURLOPT_AWS_SIGV4, t.sigv4.empty() ? signer.sigv4.c_str() : t.sigv4.c_str());
        curl_easy_setopt(easy, CURLOPT_USERNAME, t.role ? t.role->access_key_id.c_str() : config.access_key_id.c_str());
        curl_easy_setopt(easy, CURLOPT_PASSWORD,
                         t.role ? t.role->secret_access_key.c_str() : config.secret_access_key.c_str());
      }
    } else {
      curl_easy_setopt(easy, CURLOPT_HTTPHEADER, http_headers_.list);
      curl_easy_setopt(easy, CURLOPT_FOLLOWLOCATION, 1L);
      curl_easy_setopt(easy, CURLOPT_MAXREDIRS, kMaxRedirects);
      curl_easy_setopt(easy, CURLOPT_REDIR_PROTOCOLS_STR, "http,https");
    }
  }

  // A transfer still in its TCP connect past its host's slow-connect bound
  // is an overload now, not when its SYN is retransmitted.
  // It is started again: its dropped SYN burdens no one, and waiting for the
  // retransmission would hold one of the host's slots for a second or more,
  // stalling the reads behind it after the limit was cut. Returns whether
  // any was started again.
  bool report_slow_connects(Clock::time_point now) {
    bool restarted = false;
    for (auto it = active_.begin(); it != active_.end();) {
      CURL* easy = it->first;
      Transfer& t = *it->second;
      Host& host = hosts_.at(t.host);
      // Stuck in the TCP connect: the name is resolved (a slow DNS is no
      // sign of an overloaded server) and no connection is made yet; TLS,
      // which comes after, is not counted either.
      curl_off_t lookup = 0, connect = 0;
      const double elapsed = std::chrono::duration<double>(now - t.started).count();
      const bool connect_time_known = host.connect_seconds > 0;
      if (t.slow_connect || (connect_time_known && elapsed < host.slow_connect_seconds()) ||
          curl_easy_getinfo(easy, CURLINFO_NAMELOOKUP_TIME_T, &lookup) != CURLE_OK ||
          curl_easy_getinfo(easy, CURLINFO_CONNECT_TIME_T, &connect) != CURLE_OK) {
        ++it;
        continue;
      }
      if (connect != 0 && !connect_time_known) {
        // Before the host's first answer, its first new connection made in
        // time gives the connect time (as finish() would: not one that got
        // through on a resent SYN, not a reused one): a first burst's
        // dropped SYNs are then seen past kSlowConnectFactor times it, not
        // past first_slow_connect.
        long connects = 0;
        const double seconds = static_cast<double>(connect - lookup) / 1e6;
        if (curl_easy_getinfo(easy, CURLINFO_NUM_CONNECTS, &connects) == CURLE_OK && connects > 0 && seconds > 0 &&
            seconds < host.slow_connect_seconds()) {
          host.connect_seconds = seconds;
        }
      }
      if (lookup == 0 || connect != 0 || elapsed - static_cast<double>(lookup) / 1e6 < host.slow_connect_seconds()) {
        ++it;
        continue;
      }
      t.slow_connect = true;
      if (host.limit.record(true, !host.waiting.empty(), now, t.started, t.in_flight_at_start)) {
        overloaded_.fetch_add(1);
      }
      if (t.connect_restarts >= kMaxConnectRestarts) {
        ++it;
        continue;
      }
      ++t.connect_restarts;
      t.slow_connect = false;
      curl_multi_remove_handle(multi_, easy);
      --host.active;
      recycle(easy);
      // Back to the front of the queue, for a slot again. The attempt waited
      // for the host too (its listen queue was full): that is queue wait.
      it->second->queued = true;
      it->second->queued_since = t.started;
      host.waiting.push_front(std::move(it->second));
      it = active_.erase(it);
      restarted = true;
    }
    return restarted;
  }

  void finish(CURL* easy, CURLcode code) {
    auto it = active_.find(easy);
    if (it == active_.end()) return;
    std::shared_ptr<Transfer> t = std::move(it->second);
    active_.erase(it);
    curl_multi_remove_handle(multi_, easy);
    t->code = code;
    if (code == CURLE_OK && t->head) {
      curl_off_t length = -1;
      curl_easy_getinfo(easy, CURLINFO_CONTENT_LENGTH_DOWNLOAD_T, &length);
      t->declared_length = length;
    }
    long connects = 0;
    curl_easy_getinfo(easy, CURLINFO_NUM_CONNECTS, &connects);
    curl_off_t lookup_micros = 0, connect_micros = 0;
    curl_easy_getinfo(easy, CURLINFO_NAMELOOKUP_TIME_T, &lookup_micros);
    curl_easy_getinfo(easy, CURLINFO_CONNECT_TIME_T, &connect_micros);
    requests_.fetch_add(1);
    connections_.fetch_add(connects);
    bytes_.fetch_add(static_cast<int64_t>(t->body.size()));
    Host& host = hosts_.at(t->host);
    // The TCP connect alone, as the live check measures it.
    const double connect_seconds = static_cast<double>(std::max<curl_off_t>(0, connect_micros - lookup_micros)) / 1e6;
    const bool slow_connect = t->slow_connect || (connects > 0 && connect_seconds >= host.slow_connect_seconds());
    if (code == CURLE_OK && connects > 0 && !slow_connect) {
      host.connect_seconds =
          host.connect_seconds > 0 ? 0.8 * host.connect_seconds + 0.2 * connect_seconds : connect_seconds;
    }
    const bool overloaded = code == CURLE_COULDNT_CONNECT || code == CURLE_SEND_ERROR || code == CURLE_RECV_ERROR ||
                            code == CURLE_GOT_NOTHING || slow_connect ||
                            (code == CURLE_OK && (t->status == 429 || t->status == 503));
    --host.active;
    if (host.limit.record(overloaded, !host.waiting.empty(), Clock::now(), t->started, t->in_flight_at_start)) {
      overloaded_.fetch_add(1);
    }
    update_largest_limit();
    recycle(easy);
    complete(*t);
  }

  // The one place a transfer ends: runs its on_done, else wakes its waiter.
  static void complete(Transfer& t) {
    if (t.on_done) {
      t.cancelled_by.reset();  // Waits for a cancellation callback under way.
      const std::function<void(Transfer&)> done = std::move(t.on_done);
      t.on_done = nullptr;
      done(t);
      return;
    }
    {
      std::lock_guard lock(t.mu);
      t.done = true;
    }
    t.cv.notify_all();
  }

  HttpStoreOptions options_;
  CaCertificates ca_;
  HeaderList http_headers_;
  // The headers and SigV4 provider string of signed requests, per API.
  struct Signer {
    HeaderList headers;
    std::string sigv4;
    void set(const S3Config& config) {
      headers.add(std::string("x-amz-content-sha256: ") + kEmptyPayloadSha256);
      if (!config.session_token.empty()) headers.add("x-amz-security-token: " + config.session_token);
      sigv4 = "aws:amz:" + config.region + ":s3";
    }
  };
  Signer s3_signer_;
  Signer gcs_signer_;
  std::unique_ptr<RefreshingRoleCredentials> role_;
  std::mutex regions_mu_;                              // Guards bucket_regions_.
  std::map<std::string, std::string> bucket_regions_;  // Learnt from S3's replies.
  CURLM* multi_ = nullptr;
  CURLSH* share_ = nullptr;
  std::optional<MultiDriver> driver_;  // Made with multi_; outlives its cleanup (which may close sockets).

  std::atomic<bool> abandoned_any_{false};  // A waiter gave up since the loop last looked.
  std::mutex mu_;                           // Guards submitted_ and stopping_.
  std::vector<std::shared_ptr<Transfer>> submitted_;
  bool stopping_ = false;

  // The loop thread's own.
  std::map<std::string, Host> hosts_;
  std::map<CURL*, std::shared_ptr<Transfer>> active_;
  std::vector<CURL*> idle_;
  Clock::time_point last_slow_check_{};

  std::atomic<int64_t> requests_{0};
  std::atomic<int64_t> connections_{0};
  std::atomic<int64_t> bytes_{0};
  std::atomic<int64_t> overloaded_{0};
  std::atomic<int> largest_limit_{0};
  std::atomic<int> queued_{0};  // Transfers waiting for a slot, as the last round left them.

  std::thread thread_;  // Last: started when everything above exists.
};

HttpStore::HttpStore(HttpStoreOptions options) : loop_(std::make_unique<Loop>(std::move(options))) {}

HttpStore::~HttpStore() = default;

const HttpStoreOptions& HttpStore::options() const { return loop_->options(); }

HttpStoreCounters HttpStore::counters() const { return loop_->counters(); }

namespace {

// Thrown by sign() that may not wait, for a role's credentials that are not
// at hand (RefreshingRoleCredentials::at_hand).
struct CredentialsNotAtHand {};

// Fills `t`'s signing fields for a request of `api` to `bucket` under
// `config` (the store's S3 or GCS settings), and returns the settings its
// URL is made with: `config` in the region S3 named for the bucket (S3
// only), when that is another. With a role's credentials (`role`, S3
// only), reads them: on the caller's thread, since a read of the metadata
// service may take a second; unless not `may_wait`, when only credentials
// at hand sign (else CredentialsNotAtHand).
S3Config sign(Transfer& t, Api api, const S3Config& config, const std::string& bucket,
              const std::optional<std::string>& region, RefreshingRoleCredentials* role, bool may_wait = true) {
  t.api = api;
  t.unsigned_request = config.anonymous;
  t.credentials_source = config.credentials_source;
  if (api != Api::kS3) return config;
  t.bucket = bucket;
  S3Config used = config;
  if (region && *region != config.region) {
    t.sigv4 = "aws:amz:" + *region + ":s3";
    used = in_region(config, *region);
  }
  t.signed_region = used.region;
  if (role != nullptr) {
    if (may_wait) {
      t.role = role->current();
    } else {
      std::optional<std::shared_ptr<const RoleCredentials>> at_hand = role->at_hand();
      if (!at_hand) throw CredentialsNotAtHand{};
      t.role = std::move(*at_hand);  // Null: none to be had, unsigned.
    }
    if (t.role) {
      t.credentials_source = t.role->from;
      t.role_headers.add(std::string("x-amz-content-sha256: ") + kEmptyPayloadSha256);
      // A credential_process may give long-term keys, with no session.
      if (!t.role->session_token.empty()) t.role_headers.add("x-amz-security-token: " + t.role->session_token);
    } else {
      t.unsigned_request = true;
      t.credentials_source = "none found (looked in " + config.looked_in + ", then " + role->source() + ")";
    }
  }
  return used;
}

// The transfer for `url`: an s3:// URL becomes its http(s) URL under the
// store's S3Config (signed by sign()); any other scheme but http(s) is invalid.
std::shared_ptr<Transfer> transfer_for(const std::string& url, const HttpStoreOptions& options,
                                       const std::function<std::optional<std::string>(const std::string&)>& region_of,
                                       RefreshingRoleCredentials* role, bool may_wait = true) {
  auto t = std::make_shared<Transfer>();
  const std::string scheme = ascii_lower(url.substr(0, url.find("://")));
  if (scheme == "s3" || scheme == "gs") {
    const bool gcs = scheme == "gs";
    const std::optional<S3Config>& config = gcs ? options.gcs : options.s3;
    if (!config) {
      throw FetchError({Kind::kInvalid, 0,
                        gcs ? "this store has no GCS settings (HMAC keys) for gs:// URLs"
                            : "this store has no S3 settings for s3:// URLs"});
    }
    try {
      const std::string s3_url = "s3://" + url.substr(5);
      const std::string bucket = split_s3_url(s3_url).first;
      t->url = s3_http_url(gcs ? sign(*t, Api::kGcs, *config, bucket, std::nullopt, nullptr)
                               : sign(*t, Api::kS3, *config, bucket, region_of(bucket), role, may_wait),
                           s3_url);
    } catch (const Error& e) {
      throw FetchError({Kind::kInvalid, 0, e.cause()});
    }
  } else if (scheme == "http" || scheme == "https") {
    t->url = url;
  } else {
    throw FetchError({Kind::kInvalid, 0, "not an http(s)://, s3:// or gs:// URL"});
  }
  t->host = host_of(t->url);
  t->max_bytes = options.max_read_bytes;
  return t;
}

}  // namespace

namespace {

// The S3 settings a transfer of `api` was signed with; null for plain HTTP.
const S3Config* signing_config(Api api, const HttpStoreOptions& options) {
  if (api == Api::kS3 && options.s3) return &*options.s3;
  if (api == Api::kGcs && options.gcs) return &*options.gcs;
  return nullptr;
}

// The reply of `t`, performed on `loop`: its body, or the FetchError of its failure.
void check_reply(const Transfer& t, const HttpStoreOptions& options) {
  if (t.code != CURLE_OK || !t.too_large.empty() || t.cancelled || t.status < 200 || t.status >= 300) {
    throw FetchError(failure_of(t, signing_config(t.api, options)));
  }
}

}  // namespace

namespace {

// The bytes [offset, offset + size) (all when `size` < 0) of `t`'s reply;
// throws its FetchError.
std::vector<uint8_t> read_reply(Transfer& t, const HttpStoreOptions& options, uint64_t offset, int64_t size) {
  check_reply(t, options);
  // Another range than the one asked for (a faulty server or proxy) would
  // be read as its bytes; one that stops short is the caller's to name.
  const auto last = static_cast<int64_t>(offset) + size - 1;
  if (size > 0 && t.status == 206 && t.range_first >= 0 && t.range_first != static_cast<int64_t>(offset)) {
    throw FetchError({Kind::kOther, 0,
                      "asked for bytes " + std::to_string(offset) + "-" + std::to_string(last) +
                          ", the server answered with bytes " + std::to_string(t.range_first) + "-" +
                          std::to_string(t.range_last) + " (Content-Range)"});
  }
  // More than asked for, from the first byte asked for: the bytes asked for.
  if (size > 0 && t.status == 206 && t.body.size() > static_cast<size_t>(size))
    t.body.resize(static_cast<size_t>(size));
  if (size > 0 && t.status == 200) {
    // The server ignored the range and sent the whole object.
    const size_t begin = std::min<size_t>(offset, t.body.size());
    const size_t end = std::min<size_t>(begin + static_cast<size_t>(size), t.body.size());
    return {t.body.begin() + static_cast<std::ptrdiff_t>(begin), t.body.begin() + static_cast<std::ptrdiff_t>(end)};
  }
  return std::move(t.body);
}

// A read of `size` bytes refused before any request: none to make (0), or
// more than a read may return.
std::optional<FetchFailure> refused_read_size(int64_t size, const HttpStoreOptions& options) {
  if (size <= options.max_read_bytes) return std::nullopt;
  return FetchFailure{Kind::kTooLarge, 0,
                      std::to_string(size) + " bytes asked for, more than the " +
                          std::to_string(options.max_read_bytes) + " bytes a read may return"};
}

}  // namespace

std::shared_ptr<Transfer> HttpStore::Loop::read_transfer(const std::string& url, uint64_t offset, int64_t size,
                                                         bool may_wait) {
  std::shared_ptr<Transfer> t = transfer_for(
      url, options_, [this](const std::string& bucket) { return bucket_region(bucket); }, role_.get(), may_wait);
  // A whole object is one plain GET: a range would change what servers
  // answer (416 for an empty object).
  if (size > 0) t->range = std::to_string(offset) + "-" + std::to_string(offset + static_cast<uint64_t>(size) - 1);
  return t;
}

std::vector<uint8_t> HttpStore::read(const std::string& url, uint64_t offset, int64_t size) const {
  const HttpStoreOptions& options = loop_->options();
  if (size == 0) return {};
  if (std::optional<FetchFailure> refused = refused_read_size(size, options)) throw FetchError(*refused);
  std::shared_ptr<Transfer> t =
      loop_->perform_in_bucket_region([&] { return loop_->read_transfer(url, offset, size); });
  return read_reply(*t, options, offset, size);
}

bool HttpStore::start_read(const std::string& url, uint64_t offset, int64_t size, const Cancellation* cancellation,
                           std::function<void(RemoteAttempt)> done) const {
  const HttpStoreOptions& options = loop_->options();
  if (size == 0 || refused_read_size(size, options)) return false;
  std::shared_ptr<Transfer> t;
  try {
    t = loop_->read_transfer(url, offset, size, /*may_wait=*/false);
  } catch (const FetchError&) {
    return false;  // read() says what is wrong with the URL.
  } catch (const CredentialsNotAtHand&) {
    return false;  // read() waits for them (a network read, about hourly).
  }
  t->on_done = [loop = loop_.get(), offset, size, done = std::move(done)](Transfer& t) {
    RemoteAttempt attempt;
    attempt.queue_wait = std::chrono::duration_cast<std::chrono::nanoseconds>(t.queue_wait);
    try {
      if (t.abandoned.load()) {
        attempt.failure = FetchFailure{Kind::kCancelled, 0, "the loader stopped"};
      } else if (!loop->learnt_bucket_region(t)) {
        // (Else neither: the read is worth making anew, in the bucket's region.)
        attempt.data = read_reply(t, loop->options(), offset, size);
      }
    } catch (const FetchError& e) {
      attempt.failure = e.failure();
    } catch (...) {
      // Out of memory: neither, and the read is made anew.
      attempt.data.reset();
      attempt.failure.reset();
    }
    done(std::move(attempt));
  };
  return loop_->start(t, cancellation);
}

RemoteObjectInfo HttpStore::fetch(const std::string& url, std::vector<uint8_t>* data, int64_t max_bytes) const {
  const HttpStoreOptions& options = loop_->options();
  const auto region_of = [this](const std::string& bucket) { return loop_->bucket_region(bucket); };
  std::shared_ptr<Transfer> t = loop_->perform_in_bucket_region([&] {
    std::shared_ptr<Transfer> made = transfer_for(url, options, region_of, loop_->role_credentials());
    made->max_bytes = std::min(made->max_bytes, max_bytes);
    return made;
  });
  check_reply(*t, options);
  *data = std::move(t->body);
  return {data->size(), t->etag.empty() ? t->last_modified : t->etag};
}

RemoteObjectInfo HttpStore::stat(const std::string& url) const {
  const HttpStoreOptions& options = loop_->options();
  const auto region_of = [this](const std::string& bucket) { return loop_->bucket_region(bucket); };
  std::shared_ptr<Transfer> t = loop_->perform_in_bucket_region([&] {
    std::shared_ptr<Transfer> made = transfer_for(url, options, region_of, loop_->role_credentials());
    made->head = true;
    return made;
  });
  if (t->code == CURLE_OK && (t->status == 403 || t->status == 405 || t->status == 501)) {
    // A URL presigned for GET refuses a HEAD (S3 signs the method): the
    // size is the total of a GET of its first byte (or a whole reply's
    // Content-Length, whose body is refused past that byte).
    std::shared_ptr<Transfer> get = loop_->perform_in_bucket_region([&] {
      std::shared_ptr<Transfer> made = transfer_for(url, options, region_of, loop_->role_credentials());
      made->range = "0-0";
      made->max_bytes = 1;
      return made;
    });
    // A transfer that failed before its headers ended is its failure (retried).
    if (get->code != CURLE_OK && get->too_large.empty()) check_reply(*get, options);
    // 206: "bytes 0-0/SIZE"; 416 (an empty object): "bytes */0"; 200: the whole object's length.
    const int64_t size = get->status == 206 || get->status == 416 ? get->range_total
                         : get->status == 200                     ? get->declared_length
                                                                  : -1;
    if (size < 0) {
      if (get->status != 200 && get->status != 206) check_reply(*get, options);  // Its failure: the URL's.
      throw FetchError({Kind::kOther, 0, "the server refuses a HEAD and gives no size in a GET's reply"});
    }
    return {static_cast<uint64_t>(size), get->etag.empty() ? get->last_modified : get->etag};
  }
  check_reply(*t, options);
  if (t->declared_length < 0) throw FetchError({Kind::kOther, 0, "the server gives no Content-Length to a HEAD"});
  return {static_cast<uint64_t>(t->declared_length), t->etag.empty() ? t->last_modified : t->etag};
}

uint64_t HttpStore::size(const std::string& url) const { return stat(url).size; }

}  // namespace conveyor

namespace conveyor {

std::vector<RemoteObject> HttpStore::list(const std::string& prefix) const {
  const HttpStoreOptions& options = loop_->options();
  const std::string scheme = ascii_lower(prefix.substr(0, std::min(prefix.size(), prefix.find("://"))));
  if (scheme != "s3" && scheme != "gs")
    throw FetchError({Kind::kInvalid, 0, "only s3:// and gs:// prefixes can be listed"});
  const Api api = scheme == "gs" ? Api::kGcs : Api::kS3;
  const S3Config* config = signing_config(api, options);
  if (config == nullptr) {
    throw FetchError(
        {Kind::kInvalid, 0,
         "this store has no " + std::string(api == Api::kGcs ? "GCS" : "S3") + " settings for " + scheme + ":// URLs"});
  }
  std::pair<std::string, std::string> bucket_and_key;
  try {
    bucket_and_key = split_s3_url("s3://" + prefix.substr(5));
  } catch (const Error& e) {
    throw FetchError({Kind::kInvalid, 0, e.cause()});
  }
  // Named, not bound: the page's lambda captures them (clang 14 cannot capture bindings).
  const std::string& bucket = bucket_and_key.first;
  const std::string& key_prefix = bucket_and_key.second;
  std::vector<RemoteObject> objects;
  std::string token;
  std::set<std::string> tokens_seen;
  do {
    std::shared_ptr<Transfer> t = loop_->perform_in_bucket_region([&] {
      auto made = std::make_shared<Transfer>();
      const S3Config in_bucket_region =
          api == Api::kS3 ? sign(*made, api, *config, bucket, loop_->bucket_region(bucket), loop_->role_credentials())
                          : sign(*made, api, *config, bucket, std::nullopt, nullptr);
      made->url = s3_list_url(in_bucket_region, bucket, key_prefix, token);
      made->host = host_of(made->url);
      made->max_bytes = options.max_read_bytes;
      return made;
    });
    if (t->code != CURLE_OK || !t->too_large.empty() || t->cancelled || t->status < 200 || t->status >= 300) {
      throw FetchError(failure_of(*t, config));
    }
    S3ListPage page;
    try {
      page = parse_s3_list_page(std::string_view(reinterpret_cast<const char*>(t->body.data()), t->body.size()));
    } catch (const Error& e) {
      throw FetchError({Kind::kOther, 0, e.cause()});
    }
    for (auto& [key, size] : page.objects) objects.push_back({scheme + "://" + bucket + "/" + key, size});
    if (!page.next_continuation_token.empty() && !tokens_seen.insert(page.next_continuation_token).second) {
      throw FetchError({Kind::kOther, 0,
                        "the listing repeats a continuation token at page " + std::to_string(tokens_seen.size() + 1) +
                            " (a faulty server)"});
    }
    token = std::move(page.next_continuation_token);
  } while (!token.empty());
  return objects;
}

}  // namespace conveyor
