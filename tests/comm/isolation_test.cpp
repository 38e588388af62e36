// A shared Redis: a lost connection is retried with a deadline, a password
// is required and never printed, and a process that names the wrong job is
// refused while the job goes on.
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <future>
#include <thread>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include "comm/job_store.h"
#include "comm/redis_store.h"
#include "tests/comm/redis_server.h"
#include "tests/comm/thread_ranks.h"

namespace ntp::comm {
namespace {

using namespace std::chrono_literals;
using clock_type = std::chrono::steady_clock;

#define NTP_NEEDS_REDIS() \
  if (!testing::RedisServer::available()) GTEST_SKIP() << "redis-server is not installed"

// The message of the CommError that `body` throws ("" when it throws none).
template <class Body>
std::string error_text(Body body) {
  try {
    body();
  } catch (const CommError& e) {
    return e.what();
  }
  return "";
}

// Sets an environment variable for one scope.
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const std::string& value) : name_(name) { ::setenv(name, value.c_str(), 1); }
  ~ScopedEnv() { ::unsetenv(name_); }

 private:
  const char* name_;
};

TEST(RedisReconnect, ARestartedServerIsReconnectedAndNoCallFails) {
  NTP_NEEDS_REDIS();
  testing::RedisServer server;
  auto store = open_store(server.spec("job"));
  // The client runs on a helper thread: the server must be started from this
  // one, which outlives it (a child process dies with the thread that forked it).
  std::atomic<bool> restarted{false};
  auto client = std::async(std::launch::async, [&] {
    int calls = 0;
    const auto until = clock_type::now() + 2s;
    while (clock_type::now() < until || !restarted) {
      store->set("hb/" + std::to_string(calls % 4), to_bytes(std::to_string(calls)));
      EXPECT_TRUE(store->try_get("hb/" + std::to_string(calls % 4)).has_value());
      ++calls;
      std::this_thread::sleep_for(10ms);
    }
    return calls;
  });
  std::this_thread::sleep_for(200ms);
  server.restart(500ms);
  restarted = true;
  EXPECT_GT(client.get(), 50);
  EXPECT_TRUE(store->try_get("hb/0").has_value());
}

TEST(RedisReconnect, AServerGoneLongerThanTheDeadlineFailsNamingIt) {
  NTP_NEEDS_REDIS();
  testing::RedisServer server;
  const std::string spec = server.spec();
  const int port = std::stoi(spec.substr(spec.rfind(':') + 1));
  RedisStore store("127.0.0.1", port, "", 1000ms, 300ms);
  store.set("k", to_bytes("v"));
  server.stop();
  const auto start = clock_type::now();
  const std::string text = error_text([&] { store.set("k", to_bytes("w")); });
  EXPECT_LT(clock_type::now() - start, 3s);
  EXPECT_NE(text.find("127.0.0.1:" + std::to_string(port)), std::string::npos) << text;
  EXPECT_NE(text.find("no connection for 300 ms"), std::string::npos) << text;
}

// A server that answers every command of its first `loading` connections
// with Redis's "-LOADING" (a restarted server reading its dataset back), or
// with `silent` not at all (a server too busy to answer in time), then
// "+PONG" / "+OK" like a ready one. Enough RESP for PING and SET.
class LoadingServer {
 public:
  explicit LoadingServer(int loading, bool silent = false) : loading_(loading), silent_(silent) {
    listener_ = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    ::bind(listener_, reinterpret_cast<sockaddr*>(&addr), sizeof addr);
    ::listen(listener_, 8);
    socklen_t len = sizeof addr;
    ::getsockname(listener_, reinterpret_cast<sockaddr*>(&addr), &len);
    port_ = ntohs(addr.sin_port);
    thread_ = std::thread([this] { serve(); });
  }
  ~LoadingServer() {
    ::shutdown(listener_, SHUT_RDWR);
    ::close(listener_);
    thread_.join();
  }
  int port() const { return port_; }
  int connections() const { return connections_; }

