#include "comm/redis_store.h"

#include <hiredis/hiredis.h>

#include <cstdlib>
#include <fstream>
#include <memory>
#include <string_view>
#include <thread>

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

namespace {

// The password never comes from the spec: a spec is printed and passed on
// command lines.
std::string read_password() {
  if (const char* text = std::getenv("NTP_REDIS_PASSWORD"); text != nullptr && *text != 0) return text;
  const char* file = std::getenv("NTP_REDIS_PASSWORD_FILE");
  if (file == nullptr || *file == 0) return "";
  std::ifstream in(file);
  std::string password;
  if (!in || !std::getline(in, password)) {
    throw_bad_input("open_store", std::string("cannot read the redis password file '") + file +
                                      "' (NTP_REDIS_PASSWORD_FILE)");
  }
  while (!password.empty() && (password.back() == '\r' || password.back() == ' ')) password.pop_back();
  return password;
}

// Escapes the glob characters of SCAN's MATCH.
std::string glob_literal(const std::string& text) {
  std::string out;
  for (char c : text) {
    if (c == '*' || c == '?' || c == '[' || c == ']' || c == '\\') out += '\\';
    out += c;
  }
  return out;
}

using Clock = std::chrono::steady_clock;
constexpr auto kReconnectPause = std::chrono::milliseconds(100);

}  // namespace

RedisStore::RedisStore(std::string host, int port, std::string name_space,
                       std::chrono::milliseconds connect_timeout, std::chrono::milliseconds reconnect_within)
    : host_(std::move(host)),
      port_(port),
      namespace_(std::move(name_space)),
      timeout_(connect_timeout),
      reconnect_within_(reconnect_within),
      password_(read_password()) {
  if (host_.empty()) throw_bad_input("open_store", "redis store needs a host (redis://host:port)");
  if (port_ <= 0 || port_ > 65535) throw_bad_input("open_store", "redis port " + std::to_string(port_) + " is out of range");
  // An address where nothing listens is refused at once (a wrong spec). A
  // server that is there but slow to accept or to answer (hundreds of
  // workers connecting at once to a loaded host) or still loading its
  // dataset (just restarted) is waited for, within reconnect_within.
  const auto give_up = std::chrono::steady_clock::now() + reconnect_within_;
  Unready unready = Unready::kNo;
  while ((main_.context = connect(timeout_, &unready)) == nullptr && unready != Unready::kNo &&
         std::chrono::steady_clock::now() < give_up) {
    std::this_thread::sleep_for(kReconnectPause);
  }
  if (main_.context == nullptr) {
    throw_bad_input("open_store", describe() + (unready == Unready::kLoading ? " is still loading its dataset"
                                                : unready == Unready::kBusy
                                                    ? " accepts no connection or answers no PING within " +
                                                          std::to_string(reconnect_within_.count()) + " ms"
                                                    : " is unreachable"));
  }
}

RedisStore::~RedisStore() {
  if (main_.context != nullptr) redisFree(main_.context);
  for (const auto& link : idle_) {
    if (link->context != nullptr) redisFree(link->context);
  }
}

std::string RedisStore::describe() const {
  return "redis://" + host_ + ":" + std::to_string(port_) + (namespace_.empty() ? "" : "/" + namespace_);
}

std::string RedisStore::full_key(const std::string& key) const {
  return namespace_.empty() ? key : namespace_ + "/" + key;
}

// A new connection that answered PING (after AUTH when a password is set), or
// nullptr when the server cannot be reached now or is still loading its
// dataset after a restart (worth retrying). A server
// that refuses us (password) is a bad input, never retried.
redisContext* RedisStore::connect(std::chrono::milliseconds socket_timeout, Unready* unready) const {
  if (unready != nullptr) *unready = Unready::kNo;
  redisContext* context = redisConnectWithTimeout(host_.c_str(), port_, to_timeval(timeout_));
  if (context == nullptr) throw_bad_input("open_store", describe() + ": cannot allocate a connection");
  if (context->err != 0) {
    // Refused: nothing listens there. Anything else (a timeout) may pass.
    if (unready != nullptr && std::string_view(context->errstr).find("refused") == std::string_view::npos) {
      *unready = Unready::kBusy;
    }
    redisFree(context);
    return nullptr;
  }
  redisSetTimeout(context, to_timeval(socket_timeout));
  auto command = [&](std::vector<std::string_view> args) {
    std::vector<const char*> argv;
    std::vector<std::size_t> lengths;
    for (auto arg : args) {
      argv.push_back(arg.data());
      lengths.push_back(arg.size());
    }
    return Reply(static_cast<redisReply*>(
        redisCommandArgv(context, static_cast<int>(argv.size()), argv.data(), lengths.data())));
  };
  std::string refusal;
  if (!password_.empty()) {
    Reply auth = command({"AUTH", password_});
    if (auth && auth->type == REDIS_REPLY_ERROR) {
      refusal = describe() + " refused the password from NTP_REDIS_PASSWORD(_FILE): " + auth->str;
    }
  }
  Reply pong = refusal.empty() ? command({"PING"}) : nullptr;
  if (refusal.empty() && pong && pong->type == REDIS_REPLY_ERROR) {
    const std::string why = pong->str;
    if (why.rfind("LOADING", 0) == 0) {  // a restarted server reading its dataset back: retry
      redisFree(context);
      if (unready != nullptr) *unready = Unready::kLoading;
      return nullptr;
    }
    refusal = describe() + " does not answer PING: " + why;
    if (why.rfind("NOAUTH", 0) == 0) {
      refusal = describe() + " requires a password: set NTP_REDIS_PASSWORD or NTP_REDIS_PASSWORD_FILE";
    }
  }
  if (!refusal.empty()) {
    redisFree(context);
    throw_bad_input("open_store", refusal);
  }
  if (!pong) {  // no answer within the socket timeout: a busy server
    redisFree(context);
    if (unready != nullptr) *unready = Unready::kBusy;
    return nullptr;
  }
  return context;
}

