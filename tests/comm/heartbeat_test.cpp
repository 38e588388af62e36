#include "comm/heartbeat.h"

#include <gtest/gtest.h>

#include <thread>

#include "comm/counting_store.h"
#include "tests/comm/thread_ranks.h"

namespace ntp::comm {
namespace {

using namespace std::chrono_literals;

TEST(Heartbeat, LiveRanksAreFreshStoppedAndMissingOnesStaleAndAStoppedBeatIsGone) {
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
  EXPECT_EQ(ages[1], -1);  // stopped on its own: the beat is taken away, not left to go stale
  EXPECT_EQ(ages[2], -1);
}

TEST(Heartbeat, CheckingManyRanksIsOneStoreOperation) {
  testing::TempStoreDir dir;
  auto store = std::make_shared<CountingStore>(open_store(dir.spec()));
  Heartbeat beat(store, 3, 10s);
  const StoreCounts before = store->counts();
  std::vector<int> ranks(64);
  for (int r = 0; r < 64; ++r) ranks[static_cast<std::size_t>(r)] = r;
  const auto stale = stale_ranks(*store, ranks, 5s);
  EXPECT_EQ(stale.size(), 63u);
  EXPECT_EQ((store->counts() - before).operations, 1u);
}

}  // namespace
}  // namespace ntp::comm
