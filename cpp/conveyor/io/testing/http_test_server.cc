#include "conveyor/io/testing/http_test_server.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <chrono>
#include <stdexcept>

namespace conveyor::detail {

namespace {

// Waits for `fd` to be readable in slices, so that a stopping server is noticed.
bool wait_readable(int fd, const std::atomic<bool>& stopping) {
  while (!stopping.load()) {
    pollfd p{fd, POLLIN, 0};
    const int ready = ::poll(&p, 1, 20);
    if (ready > 0) return true;
    if (ready < 0 && errno != EINTR) return false;
  }
  return false;
}

std::string lower(std::string text) {
  std::transform(text.begin(), text.end(), text.begin(), [](unsigned char c) { return std::tolower(c); });
  return text;
}

}  // namespace

bool HttpTestConnection::send(std::string_view data) {
  while (!data.empty()) {
    if (stopping()) return false;
    pollfd p{fd_, POLLOUT, 0};
    if (::poll(&p, 1, 20) <= 0) continue;
    const ssize_t sent = ::send(fd_, data.data(), data.size(), MSG_NOSIGNAL);
    if (sent <= 0) return false;
    data.remove_prefix(static_cast<size_t>(sent));
  }
  return true;
}

void HttpTestConnection::wait_for_hang_up() {
  char byte;
  while (wait_readable(fd_, *stopping_)) {
    if (::recv(fd_, &byte, 1, 0) <= 0) return;
  }
}

bool HttpTestConnection::stopping() const { return stopping_->load(); }

HttpTestServer::HttpTestServer(Handler handler) : handler_(std::move(handler)) {
  listener_ = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t length = sizeof address;
  if (listener_ < 0 || ::bind(listener_, reinterpret_cast<sockaddr*>(&address), sizeof address) != 0 ||
      ::listen(listener_, 128) != 0 || ::getsockname(listener_, reinterpret_cast<sockaddr*>(&address), &length) != 0) {
    throw std::runtime_error("HttpTestServer: cannot listen on 127.0.0.1");
  }
  port_ = ntohs(address.sin_port);
  acceptor_ = std::thread([this] { accept_loop(); });
}

HttpTestServer::~HttpTestServer() {
  stopping_.store(true);
  acceptor_.join();
  std::vector<std::thread> threads;
  {
    std::lock_guard lock(mu_);
    threads.swap(threads_);
  }
  for (std::thread& thread : threads) thread.join();
  ::close(listener_);
}

std::string HttpTestServer::url(std::string_view path) const {
  return "http://127.0.0.1:" + std::to_string(port_) + std::string(path);
}

std::vector<HttpTestRequest> HttpTestServer::requests() const {
  std::lock_guard lock(mu_);
  return requests_;
}

void HttpTestServer::wait_for_requests(size_t count) const {
  while (requests().size() < count) std::this_thread::sleep_for(std::chrono::milliseconds(2));
}

void HttpTestServer::wait_for_hang_ups(int count) const {
  while (hung_up_.load() < count) std::this_thread::sleep_for(std::chrono::milliseconds(2));
}

std::string HttpTestServer::reply(int status, std::string_view reason, std::string_view body,
                                  std::string_view extra_headers) {
  return "HTTP/1.1 " + std::to_string(status) + " " + std::string(reason) +
         "\r\nContent-Length: " + std::to_string(body.size()) + "\r\n" + std::string(extra_headers) + "\r\n" +
         std::string(body);
}

void HttpTestServer::accept_loop() {
  while (wait_readable(listener_, stopping_)) {
    const int fd = ::accept(listener_, nullptr, nullptr);
    if (fd < 0) continue;
    connections_.fetch_add(1);
    std::lock_guard lock(mu_);
    threads_.emplace_back([this, fd] { serve(fd); });
  }
}

void HttpTestServer::serve(int fd) {
  HttpTestConnection connection(fd);
  connection.stopping_ = &stopping_;
  std::string received;
  bool open = true;
  while (open) {
    size_t end;
    while ((end = received.find("\r\n\r\n")) == std::string::npos) {
      char buffer[4096];
      if (!wait_readable(fd, stopping_)) {
        open = false;
        break;
      }
      const ssize_t got = ::recv(fd, buffer, sizeof buffer, 0);
      if (got <= 0) {
        if (!stopping_.load()) hung_up_.fetch_add(1);
        open = false;
        break;
      }
      received.append(buffer, static_cast<size_t>(got));
    }
    if (!open) break;
    HttpTestRequest request;
    const std::string head = received.substr(0, end);
    received.erase(0, end + 4);
    size_t line_end = head.find("\r\n");
    const std::string first = head.substr(0, line_end);
    const size_t space = first.find(' ');
    request.method = first.substr(0, space);
    request.target = first.substr(space + 1, first.rfind(' ') - space - 1);
    while (line_end != std::string::npos) {
      const size_t next = head.find("\r\n", line_end + 2);
      const std::string line =
          head.substr(line_end + 2, next == std::string::npos ? std::string::npos : next - line_end - 2);
      const size_t colon = line.find(':');
      if (colon != std::string::npos) {
        request.headers[lower(line.substr(0, colon))] = line.substr(line.find_first_not_of(' ', colon + 1));
      }
      line_end = next;
    }
    if (const auto length = request.headers.find("content-length"); length != request.headers.end()) {
      const size_t size = std::stoul(length->second);
      while (received.size() < size) {
        char buffer[4096];
        if (!wait_readable(fd, stopping_)) break;
        const ssize_t got = ::recv(fd, buffer, sizeof buffer, 0);
        if (got <= 0) break;
        received.append(buffer, static_cast<size_t>(got));
      }
      request.body = received.substr(0, size);
      received.erase(0, std::min(size, received.size()));
    }
    {
      std::lock_guard lock(mu_);
      requests_.push_back(request);
    }
    open = handler_(request, connection);
    if (!open) {
      // Wait for the client to hang up (unless stopping), so that hung_up() counts it.
      ::shutdown(fd, SHUT_WR);
      connection.wait_for_hang_up();
      if (!stopping_.load()) hung_up_.fetch_add(1);
    }
  }
  ::close(fd);
}

}  // namespace conveyor::detail