RedisStore::Reply RedisStore::run(const char* op, const std::vector<std::string_view>& args) {
  return std::move(run_on(main_, op, {args}, timeout_).front());
}

// Sends the commands in one round trip (pipelined) and returns their replies;
// a broken connection is dropped and the whole batch reissued on a new one
// until reconnect_within_ has passed.
std::vector<RedisStore::Reply> RedisStore::run_on(Link& link, const char* op,
                                                  const std::vector<std::vector<std::string_view>>& commands,
                                                  std::chrono::milliseconds socket_timeout) {
  std::lock_guard lock(link.mutex);
  const auto give_up = Clock::now() + reconnect_within_;
  std::string why = "not connected";
  while (true) {
    if (link.context == nullptr) link.context = connect(socket_timeout);
    if (link.context != nullptr) {
      redisSetTimeout(link.context, to_timeval(socket_timeout));
      std::vector<Reply> replies;
      bool sent = true;
      for (const auto& args : commands) {
        std::vector<const char*> argv;
        std::vector<std::size_t> lengths;
        for (auto arg : args) {
          argv.push_back(arg.data());
          lengths.push_back(arg.size());
        }
        sent = sent && redisAppendCommandArgv(link.context, static_cast<int>(argv.size()), argv.data(),
                                              lengths.data()) == REDIS_OK;
      }
      while (sent && replies.size() < commands.size()) {
        void* raw = nullptr;
        if (redisGetReply(link.context, &raw) != REDIS_OK || raw == nullptr) break;
        replies.emplace_back(static_cast<redisReply*>(raw));
      }
      if (replies.size() == commands.size()) {
        for (const auto& reply : replies) {
          if (reply->type == REDIS_REPLY_ERROR) throw_store_error(op, describe(), reply->str);
        }
        return replies;
      }
      why = link.context->errstr;
      redisFree(link.context);
      link.context = nullptr;
    }
    if (Clock::now() >= give_up) {
      throw_store_error(op, describe(), why + " (no connection for " + std::to_string(reconnect_within_.count()) +
                                            " ms)");
    }
    std::this_thread::sleep_for(kReconnectPause);
  }
}

void RedisStore::set(const std::string& key, const std::vector<char>& value) {
  run("store.set", {"SET", full_key(key), std::string_view(value.data(), value.size())});
}

