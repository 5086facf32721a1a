// Test helper: a cpp-httplib server on 127.0.0.1 at a free port, serving on its own thread from
// start() until destruction — the one way the fake Hub and fake chat-completions servers run —
// and RequestLog, the requests such a server saw.
// Only for tests that link PkgConfig::HTTPLIB (tests/datasets, tests/graders, tests/hostile).
// RawHttpResponder answers every connection with bytes given verbatim (header values holding NUL
// or a bare newline, which cpp-httplib will not send).
#pragma once

#include <httplib.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <functional>

#include <chrono>
#include <mutex>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

namespace kvb::test {

/// A local HTTP server: register routes on server(), then start(). Not copyable or movable.
class LocalHttpServer {
 public:
  LocalHttpServer() = default;
  LocalHttpServer(const LocalHttpServer&) = delete;
  LocalHttpServer& operator=(const LocalHttpServer&) = delete;
  /// Stops the server and joins its thread (when started).
  ~LocalHttpServer() {
    if (!thread_.joinable()) return;
    srv_.stop();
    thread_.join();
  }

  /// The underlying server, for registering routes before start().
  httplib::Server& server() { return srv_; }

  /// Binds a free port on 127.0.0.1 and serves on a background thread; returns once the server
  /// accepts connections. Throws std::runtime_error when no port can be bound.
  void start() {
    port_ = srv_.bind_to_any_port("127.0.0.1");
    if (port_ <= 0) throw std::runtime_error("LocalHttpServer: cannot bind a port on 127.0.0.1");
    thread_ = std::thread([this] { srv_.listen_after_bind(); });
    while (!srv_.is_running()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }

  /// The bound port (0 before start()).
  int port() const { return port_; }
  /// "http://127.0.0.1:PORT" (no trailing slash).
  std::string url() const { return "http://127.0.0.1:" + std::to_string(port_); }

 private:
  httplib::Server srv_;
  int port_ = 0;
  std::thread thread_;
};

/// The requests a fake server saw, one line each (its handlers choose the line), in arrival
/// order; safe to use from the server's thread and the test's.
class RequestLog {
 public:
  /// Appends one request's line.
  void add(std::string line) {
    std::lock_guard<std::mutex> g(mu_);
    lines_.push_back(std::move(line));
  }
  /// A copy of the lines so far.
  std::vector<std::string> lines() const {
    std::lock_guard<std::mutex> g(mu_);
    return lines_;
  }
  /// Forgets every line.
  void clear() {
    std::lock_guard<std::mutex> g(mu_);
    lines_.clear();
  }

 private:
  mutable std::mutex mu_;
  std::vector<std::string> lines_;
};

/// A one-thread TCP server on 127.0.0.1 at a free port: for each connection it reads the request
/// head (up to the blank line), writes `reply(request head)` verbatim and closes the connection.
/// For hostile HTTP replies a real server library refuses to produce. Not copyable or movable.
class RawHttpResponder {
 public:
  /// Starts serving; throws std::runtime_error when no port can be bound.
  explicit RawHttpResponder(std::function<std::string(const std::string& head)> reply) : reply_(std::move(reply)) {
    fd_ = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof a;
    if (fd_ < 0 || ::bind(fd_, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 || ::listen(fd_, 16) != 0 ||
        ::getsockname(fd_, reinterpret_cast<sockaddr*>(&a), &len) != 0)
      throw std::runtime_error("RawHttpResponder: cannot listen on 127.0.0.1");
    port_ = ntohs(a.sin_port);
    thread_ = std::thread([this] {
      while (!stop_) {
        const int c = ::accept(fd_, nullptr, nullptr);
        if (c < 0) continue;
        std::string head;
        char buf[4096];
        while (head.find("\r\n\r\n") == std::string::npos && head.size() < (1 << 20)) {
          const ssize_t n = ::recv(c, buf, sizeof buf, 0);
          if (n <= 0) break;
          head.append(buf, static_cast<size_t>(n));
        }
        if (!stop_) {
          const std::string out = reply_(head);
          for (size_t done = 0; done < out.size();) {
            const ssize_t n = ::send(c, out.data() + done, out.size() - done, MSG_NOSIGNAL);
            if (n <= 0) break;
            done += static_cast<size_t>(n);
          }
        }
        ::close(c);
      }
    });
  }
  RawHttpResponder(const RawHttpResponder&) = delete;
  RawHttpResponder& operator=(const RawHttpResponder&) = delete;
  /// Stops accepting (one last connection wakes the thread) and joins the thread.
  ~RawHttpResponder() {
    stop_ = true;
    const int c = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    a.sin_port = htons(static_cast<uint16_t>(port_));
    if (c >= 0) {
      (void)::connect(c, reinterpret_cast<sockaddr*>(&a), sizeof a);
      ::close(c);
    }
    thread_.join();
    ::close(fd_);
  }
  /// "http://127.0.0.1:PORT" (no trailing slash).
  std::string url() const { return "http://127.0.0.1:" + std::to_string(port_); }

 private:
  std::function<std::string(const std::string&)> reply_;
  int fd_ = -1;
  int port_ = 0;
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

}  // namespace kvb::test