 private:
  void serve() {
    while (true) {
      const int fd = ::accept(listener_, nullptr, nullptr);
      if (fd < 0) return;
      const bool loading = connections_++ < loading_;
      char buffer[4096];
      for (ssize_t n; (n = ::read(fd, buffer, sizeof buffer)) > 0;) {
        if (loading && silent_) continue;  // until the client gives up and closes
        const std::string request(buffer, static_cast<std::size_t>(n));
        const std::string reply = loading ? "-LOADING Redis is loading the dataset in memory\r\n"
                                  : request.find("PING") != std::string::npos ? "+PONG\r\n"
                                                                              : "+OK\r\n";
        if (::write(fd, reply.data(), reply.size()) < 0) break;
      }
      ::close(fd);
    }
  }
  int loading_;
  bool silent_;
  int listener_ = -1;
  int port_ = 0;
  std::atomic<int> connections_{0};
  std::thread thread_;
};

TEST(RedisReconnect, AServerStillLoadingItsDatasetIsWaitedForNotRefused) {
  LoadingServer server(3);
  RedisStore store("127.0.0.1", server.port(), "", 1000ms, 5000ms);
  EXPECT_EQ(server.connections(), 4);  // three answered LOADING, the fourth PONG
  store.set("k", to_bytes("v"));
  // Loading for longer than the deadline: refused, saying so.
  LoadingServer slow(1000);
  const std::string text = error_text([&] { RedisStore("127.0.0.1", slow.port(), "", 1000ms, 300ms); });
  EXPECT_NE(text.find("still loading its dataset"), std::string::npos) << text;
}

// Hundreds of workers connecting at once to a loaded store host: a server
// that accepts but answers no PING within the connect timeout is tried again
// within reconnect_within, not refused as unreachable (a worker that gave up
// after 3 s ended a 64-rank job's start with exit 1).
TEST(RedisReconnect, AServerTooBusyToAnswerIsWaitedForNotRefused) {
  LoadingServer server(3, true);
  RedisStore store("127.0.0.1", server.port(), "", 200ms, 5000ms);
  EXPECT_EQ(server.connections(), 4);  // three unanswered, the fourth PONG
  store.set("k", to_bytes("v"));
  LoadingServer busy(1000, true);
  const std::string text = error_text([&] { RedisStore("127.0.0.1", busy.port(), "", 200ms, 500ms); });
  EXPECT_NE(text.find("answers no PING within 500 ms"), std::string::npos) << text;
}

// A server without BLMOVE (before 6.2; here the command is renamed away):
// wait_first polls the list's head instead.
TEST(RedisLists, WaitFirstWorksWithoutBlmove) {
  NTP_NEEDS_REDIS();
  testing::RedisServer server("", {"--rename-command", "BLMOVE", ""});
  auto store = open_store(server.spec());
  EXPECT_FALSE(store->wait_first("list", 50ms).has_value());
  auto waiter = std::async(std::launch::async, [&] { return store->wait_first("list", 5s); });
  std::this_thread::sleep_for(100ms);
  EXPECT_EQ(store->append("list", to_bytes("first")), 0u);
  EXPECT_EQ(store->append("list", to_bytes("second")), 1u);
  const auto first = waiter.get();
  ASSERT_TRUE(first.has_value());
  EXPECT_EQ(to_text(*first), "first");
  EXPECT_EQ(store->items("list", 1).size(), 1u);
}