// A reissued SET PX (after a reconnect) arrives later than the first try
// and so expires later: a holder that counts from its first send is never
// late.
void RedisStore::set_expiring(const std::string& key, const std::vector<char>& value, std::chrono::milliseconds ttl) {
  if (ttl.count() <= 0) throw_bad_input("store.set_expiring", "ttl must be positive for key " + key);
  const std::string ms = std::to_string(ttl.count());
  run("store.set_expiring", {"SET", full_key(key), std::string_view(value.data(), value.size()), "PX", ms});
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

std::size_t RedisStore::append(const std::string& key, const std::vector<char>& item) {
  Reply reply = run("store.append", {"RPUSH", full_key(key), std::string_view(item.data(), item.size())});
  if (reply->type != REDIS_REPLY_INTEGER || reply->integer < 1) {
    throw_store_error("store.append", describe(), "unexpected reply to RPUSH " + key);
  }
  return static_cast<std::size_t>(reply->integer - 1);
}

std::vector<std::vector<char>> RedisStore::items(const std::string& key, std::size_t from) {
  const std::string start = std::to_string(from);
  Reply reply = run("store.items", {"LRANGE", full_key(key), start, "-1"});
  std::vector<std::vector<char>> out;
  for (std::size_t i = 0; i < reply->elements; ++i) {
    const redisReply* item = reply->element[i];
    out.emplace_back(item->str, item->str + item->len);
  }
  return out;
}

std::optional<std::vector<char>> RedisStore::wait_first(const std::string& key, std::chrono::milliseconds timeout) {
  const std::string list = full_key(key);
  const std::string seconds = std::to_string(std::max<std::int64_t>(1, timeout.count()) / 1000.0);
  std::unique_ptr<Link> link;
  {
    std::lock_guard lock(idle_mutex_);
    if (!idle_.empty()) {
      link = std::move(idle_.back());
      idle_.pop_back();
    }
  }
  if (!link) link = std::make_unique<Link>();
  Reply reply;
  try {
    if (!no_blmove_) {
      reply = std::move(
          run_on(*link, "store.wait_first", {{"BLMOVE", list, list, "LEFT", "LEFT", seconds}}, timeout + timeout_)
              .front());
    }
  } catch (const CommError& e) {
    // A server older than 6.2 has no BLMOVE: poll the list's head instead.
    if (e.detail().find("unknown command") == std::string::npos) {
      if (link->context != nullptr) redisFree(link->context);
      throw;
    }
    no_blmove_ = true;
  }
  if (no_blmove_) reply = poll_first(list, timeout);
  {
    std::lock_guard lock(idle_mutex_);
    idle_.push_back(std::move(link));
  }
  if (reply->type != REDIS_REPLY_STRING) return std::nullopt;
  return std::vector<char>(reply->str, reply->str + reply->len);
}

RedisStore::Reply RedisStore::poll_first(const std::string& list, std::chrono::milliseconds timeout) {
  const auto deadline = Clock::now() + timeout;
  auto pause = std::chrono::milliseconds(1);
  while (true) {
    Reply reply = run("store.wait_first", {"LINDEX", list, "0"});
    if (reply->type == REDIS_REPLY_STRING || Clock::now() >= deadline) return reply;
    std::this_thread::sleep_for(pause);
    pause = std::min(pause * 2, std::chrono::milliseconds(20));
  }
}

std::vector<std::optional<std::vector<char>>> RedisStore::get_many(const std::vector<std::string>& keys) {
  std::vector<std::optional<std::vector<char>>> values;
  if (keys.empty()) return values;
  std::vector<std::string> full;
  for (const auto& key : keys) full.push_back(full_key(key));
  std::vector<std::string_view> args = {"MGET"};
  args.insert(args.end(), full.begin(), full.end());
  Reply reply = run("store.get_many", args);
  for (std::size_t i = 0; i < reply->elements; ++i) {
    const redisReply* value = reply->element[i];
    if (value->type == REDIS_REPLY_STRING) {
      values.emplace_back(std::vector<char>(value->str, value->str + value->len));
    } else {
      values.emplace_back(std::nullopt);
    }
  }
  return values;
}

std::vector<std::optional<std::vector<char>>> RedisStore::get_slices(const std::vector<Slice>& slices) {
  std::vector<std::optional<std::vector<char>>> values;
  if (slices.empty()) return values;
  std::vector<std::string> texts;  // keys, first and last byte offsets
  for (const Slice& slice : slices) {
    texts.push_back(full_key(slice.key));
    texts.push_back(std::to_string(slice.offset));
    texts.push_back(std::to_string(slice.offset + slice.length - 1));
  }
  std::vector<std::vector<std::string_view>> commands;
  for (std::size_t i = 0; i < slices.size(); ++i) {
    commands.push_back({"GETRANGE", texts[3 * i], texts[3 * i + 1], texts[3 * i + 2]});
  }
  // GETRANGE answers "" for a missing key; a slice of a key that exists is never empty.
  for (const Reply& reply : run_on(main_, "store.get_slices", commands, timeout_)) {
    if (reply->type == REDIS_REPLY_STRING && reply->len > 0) {
      values.emplace_back(std::vector<char>(reply->str, reply->str + reply->len));
    } else {
      values.emplace_back(std::nullopt);
    }
  }
  return values;
}

// SCAN walks the keyspace in the server a batch at a time; the keys are
// deleted batch by batch.
void RedisStore::erase_prefix(const std::string& prefix) {
  const std::string pattern = glob_literal(full_key(prefix)) + "*";
  std::string cursor = "0";
  do {
    Reply reply = run("store.erase_prefix", {"SCAN", cursor, "MATCH", pattern, "COUNT", "1000"});
    if (reply->type != REDIS_REPLY_ARRAY || reply->elements != 2) {
      throw_store_error("store.erase_prefix", describe(), "unexpected reply to SCAN");
    }
    cursor.assign(reply->element[0]->str, reply->element[0]->len);
    const redisReply* batch = reply->element[1];
    std::vector<std::string_view> args = {"DEL"};
    for (std::size_t i = 0; i < batch->elements; ++i) args.emplace_back(batch->element[i]->str, batch->element[i]->len);
    if (args.size() > 1) run("store.erase_prefix", args);
  } while (cursor != "0");
}

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
