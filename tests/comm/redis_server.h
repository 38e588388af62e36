#pragma once
// A real redis-server on a free loopback port for the life of the object.
#include <chrono>
#include <csignal>
#include <memory>
#include <stdexcept>
#include <string>
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

  RedisServer() : port_(free_loopback_port()) {
    process_ = std::make_unique<ChildProcess>(
        std::vector<std::string>{kBinary, "--port", std::to_string(port_), "--bind", "127.0.0.1", "--save", "",
                                 "--appendonly", "no", "--daemonize", "no", "--loglevel", "warning"},
        std::vector<std::string>{}, "/dev/null");
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    while (std::chrono::steady_clock::now() < deadline) {
      try {
        open_store(spec());
        return;
      } catch (const std::exception&) {
        if (process_->wait_for(std::chrono::milliseconds(50))) break;  // exited: port taken?
      }
    }
    throw std::runtime_error("redis-server did not come up on port " + std::to_string(port_));
  }

  ~RedisServer() {
    process_->signal(SIGTERM);
    if (!process_->wait_for(std::chrono::seconds(5))) process_->signal(SIGKILL);
  }

  std::string spec(const std::string& name_space = "") const {
    return "redis://127.0.0.1:" + std::to_string(port_) + (name_space.empty() ? "" : "/" + name_space);
  }

 private:
  int port_;
  std::unique_ptr<ChildProcess> process_;
};

}  // namespace ntp::comm::testing
