// Test helper: a cpp-httplib server on 127.0.0.1 at a free port, serving on its own thread from
// start() until destruction — the one way the fake Hub and fake chat-completions servers run.
// Only for tests that link PkgConfig::HTTPLIB (tests/datasets, tests/graders).
#pragma once

#include <httplib.h>

#include <chrono>
#include <stdexcept>
#include <string>
#include <thread>

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

}  // namespace kvb::test
