// Ranks as processes (tests/comm/peer_main.cpp): every collective; a peer
// killed (SIGKILL) or stopped (SIGSTOP) in the middle of a loop of
// all-reduces is detected by every survivor within 2x the deadline, the
// heartbeat lists it, and the survivors complete an all-reduce in epoch 2 —
// with the file store and with a real redis-server.
#include <gtest/gtest.h>

#include <csignal>
#include <fstream>
#include <iostream>
#include <sstream>
#include <thread>

#include <sys/wait.h>

#include "comm/child_process.h"
#include "comm/heartbeat.h"
#include "tests/comm/redis_server.h"
#include "tests/comm/thread_ranks.h"

namespace ntp::comm {
namespace {

using namespace std::chrono_literals;

std::vector<ChildProcess> spawn_peers(const std::string& mode, const std::string& store, int world,
                                      const std::string& name, std::chrono::milliseconds timeout,
                                      const std::string& log_dir) {
  std::vector<ChildProcess> peers;
  for (int r = 0; r < world; ++r) {
    peers.emplace_back(std::vector<std::string>{NTP_COMM_PEER, "--mode", mode, "--store", store, "--rank",
                                                std::to_string(r), "--world", std::to_string(world), "--name", name,
                                                "--timeout-ms", std::to_string(timeout.count())},
                       std::vector<std::string>{}, log_dir + "/" + name + "-rank" + std::to_string(r) + ".log");
  }
  return peers;
}

std::string log_of(const std::string& log_dir, const std::string& name, int rank) {
  std::ifstream in(log_dir + "/" + name + "-rank" + std::to_string(rank) + ".log");
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

class ProcessRanks : public ::testing::TestWithParam<int> {};

TEST_P(ProcessRanks, EveryCollective) {
  const int world = GetParam();
  testing::TempStoreDir dir, logs;
  const std::string log_dir = logs.path();
  const std::string name = "coll" + std::to_string(world) + "-" + std::to_string(::getpid());
  auto peers = spawn_peers("collectives", dir.spec(), world, name, 10000ms, log_dir);
  for (int r = 0; r < world; ++r) {
    auto status = peers[static_cast<std::size_t>(r)].wait_for(60s);
    ASSERT_TRUE(status.has_value()) << "rank " << r << " still running";
    EXPECT_EQ(describe_wait_status(*status), "exit 0") << log_of(log_dir, name, r);
  }
}

INSTANTIATE_TEST_SUITE_P(GroupSize, ProcessRanks, ::testing::Values(1, 2, 3, 5, 8));

long long wall_ms() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::system_clock::now().time_since_epoch())
      .count();
}

// Runs 4 looping peers, hits rank 2 with `sig`, and checks the survivors.
void failure_drill(const std::string& store_spec, int sig, std::chrono::milliseconds timeout) {
  constexpr int kWorld = 4;
  constexpr int kVictim = 2;
  auto store = open_store(store_spec);
  testing::TempStoreDir logs;
  const std::string log_dir = logs.path();
  const std::string name = "drill-" + std::to_string(::getpid()) + "-" + std::to_string(sig);
  auto peers = spawn_peers("loop", store_spec, kWorld, name, timeout, log_dir);
  std::vector<std::string> ready;
  for (int r = 0; r < kWorld; ++r) ready.push_back("test/ready/" + std::to_string(r));
  store->wait(ready, 30s);
  std::this_thread::sleep_for(300ms);  // well inside the loop
  const long long hit_ms = wall_ms();
  peers[kVictim].signal(sig);
  std::vector<long long> latency;
  for (int r = 0; r < kWorld; ++r) {
    if (r == kVictim) continue;
    auto status = peers[static_cast<std::size_t>(r)].wait_for(30s);
    ASSERT_TRUE(status.has_value()) << "survivor " << r << " still running";
    ASSERT_EQ(describe_wait_status(*status), "exit 0") << log_of(log_dir, name, r);
    std::istringstream report(to_text(store->get("test/error/" + std::to_string(r), 1s)));
    long long error_ms = 0;
    int kind = -1, peer = -1;
    report >> error_ms >> kind >> peer;
    latency.push_back(error_ms - hit_ms);
    EXPECT_LE(error_ms - hit_ms, 2 * timeout.count()) << "rank " << r << ": " << report.str();
    EXPECT_NE(kind, static_cast<int>(CommErrorKind::kBadInput)) << report.str();
    EXPECT_EQ(to_text(store->get("test/stale/" + std::to_string(r), 1s)), std::to_string(kVictim));
    EXPECT_EQ(to_text(store->get("test/epoch2/" + std::to_string(r), 1s)), std::to_string(kWorld - 1));
  }
  // The heartbeat names the victim (dead or stopped) and nobody else.
  EXPECT_EQ(stale_ranks(*store, {0, 1, 2, 3}, 1000ms), std::vector<int>{kVictim});
  std::cout << "[ detection ] signal " << sig << ", deadline " << timeout.count() << " ms, latency ms:";
  for (auto l : latency) std::cout << " " << l;
  std::cout << std::endl;
  // ~ChildProcess kills (also a stopped process) and reaps the victim.
}

TEST(ProcessFailures, KilledPeerFileStore) {
  testing::TempStoreDir dir;
  failure_drill(dir.spec(), SIGKILL, 2000ms);
}

TEST(ProcessFailures, StoppedPeerFileStore) {
  testing::TempStoreDir dir;
  failure_drill(dir.spec(), SIGSTOP, 2000ms);
}

TEST(ProcessFailures, KilledPeerRedisStore) {
  if (!testing::RedisServer::available()) GTEST_SKIP() << "redis-server is not installed";
  testing::RedisServer redis;
  failure_drill(redis.spec("drill"), SIGKILL, 2000ms);
}

TEST(RedisStore, RoundTripAndNamespaces) {
  if (!testing::RedisServer::available()) GTEST_SKIP() << "redis-server is not installed";
  testing::RedisServer redis;
  auto a = open_store(redis.spec("job-a"));
  auto b = open_store(redis.spec("job-b"));
  std::vector<char> binary = {'x', '\0', 'y'};
  a->set("k", binary);
  EXPECT_EQ(a->try_get("k"), binary);
  EXPECT_FALSE(b->try_get("k").has_value());
  a->set("k", to_bytes("v2"));
  EXPECT_EQ(to_text(*a->try_get("k")), "v2");
  a->erase("k");
  EXPECT_FALSE(a->try_get("k").has_value());
}

TEST(RedisStore, ThreadRanksCollectives) {
  if (!testing::RedisServer::available()) GTEST_SKIP() << "redis-server is not installed";
  testing::RedisServer redis;
  testing::run_group(4, "redis-group", [](Group& g) {
    std::vector<double> x(1000, g.rank() + 1.0);
    g.all_reduce(x.data(), x.size());
    EXPECT_EQ(x[0], 10.0);
  }, open_store(redis.spec()));
}

}  // namespace
}  // namespace ntp::comm
