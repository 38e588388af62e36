#include "comm/heartbeat.h"

#include <gtest/gtest.h>

#include <csignal>
#include <mutex>
#include <thread>

#include "comm/counting_store.h"
#include "tests/comm/redis_server.h"
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

// The guard's margin and its decision, on a fake clock.
TEST(Lease, TheGuardStopsAHolderBeforeTheStoreCanDropItsLease) {
  EXPECT_EQ(lease_guard(10s), 1000ms);   // a tenth
  EXPECT_EQ(lease_guard(1s), 200ms);     // at least 200 ms
  EXPECT_EQ(lease_guard(300ms), 150ms);  // at most half
  EXPECT_EQ(lease_poll(10s), 50ms);
  EXPECT_EQ(lease_poll(300ms), 37ms);
  const std::chrono::steady_clock::time_point sent{std::chrono::seconds(1000)};
  for (const auto ttl : {300ms, 1000ms, 4000ms, 10000ms}) {
    const auto stop = sent + ttl - lease_guard(ttl);
    EXPECT_FALSE(lease_lapsed(sent, sent, ttl));
    EXPECT_FALSE(lease_lapsed(sent, stop, ttl)) << ttl.count();
    EXPECT_TRUE(lease_lapsed(sent, stop + 1ms, ttl)) << ttl.count();
    // The holder stops a guard before the store may drop it, and a poll
    // later at most: still at least 3/4 of the guard early.
    EXPECT_LE(ttl - lease_guard(ttl) + lease_poll(ttl), ttl - lease_guard(ttl) * 3 / 4);
    EXPECT_TRUE(lease_lapsed(sent, sent + ttl, ttl));  // by the time the store may drop it
  }
  // A broken guard (no margin) would let the holder run until the store drops it.
  const auto no_margin = [&](auto now, auto ttl) { return now > sent + ttl; };
  EXPECT_FALSE(no_margin(sent + 1000ms, 1000ms));
  EXPECT_TRUE(lease_lapsed(sent, sent + 1000ms, 1000ms));
}

struct Lapses {
  std::mutex mutex;
  std::vector<std::string> lines;
  std::chrono::steady_clock::time_point at;
  LeaseOptions options(std::chrono::milliseconds ttl) {
    return {ttl, [this](const std::string& why) {
              std::lock_guard lock(mutex);
              lines.push_back(why);
              at = std::chrono::steady_clock::now();
            }};
  }
  std::size_t count() {
    std::lock_guard lock(mutex);
    return lines.size();
  }
};

TEST(Lease, AHeartbeatHoldsItsLeaseAndTakesItAwayWhenItEnds) {
  testing::TempStoreDir dir;
  auto store = open_store(dir.spec());
  Lapses lapses;
  // A ttl with room for a loaded machine: a renewal late by more than
  // ttl - guard would (rightly) fence the holder.
  auto beat = std::make_unique<Heartbeat>(store, 2, 50ms, lapses.options(2000ms));
  std::this_thread::sleep_for(2500ms);  // past the ttl: renewed all along
  EXPECT_TRUE(store->try_get(lease_key(2)).has_value());
  EXPECT_TRUE(beat->check_lease());
  beat->pause();  // MUTE: the beat stops, the lease is still renewed
  std::this_thread::sleep_for(1000ms);
  EXPECT_EQ(stale_ranks(*store, {2}, 500ms), std::vector<int>{2});
  EXPECT_TRUE(store->try_get(lease_key(2)).has_value());
  EXPECT_EQ(lapses.count(), 0u);
  beat.reset();  // ends on its own: beat and lease gone, nobody fenced
  EXPECT_FALSE(store->try_get(lease_key(2)).has_value());
  EXPECT_FALSE(store->try_get(heartbeat_key(2)).has_value());
  EXPECT_EQ(lapses.count(), 0u);
}

TEST(Lease, AHolderThatStopsRenewingFencesItselfBeforeTheStoreDropsTheLease) {
  testing::TempStoreDir dir;
  auto store = open_store(dir.spec());
  Lapses lapses;
  const auto ttl = 600ms;
  Heartbeat beat(store, 5, 50ms, lapses.options(ttl));
  std::this_thread::sleep_for(200ms);
  const auto cut = std::chrono::steady_clock::now();
  beat.lapse();  // LAPSE: as if cut off from the store
  std::this_thread::sleep_for(ttl + 300ms);
  ASSERT_EQ(lapses.count(), 1u);  // once
  const auto after = std::chrono::duration_cast<std::chrono::milliseconds>(lapses.at - cut);
  EXPECT_LT(after, ttl) << "the store could have dropped the lease while the holder ran";
  EXPECT_NE(lapses.lines[0].find("self-fenced"), std::string::npos) << lapses.lines[0];
  EXPECT_NE(lapses.lines[0].find(lease_key(5)), std::string::npos) << lapses.lines[0];
  EXPECT_NE(lapses.lines[0].find(store->describe()), std::string::npos) << lapses.lines[0];
  EXPECT_FALSE(beat.check_lease());
  EXPECT_FALSE(store->try_get(lease_key(5)).has_value());  // and the store dropped it after
}

// The real case: the store stops answering (a SIGSTOPped redis-server looks
// like a network cut to its clients: every call blocks for the socket
// deadline). The guard, which never calls the store, fences the holder
// within the lease all the same.
TEST(Lease, AHolderWhoseRedisStopsAnsweringFencesItselfWithinTheLease) {
  if (!testing::RedisServer::available()) GTEST_SKIP() << "redis-server is not installed";
  testing::RedisServer redis;
  auto store = open_store(redis.spec("lease"));
  Lapses lapses;
  const auto ttl = 1500ms;
  auto beat = std::make_unique<Heartbeat>(store, 1, 100ms, lapses.options(ttl));
  std::this_thread::sleep_for(300ms);
  redis.signal(SIGSTOP);
  const auto cut = std::chrono::steady_clock::now();
  while (lapses.count() == 0 && std::chrono::steady_clock::now() - cut < ttl + 2s) std::this_thread::sleep_for(10ms);
  redis.signal(SIGCONT);
  ASSERT_EQ(lapses.count(), 1u) << "not fenced within the lease and 2 s";
  const auto after = std::chrono::duration_cast<std::chrono::milliseconds>(lapses.at - cut);
  EXPECT_LT(after, ttl) << "the store could have dropped the lease while the holder ran";
  EXPECT_NE(lapses.lines[0].find(redis.spec("lease")), std::string::npos) << lapses.lines[0];
  beat.reset();
}

}  // namespace
}  // namespace ntp::comm
