#pragma once
// RedisStore: keys live in a redis-server (for jobs that span hosts).
// Spec: "redis://host:port[/namespace]"; every key is stored as
// "<namespace>/<key>" so several jobs can share one server.
//
// Password: a server started with requirepass is sent AUTH with the password
// from $NTP_REDIS_PASSWORD, or from the file named by $NTP_REDIS_PASSWORD_FILE
// (never from the spec or a flag, so it stays out of command lines and logs).
//
// A lost connection (the server restarted, a network blip) is retried: each
// call reconnects and reissues its command until `reconnect_within` has passed,
// then throws. The commands are safe to reissue: SET and DEL are idempotent; a
// SET NX whose first attempt won answers "lost" the second time, and the
// caller then reads its own value as the winner's; a reissued RPUSH may leave
// a duplicate item, which list readers tolerate.
#include <atomic>
#include <chrono>
#include <memory>
#include <mutex>
#include <vector>
#include <string_view>

#include "comm/store.h"

struct redisContext;
struct redisReply;

namespace ntp::comm {

// How long a store call keeps trying to reach the server before it fails
// (CommError): a Redis restart or a short cut is ridden through.
inline constexpr std::chrono::milliseconds kRedisReconnectWithin{20000};

class RedisStore : public Store {
 public:
  // Connects within `connect_timeout`, tried again within `reconnect_within`
  // while the server is slow to accept or answer or loading its dataset;
  // throws CommError(kBadInput) naming the address if nothing listens there,
  // it refuses the password, or it is still unready after reconnect_within.
  RedisStore(std::string host, int port, std::string name_space,
             std::chrono::milliseconds connect_timeout = std::chrono::milliseconds(3000),
             std::chrono::milliseconds reconnect_within = kRedisReconnectWithin);
  ~RedisStore() override;
  RedisStore(const RedisStore&) = delete;
  RedisStore& operator=(const RedisStore&) = delete;

  void set(const std::string& key, const std::vector<char>& value) override;
  bool create(const std::string& key, const std::vector<char>& value) override;
  // SET PX: the server drops the key `ttl` after it received the command.
  void set_expiring(const std::string& key, const std::vector<char>& value, std::chrono::milliseconds ttl) override;
  std::optional<std::vector<char>> try_get(const std::string& key) override;
  void erase(const std::string& key) override;
  std::string describe() const override;

  std::size_t append(const std::string& key, const std::vector<char>& item) override;
  std::vector<std::vector<char>> items(const std::string& key, std::size_t from = 0) override;
  // BLMOVE of the list onto itself: blocks in the server and leaves the list
  // as it was. Each waiting thread has a connection of its own, so that other
  // threads' calls (heartbeats, other waits) do not queue behind it.
  std::optional<std::vector<char>> wait_first(const std::string& key, std::chrono::milliseconds timeout) override;
  std::vector<std::optional<std::vector<char>>> get_many(const std::vector<std::string>& keys) override;
  void erase_prefix(const std::string& prefix) override;
  // GETRANGE per slice, all in one round trip.
  std::vector<std::optional<std::vector<char>>> get_slices(const std::vector<Slice>& slices) override;

 private:
  struct ReplyDeleter {
    void operator()(redisReply* reply) const;
  };
  using Reply = std::unique_ptr<redisReply, ReplyDeleter>;
  // One connection with its lock (hiredis contexts are not thread-safe).
  struct Link {
    std::mutex mutex;
    redisContext* context = nullptr;
  };
  Reply run(const char* op, const std::vector<std::string_view>& args);
  std::vector<Reply> run_on(Link& link, const char* op, const std::vector<std::vector<std::string_view>>& commands,
                            std::chrono::milliseconds socket_timeout);
  // Why a connection could not be made now although one may be soon.
  enum class Unready { kNo, kBusy, kLoading };
  redisContext* connect(std::chrono::milliseconds socket_timeout, Unready* unready = nullptr) const;
  // wait_first for servers without BLMOVE (before 6.2): LINDEX with a backoff.
  Reply poll_first(const std::string& list, std::chrono::milliseconds timeout);
  std::string full_key(const std::string& key) const;

  std::string host_;
  int port_;
  std::string namespace_;
  std::chrono::milliseconds timeout_;
  std::chrono::milliseconds reconnect_within_;
  std::string password_;
  Link main_;
  std::atomic<bool> no_blmove_{false};
  std::mutex idle_mutex_;
  std::vector<std::unique_ptr<Link>> idle_;  // connections for wait_first not in use
};

// Parses "redis://host:port[/namespace]" and connects.
std::shared_ptr<Store> open_redis_store(const std::string& spec);

}  // namespace ntp::comm
