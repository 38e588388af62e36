#pragma once
// RedisStore: keys live in a redis-server (for jobs that span hosts).
// Spec: "redis://host:port[/namespace]"; every key is stored as
// "<namespace>/<key>" so several jobs can share one server.
#include <chrono>
#include <memory>
#include <mutex>
#include <string_view>

#include "comm/store.h"

struct redisContext;
struct redisReply;

namespace ntp::comm {

class RedisStore : public Store {
 public:
  // Connects within `connect_timeout`; throws CommError(kBadInput) naming the
  // address if the server is unreachable or does not answer PING.
  RedisStore(std::string host, int port, std::string name_space,
             std::chrono::milliseconds connect_timeout = std::chrono::milliseconds(3000));
  ~RedisStore() override;
  RedisStore(const RedisStore&) = delete;
  RedisStore& operator=(const RedisStore&) = delete;

  void set(const std::string& key, const std::vector<char>& value) override;
  bool create(const std::string& key, const std::vector<char>& value) override;
  std::optional<std::vector<char>> try_get(const std::string& key) override;
  void erase(const std::string& key) override;
  std::string describe() const override;

 private:
  struct ReplyDeleter {
    void operator()(redisReply* reply) const;
  };
  using Reply = std::unique_ptr<redisReply, ReplyDeleter>;
  Reply run(const char* op, const std::vector<std::string_view>& args);
  void connect();
  std::string full_key(const std::string& key) const;

  std::string host_;
  int port_;
  std::string namespace_;
  std::chrono::milliseconds timeout_;
  std::mutex mutex_;  // hiredis contexts are not thread-safe
  redisContext* context_ = nullptr;
};

// Parses "redis://host:port[/namespace]" and connects.
std::shared_ptr<Store> open_redis_store(const std::string& spec);

}  // namespace ntp::comm
