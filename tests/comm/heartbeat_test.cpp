#include "comm/heartbeat.h"

#include <gtest/gtest.h>

#include <thread>

#include "tests/comm/thread_ranks.h"

namespace ntp::comm {
namespace {

using namespace std::chrono_literals;

TEST(Heartbeat, LiveRanksAreFreshStoppedAndMissingOnesStale) {
  testing::TempStoreDir dir;
  auto store = open_store(dir.spec());
  auto alive = std::make_unique<Heartbeat>(store, 0, 50ms);
  auto leaving = std::make_unique<Heartbeat>(store, 1, 50ms);
  EXPECT_TRUE(stale_ranks(*store, {0, 1}, 1000ms).empty());
  EXPECT_EQ(stale_ranks(*store, {0, 1, 2}, 1000ms), std::vector<int>{2});  // never beat
  leaving.reset();
  std::this_thread::sleep_for(600ms);
  EXPECT_EQ(stale_ranks(*store, {0, 1, 2}, 400ms), (std::vector<int>{1, 2}));
  EXPECT_GE(alive->beats(), 5u);
  const auto ages = heartbeat_ages_ms(*store, {0, 1, 2});
  EXPECT_LT(ages[0], 400);
  EXPECT_GE(ages[1], 400);
  EXPECT_EQ(ages[2], -1);
}

}  // namespace
}  // namespace ntp::comm
