#pragma once

// Test support (not installed): a scripted HTTP server on 127.0.0.1 for the
// HttpStore tests. Each connection runs on its own thread; each request's
// head is parsed and handed to the test's handler, which writes whatever
// reply it wants (well-formed or not, whole or trickled, or nothing) through
// the connection. The destructor closes every connection and joins.

#include <atomic>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

namespace conveyor::detail {

struct HttpTestRequest {
  std::string method;
  std::string target;                          ///< "/path?query" as sent.
  std::map<std::string, std::string> headers;  ///< Names lower-cased.
  std::string body;                            ///< Content-Length bytes, when given.
};

class HttpTestConnection {
 public:
  explicit HttpTestConnection(int fd) : fd_(fd) {}
  /// Sends `data` whole; false once the client hung up or the server stops.
  bool send(std::string_view data);
  /// Waits until the client hangs up or the server stops (no reply is sent).
  void wait_for_hang_up();
  /// Whether the server is stopping: a handler that stalls should return.
  bool stopping() const;

 private:
  friend class HttpTestServer;
  int fd_;
  const std::atomic<bool>* stopping_ = nullptr;
};

class HttpTestServer {
 public:
  /// Called for each request; returns whether the connection stays open for
  /// the next request (keep-alive).
  using Handler = std::function<bool(const HttpTestRequest&, HttpTestConnection&)>;

  explicit HttpTestServer(Handler handler);
  ~HttpTestServer();
  HttpTestServer(const HttpTestServer&) = delete;
  HttpTestServer& operator=(const HttpTestServer&) = delete;

  /// "http://127.0.0.1:PORT" + path.
  std::string url(std::string_view path) const;
  int port() const { return port_; }
  /// Every request seen so far.
  std::vector<HttpTestRequest> requests() const;
  /// Connections accepted so far, and those whose client has hung up.
  int connections() const { return connections_.load(); }
  int hung_up() const { return hung_up_.load(); }
  /// Waits until at least `count` requests were seen.
  void wait_for_requests(size_t count) const;
  /// Waits until at least `count` connections were hung up by the client.
  void wait_for_hang_ups(int count) const;

  /// A whole reply: status line, Content-Length and `body`.
  static std::string reply(int status, std::string_view reason, std::string_view body,
                           std::string_view extra_headers = "");

 private:
  void accept_loop();
  void serve(int fd);

  Handler handler_;
  int listener_ = -1;
  int port_ = 0;
  std::atomic<bool> stopping_{false};
  std::atomic<int> connections_{0};
  std::atomic<int> hung_up_{0};
  mutable std::mutex mu_;
  std::vector<HttpTestRequest> requests_;
  std::vector<int> fds_;
  std::vector<std::thread> threads_;
  std::thread acceptor_;
};

}  // namespace conveyor::detail
