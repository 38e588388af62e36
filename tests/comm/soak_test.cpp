// Soak: repeated SIGKILL and SIGSTOP drills with 8 ranks as processes, for
// detection-latency statistics (label `soak`; not in the default suite).
#include <gtest/gtest.h>

#include <algorithm>
#include <csignal>
#include <iostream>

#include "tests/comm/drill.h"
#include "tests/comm/thread_ranks.h"

namespace ntp::comm {
namespace {

using namespace std::chrono_literals;

void summarize(const char* what, std::vector<long long> all) {
  std::sort(all.begin(), all.end());
  if (all.empty()) return;
  std::cout << "[ detection ] " << what << ": n=" << all.size() << " min=" << all.front()
            << " ms median=" << all[all.size() / 2] << " ms max=" << all.back() << " ms" << std::endl;
}

TEST(DetectionSoak, KilledPeerEightRanks) {
  std::vector<long long> all;
  for (int round = 0; round < 10; ++round) {
    testing::TempStoreDir dir;
    auto latency = testing::failure_drill(dir.spec(), SIGKILL, 1000ms, 8, round % 8);
    all.insert(all.end(), latency.begin(), latency.end());
  }
  summarize("SIGKILL, 8 ranks, deadline 1000 ms", all);
}

TEST(DetectionSoak, StoppedPeerEightRanks) {
  std::vector<long long> all;
  for (int round = 0; round < 5; ++round) {
    testing::TempStoreDir dir;
    auto latency = testing::failure_drill(dir.spec(), SIGSTOP, 1000ms, 8, (round * 3) % 8);
    all.insert(all.end(), latency.begin(), latency.end());
  }
  summarize("SIGSTOP, 8 ranks, deadline 1000 ms", all);
}

}  // namespace
}  // namespace ntp::comm
