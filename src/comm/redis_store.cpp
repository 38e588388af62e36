#include "comm/redis_store.h"

#include <hiredis/hiredis.h>

#include <memory>
#include <string_view>

#include "comm/error.h"

namespace ntp::comm {

void RedisStore::ReplyDeleter::operator()(redisReply* reply) const { freeReplyObject(reply); }

namespace {

timeval to_timeval(std::chrono::milliseconds ms) {
  timeval tv{};
  tv.tv_sec = static_cast<decltype(tv.tv_sec)>(ms.count() / 1000);
  tv.tv_usec = static_cast<decltype(tv.tv_usec)>((ms.count() % 1000) * 1000);
  return tv;
}

[[noreturn]] void throw_store_error(const std::string& op, const std::string& where, const std::string& why) {
  CommErrorInfo info;
  info.kind = CommErrorKind::kPeerError;
  info.op = op;
  info.detail = where + ": " + why;
  throw CommError(std::move(info));
}

}  // namespace

RedisStore::RedisStore(std::string host, int port, std::string name_space,
                       std::chrono::milliseconds connect_timeout)
    : host_(std::move(host)), port_(port), namespace_(std::move(name_space)), timeout_(connect_timeout) {
  if (host_.empty()) throw_bad_input("open_store", "redis store needs a host (redis://host:port)");
  if (port_ <= 0 || port_ > 65535) throw_bad_input("open_store", "redis port " + std::to_string(port_) + " is out of range");
  connect();
}

RedisStore::~RedisStore() {
  if (context_ != nullptr) redisFree(context_);
}

std::string RedisStore::describe() const {
  return "redis://" + host_ + ":" + std::to_string(port_) + (namespace_.empty() ? "" : "/" + namespace_);
}

std::string RedisStore::full_key(const std::string& key) const {
  return namespace_.empty() ? key : namespace_ + "/" + key;
}

// (Re)connects and checks the server answers. Caller holds mutex_ or is the constructor.
void RedisStore::connect() {
  if (context_ != nullptr) {
    redisFree(context_);
    context_ = nullptr;
  }
  redisContext* context = redisConnectWithTimeout(host_.c_str(), port_, to_timeval(timeout_));
  if (context == nullptr) throw_bad_input("open_store", describe() + ": cannot allocate a connection");
  if (context->err != 0) {
    const std::string why = context->errstr;
    redisFree(context);
    throw_bad_input("open_store", describe() + " is unreachable: " + why);
  }
  redisSetTimeout(context, to_timeval(timeout_));
  RedisStore::Reply pong(static_cast<redisReply*>(redisCommand(context, "PING")));
  if (!pong || pong->type == REDIS_REPLY_ERROR) {
    const std::string why = pong ? pong->str : context->errstr;
    redisFree(context);
    throw_bad_input("open_store", describe() + " does not answer PING: " + why);
  }
  context_ = context;
}

// Runs one command; on a broken connection drops it so the next call reconnects.
RedisStore::Reply RedisStore::run(const char* op, const std::vector<std::string_view>& args) {
  std::vector<const char*> argv;
  std::vector<std::size_t> lengths;
  for (auto arg : args) {
    argv.push_back(arg.data());
    lengths.push_back(arg.size());
  }
  std::lock_guard lock(mutex_);
  if (context_ == nullptr) connect();
  auto* raw = redisCommandArgv(context_, static_cast<int>(argv.size()), argv.data(), lengths.data());
  Reply reply(static_cast<redisReply*>(raw));
  if (!reply) {
    const std::string why = context_->errstr;
    redisFree(context_);
    context_ = nullptr;
    throw_store_error(op, describe(), why);
  }
  if (reply->type == REDIS_REPLY_ERROR) throw_store_error(op, describe(), reply->str);
  return reply;
}

void RedisStore::set(const std::string& key, const std::vector<char>& value) {
  run("store.set", {"SET", full_key(key), std::string_view(value.data(), value.size())});
}

// SET NX is atomic in the server: it answers OK to the one caller that set
// the key and nil to everyone else.
bool RedisStore::create(const std::string& key, const std::vector<char>& value) {
  Reply reply = run("store.create", {"SET", full_key(key), std::string_view(value.data(), value.size()), "NX"});
  if (reply->type == REDIS_REPLY_NIL) return false;
  if (reply->type != REDIS_REPLY_STATUS) {
    throw_store_error("store.create", describe(), "unexpected reply type for key " + key);
  }
  return true;
}

std::optional<std::vector<char>> RedisStore::try_get(const std::string& key) {
  Reply reply = run("store.get", {"GET", full_key(key)});
  if (reply->type == REDIS_REPLY_NIL) return std::nullopt;
  if (reply->type != REDIS_REPLY_STRING) throw_store_error("store.get", describe(), "unexpected reply type");
  return std::vector<char>(reply->str, reply->str + reply->len);
}

void RedisStore::erase(const std::string& key) { run("store.erase", {"DEL", full_key(key)}); }

std::shared_ptr<Store> open_redis_store(const std::string& spec) {
  const std::string scheme = "redis://";
  std::string rest = spec.substr(scheme.size());
  std::string name_space;
  if (auto slash = rest.find('/'); slash != std::string::npos) {
    name_space = rest.substr(slash + 1);
    rest = rest.substr(0, slash);
  }
  const auto colon = rest.rfind(':');
  std::string host = rest;
  int port = 6379;
  if (colon != std::string::npos) {
    host = rest.substr(0, colon);
    const std::string port_text = rest.substr(colon + 1);
    try {
      std::size_t used = 0;
      port = std::stoi(port_text, &used);
      if (used != port_text.size()) throw std::invalid_argument(port_text);
    } catch (const std::exception&) {
      throw_bad_input("open_store", "bad port '" + port_text + "' in store spec '" + spec + "'");
    }
  }
  return std::make_shared<RedisStore>(host, port, name_space);
}

}  // namespace ntp::comm
