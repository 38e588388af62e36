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
#include "tests/comm/drill.h"
#include "tests/comm/redis_server.h"
#include "tests/comm/thread_ranks.h"

namespace ntp::comm {
namespace {

using namespace std::chrono_literals;
using testing::failure_drill;

void report_latencies(int sig, std::chrono::milliseconds timeout, const std::vector<long long>& latency) {
  std::cout << "[ detection ] signal " << sig << ", deadline " << timeout.count() << " ms, latency ms:";
  for (auto l : latency) std::cout << " " << l;
  std::cout << std::endl;
}

class ProcessRanks : public ::testing::TestWithParam<int> {};

TEST_P(ProcessRanks, EveryCollective) {
  const int world = GetParam();
  testing::TempStoreDir dir, logs;
  const std::string log_dir = logs.path();
  const std::string name = "coll" + std::to_string(world) + "-" + std::to_string(::getpid());
  auto peers = testing::spawn_peers("collectives", dir.spec(), world, name, 10000ms, log_dir);
  for (int r = 0; r < world; ++r) {
    auto status = peers[static_cast<std::size_t>(r)].wait_for(60s);
    ASSERT_TRUE(status.has_value()) << "rank " << r << " still running";
    EXPECT_EQ(describe_wait_status(*status), "exit 0") << testing::log_of(log_dir, name, r);
  }
}

INSTANTIATE_TEST_SUITE_P(GroupSize, ProcessRanks, ::testing::Range(1, 9));

TEST(ProcessFailures, KilledPeerFileStore) {
  testing::TempStoreDir dir;
  report_latencies(SIGKILL, 2000ms, failure_drill(dir.spec(), SIGKILL, 2000ms));
}

TEST(ProcessFailures, StoppedPeerFileStore) {
  testing::TempStoreDir dir;
  report_latencies(SIGSTOP, 2000ms, failure_drill(dir.spec(), SIGSTOP, 2000ms));
}

TEST(ProcessFailures, KilledPeerRedisStore) {
  if (!testing::RedisServer::available()) GTEST_SKIP() << "redis-server is not installed";
  testing::RedisServer redis;
  report_latencies(SIGKILL, 2000ms, failure_drill(redis.spec("drill"), SIGKILL, 2000ms));
}

// A sender killed in the middle of a message. Gloo's TCP pair does not wake a
// receive whose payload is half read when the connection closes, so before
// the watched contexts (comm/gloo_watched.h) the receiver waited out its whole
// deadline, in 5 runs of 6. Three kills; each must be seen well before the
// 15 s deadline (the latency includes none of the survivor's epoch 2).
TEST(ProcessFailures, SenderKilledMidMessageIsSeenBeforeTheDeadline) {
  const std::vector<std::string> stream{"--stream", "1", "--elements", std::to_string(16 << 20)};  // 64 MiB
  for (int round = 0; round < 3; ++round) {
    testing::TempStoreDir dir;
    const auto latency = failure_drill(dir.spec(), SIGKILL, 15000ms, 2, 1, stream);
    ASSERT_EQ(latency.size(), 1u);
    EXPECT_LT(latency[0], 5000) << "round " << round << ": the receiver waited for its deadline";
  }
}

// A launcher shell may already export RANK / WORLD_SIZE: the values a parent
// passes must replace the inherited ones, not follow them (getenv returns the
// first entry of a duplicated name, so appended overrides would be ignored).
TEST(ChildProcessEnv, PassedVariablesOverrideInheritedOnes) {
  testing::TempStoreDir dir;
  const std::string log = dir.path() + "/printenv.log";
  ::setenv("NTP_CHILD_ENV_TEST", "inherited", 1);
  ChildProcess child({"/usr/bin/printenv", "NTP_CHILD_ENV_TEST"}, {"NTP_CHILD_ENV_TEST=passed"}, log);
  ::unsetenv("NTP_CHILD_ENV_TEST");
  const auto status = child.wait_for(10s);
  ASSERT_TRUE(status.has_value());
  EXPECT_EQ(describe_wait_status(*status), "exit 0");
  std::ifstream in(log);
  std::string value;
  std::getline(in, value);
  EXPECT_EQ(value, "passed");
}

// A child must not outlive its parent (ranks of `ntp bench comm --nproc`, or
// a test's redis-server, after the parent was killed): a middle process
// starts `sleep 30` through ChildProcess and is SIGKILLed; the sleep must die.
bool process_gone(pid_t pid) {
  std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
  std::string pid_field, comm, state;
  if (!(stat >> pid_field >> comm >> state)) return true;
  return state == "Z" || state == "X";  // dead, maybe not yet reaped by init
}

TEST(ChildProcessLifetime, ChildDiesWithItsParent) {
  int fds[2];
  ASSERT_EQ(::pipe(fds), 0);
  const pid_t middle = ::fork();
  ASSERT_GE(middle, 0);
  if (middle == 0) {
    ChildProcess sleeper({"/bin/sleep", "30"});
    const pid_t pid = sleeper.pid();
    if (::write(fds[1], &pid, sizeof pid) != sizeof pid) _exit(1);
    ::pause();
    _exit(0);
  }
  ::close(fds[1]);
  pid_t sleeper = -1;
  ASSERT_EQ(::read(fds[0], &sleeper, sizeof sleeper), static_cast<ssize_t>(sizeof sleeper));
  ::close(fds[0]);
  ::kill(middle, SIGKILL);
  ::waitpid(middle, nullptr, 0);
  const auto deadline = std::chrono::steady_clock::now() + 10s;
  while (!process_gone(sleeper) && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(10ms);
  const bool gone = process_gone(sleeper);
  if (!gone) ::kill(sleeper, SIGKILL);
  EXPECT_TRUE(gone) << "the child outlived its killed parent";
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
