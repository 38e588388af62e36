#include "tests/comm/drill.h"

#include <gtest/gtest.h>

#include <csignal>
#include <fstream>
#include <sstream>
#include <thread>

#include "comm/group.h"
#include "comm/heartbeat.h"
#include "tests/comm/thread_ranks.h"

namespace ntp::comm::testing {

using namespace std::chrono_literals;

std::vector<ChildProcess> spawn_peers(const std::string& mode, const std::string& store, int world,
                                      const std::string& name, std::chrono::milliseconds timeout,
                                      const std::string& log_dir, const std::vector<std::string>& extra_args) {
  std::vector<ChildProcess> peers;
  for (int r = 0; r < world; ++r) {
    std::vector<std::string> args{NTP_COMM_PEER, "--mode", mode, "--store", store, "--rank", std::to_string(r),
                                  "--world", std::to_string(world), "--name", name,
                                  "--timeout-ms", std::to_string(timeout.count())};
    args.insert(args.end(), extra_args.begin(), extra_args.end());
    peers.emplace_back(args, std::vector<std::string>{}, log_dir + "/" + name + "-rank" + std::to_string(r) + ".log");
  }
  return peers;
}

std::string log_of(const std::string& log_dir, const std::string& name, int rank) {
  std::ifstream in(log_dir + "/" + name + "-rank" + std::to_string(rank) + ".log");
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

namespace {
long long wall_ms() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::system_clock::now().time_since_epoch())
      .count();
}
}  // namespace

std::vector<long long> failure_drill(const std::string& store_spec, int sig, std::chrono::milliseconds timeout,
                                     int world, int victim, const std::vector<std::string>& extra_args) {
  const int kWorld = world;
  const int kVictim = victim;
  auto store = open_store(store_spec);
  testing::TempStoreDir logs;
  const std::string log_dir = logs.path();
  const std::string name = "drill-" + std::to_string(::getpid()) + "-" + std::to_string(sig);
  auto peers = spawn_peers("loop", store_spec, kWorld, name, timeout, log_dir, extra_args);
  std::vector<std::string> ready;
  for (int r = 0; r < kWorld; ++r) ready.push_back("test/ready/" + std::to_string(r));
  store->wait(ready, 30s);
  std::this_thread::sleep_for(300ms);  // well inside the loop
  const long long hit_ms = wall_ms();
  peers[kVictim].signal(sig);
  std::vector<long long> latency;
  for (int r = 0; r < kWorld; ++r) {
    if (r == kVictim) continue;
    auto status = peers[static_cast<std::size_t>(r)].wait_for(std::chrono::seconds(30));
    if (!status) {
      ADD_FAILURE() << "survivor " << r << " still running";
      return latency;
    }
    EXPECT_EQ(describe_wait_status(*status), "exit 0") << log_of(log_dir, name, r);
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
  // The victim's beat (dead or stopped) is left to go stale; the survivors,
  // which ended on their own, took theirs away.
  std::vector<int> all;
  for (int r = 0; r < kWorld; ++r) all.push_back(r);
  const std::vector<std::int64_t> ages = heartbeat_ages_ms(*store, all);
  for (int r = 0; r < kWorld; ++r) {
    if (r == kVictim) {
      EXPECT_GT(ages[static_cast<std::size_t>(r)], 1000) << "victim " << r;
    } else {
      EXPECT_EQ(ages[static_cast<std::size_t>(r)], -1) << "survivor " << r;
    }
  }
  return latency;
  // ~ChildProcess kills (also a stopped process) and reaps the victim.
}


}  // namespace ntp::comm::testing
