#pragma once
// A real redis-server on a free loopback port for the life of the object.
#include <chrono>
#include <csignal>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>
#include <thread>

#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include "comm/child_process.h"
#include "comm/store.h"

namespace ntp::comm::testing {

inline int free_loopback_port() {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr));
  socklen_t len = sizeof(addr);
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
  ::close(fd);
  return ntohs(addr.sin_port);
}

class RedisServer {
 public:
  static constexpr const char* kBinary = "/usr/bin/redis-server";

  static bool available() { return ::access(kBinary, X_OK) == 0; }

  // `password`: started with requirepass (clients need NTP_REDIS_PASSWORD);
  // `extra`: more server arguments.
  explicit RedisServer(std::string password = "", std::vector<std::string> extra = {})
      : port_(free_loopback_port()), password_(std::move(password)), extra_(std::move(extra)) {
    start();
  }

  ~RedisServer() { stop(); }

  // Stops the server (its keys are lost) and starts a new one on the same port.
  void restart(std::chrono::milliseconds down = std::chrono::milliseconds(0)) {
    stop();
    std::this_thread::sleep_for(down);
    start();
  }

  void stop() {
    if (!process_) return;
    process_->signal(SIGTERM);
    if (!process_->wait_for(std::chrono::seconds(5))) process_->signal(SIGKILL);
    process_.reset();
  }

  void start() {
    std::vector<std::string> argv = {kBinary, "--port", std::to_string(port_), "--bind", "127.0.0.1", "--save", "",
                                     "--appendonly", "no", "--daemonize", "no", "--loglevel", "warning"};
    if (!password_.empty()) {
      argv.push_back("--requirepass");
      argv.push_back(password_);
    }
    argv.insert(argv.end(), extra_.begin(), extra_.end());
    process_ = std::make_unique<ChildProcess>(argv, std::vector<std::string>{}, "/dev/null");
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    while (std::chrono::steady_clock::now() < deadline) {
      if (answers()) return;
      if (process_->wait_for(std::chrono::milliseconds(50))) break;  // exited: port taken?
    }
    throw std::runtime_error("redis-server did not come up on port " + std::to_string(port_));
  }

  // Sends the server a signal (SIGSTOP: it stops answering, as a network
  // cut looks to its clients; SIGCONT: back).
  void signal(int sig) {
    if (process_) process_->signal(sig);
  }

  std::string spec(const std::string& name_space = "") const {
    return "redis://127.0.0.1:" + std::to_string(port_) + (name_space.empty() ? "" : "/" + name_space);
  }

 private:
  // Up means it accepts a connection (a password-protected one answers NOAUTH).
  bool answers() const {
    int fd = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    addr.sin_port = htons(static_cast<std::uint16_t>(port_));
    const bool up = ::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0;
    ::close(fd);
    return up;
  }

  int port_;
  std::string password_;
  std::vector<std::string> extra_;
  std::unique_ptr<ChildProcess> process_;
};

}  // namespace ntp::comm::testing