TEST(RedisAuth, APasswordIsRequiredAndNeverPrinted) {
  NTP_NEEDS_REDIS();
  const std::string password = "pw-7f3a9c";
  testing::RedisServer server(password);
  std::string text = error_text([&] { open_store(server.spec()); });
  EXPECT_NE(text.find("requires a password: set NTP_REDIS_PASSWORD"), std::string::npos) << text;
  {
    ScopedEnv env("NTP_REDIS_PASSWORD", "not-" + password);
    text = error_text([&] { open_store(server.spec()); });
    EXPECT_NE(text.find("refused the password"), std::string::npos) << text;
    EXPECT_EQ(text.find(password), std::string::npos) << "the password leaked: " << text;
  }
  {
    ScopedEnv env("NTP_REDIS_PASSWORD", password);
    auto store = open_store(server.spec());
    store->set("k", to_bytes("v"));
    EXPECT_EQ(to_text(*store->try_get("k")), "v");
  }
  testing::TempStoreDir dir;
  const std::filesystem::path file = std::filesystem::path(dir.path()) / "redis.password";
  std::ofstream(file) << password << "\n";
  {
    ScopedEnv env("NTP_REDIS_PASSWORD_FILE", file.string());
    EXPECT_EQ(to_text(*open_store(server.spec())->try_get("k")), "v");
  }
  {
    ScopedEnv env("NTP_REDIS_PASSWORD_FILE", dir.path() + "/missing");
    text = error_text([&] { open_store(server.spec()); });
    EXPECT_NE(text.find("missing' (NTP_REDIS_PASSWORD_FILE)"), std::string::npos) << text;
  }
}

TEST(JobIsolation, AWrongJobIdIsRefusedAndTheJobGoesOn) {
  NTP_NEEDS_REDIS();
  testing::RedisServer server;
  auto shared = open_store(server.spec());
  const std::string id = new_job_id();
  EXPECT_EQ(id.size(), 16u);
  EXPECT_NE(id, new_job_id());
  auto job = create_job(shared, id);
  // Another job's process, and a stale one of an earlier run, on the same server.
  const std::string wrong = error_text([&] { join_job(open_store(server.spec()), "stale0123", 200ms); });
  EXPECT_NE(wrong.find("no job 'stale0123'"), std::string::npos) << wrong;
  EXPECT_NE(wrong.find("the job id is wrong"), std::string::npos) << wrong;
  const std::string reused = error_text([&] { create_job(open_store(server.spec()), id); });
  EXPECT_NE(reused.find("already in use"), std::string::npos) << reused;
  EXPECT_NE(error_text([&] { join_job(shared, "bad id!", 100ms); }).find("malformed"), std::string::npos);
  // The job's ranks rendezvous under its id and run a collective meanwhile.
  auto errors = testing::run_threads(3, [&](int rank) {
    auto store = rank == 0 ? job : join_job(open_store(server.spec()), id, 2s);
    auto group = create_group(store, testing::group_options(3, rank, "world"));
    std::vector<float> x(4, 1.0f);
    group->all_reduce(x.data(), x.size());
    EXPECT_EQ(x[0], 3.0f);
  });
  testing::rethrow_first(errors);
  // Nothing of the job is outside its prefix.
  EXPECT_FALSE(shared->try_get("ntp/job").has_value());
  EXPECT_FALSE(shared->items(group_keys_prefix(1) + "world/joined").size() > 0);
  EXPECT_EQ(shared->items("job/" + id + "/" + group_keys_prefix(1) + "world/joined").size(), 3u);
}

TEST(JobIsolation, TheJobTravelsInTheStoreSpec) {
  NTP_NEEDS_REDIS();
  testing::RedisServer server;
  const std::string spec = start_job(server.spec("team"));
  const std::string id = job_of(spec);
  EXPECT_EQ(id.size(), 16u) << spec;
  EXPECT_EQ(without_job(spec), server.spec("team"));
  open_store(spec)->set("ntp/hb/0", to_bytes("1"));
  EXPECT_TRUE(open_store(server.spec("team") + "?job=" + id)->try_get("ntp/hb/0").has_value());
  EXPECT_FALSE(open_store(server.spec("team"))->try_get("ntp/hb/0").has_value());
  const auto start = clock_type::now();
  const std::string text = error_text([&] { open_store(server.spec("team") + "?job=0123456789abcdef"); });
  EXPECT_NE(text.find("no job '0123456789abcdef'"), std::string::npos) << text;
  EXPECT_LT(clock_type::now() - start, 15s);
  EXPECT_NE(error_text([&] { start_job(spec); }).find("already in use"), std::string::npos);
}

}  // namespace
}  // namespace ntp::comm
