// Membership agreement through a real file store, one thread per rank.
#include "elastic/membership.h"

#include <filesystem>
#include <future>
#include <iostream>
#include <thread>

#include <gtest/gtest.h>

#include "comm/counting_store.h"
#include "comm/group.h"
#include "comm/heartbeat.h"
#include "tests/support/test_dir.h"

namespace ntp::elastic {
namespace {

namespace fs = std::filesystem;
using std::chrono::milliseconds;

class MembershipTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = test::fresh_test_dir("ntp_membership");
    store_ = comm::open_store("file:" + dir_.string());
  }
  void TearDown() override { fs::remove_all(dir_); }

  std::future<Membership> agree(int rank, std::vector<int> members, std::int64_t applied = 4,
                                milliseconds wait_for_blocked = milliseconds(5000)) {
    MembershipOptions o;
    o.rank = rank;
    o.members = std::move(members);
    o.epoch = 1;
    o.applied = applied;
    o.settle = milliseconds(50);
    o.wait_for_blocked = wait_for_blocked;
    o.deadline = milliseconds(10000);
    return std::async(std::launch::async, [this, o] { return agree_membership(*store_, o); });
  }

  fs::path dir_;
  std::shared_ptr<comm::Store> store_;
};

TEST_F(MembershipTest, SurvivorsAgreeWithoutTheDeadRankAndKnowEachOthersAppliedStep) {
  store_->set(dead_key(1), comm::to_bytes("1"));
  std::vector<std::future<Membership>> runs;
  runs.push_back(agree(3, {0, 1, 2, 3}, 5));
  runs.push_back(agree(0, {0, 1, 2, 3}, 4));
  runs.push_back(agree(2, {0, 1, 2, 3}, 5));
  for (auto& run : runs) {
    const Membership m = run.get();
    EXPECT_EQ(m.epoch, 1u);
    EXPECT_EQ(m.ranks(), (std::vector<int>{0, 2, 3}));
    EXPECT_EQ(m.lost, (std::vector<int>{1}));
    ASSERT_EQ(m.survivors.size(), 3u);
    EXPECT_EQ(m.survivors[0].applied, 4);  // rank 0 missed the last commit
    EXPECT_EQ(m.survivors[1].applied, 5);
  }
}

TEST_F(MembershipTest, DeathsWithinTheSettleWindowMakeOneReconfiguration) {
  store_->set(dead_key(0), comm::to_bytes("1"));
  auto a = agree(1, {0, 1, 2, 3});
  auto b = agree(3, {0, 1, 2, 3});
  // Rank 2 registered, then died before anyone published.
  store_->append(alive_list_key(1), comm::to_bytes("2 4 0"));
  store_->set(dead_key(2), comm::to_bytes("1"));
  EXPECT_EQ(a.get().ranks(), (std::vector<int>{1, 3}));
  EXPECT_EQ(b.get().lost, (std::vector<int>{0, 2}));
}

// The published list is O(distinct states + gaps) bytes: 100k survivors of
// one failure in one state fit in a line, and the text gives back every
// survivor exactly, different states and norms included.
TEST(SurvivorsText, GroupsRanksByStateAndGivesEverySurvivorBack) {
  std::vector<Survivor> many;
  for (int r = 0; r < 100000; ++r) {
    if (r != 5) many.push_back({r, 7, 1, -1, 1.25, false});
  }
  const std::string text = format_survivors(many);
  EXPECT_LT(text.size(), 60u) << text;
  EXPECT_EQ(parse_survivors(text), many);
  const std::vector<Survivor> mixed = {{0, 7, 1, -1, 1.25, false}, {1, 6, 1, 7, 1.25, false},
                                       {2, 7, 1, -1, 1.25, false}, {4, 7, 1, -1, 0.1 + 0.2, true},
                                       {9, -1, 0, -1, 0, false},    {10, 7, 1, -1, 1.25, false}};
  EXPECT_EQ(parse_survivors(format_survivors(mixed)), mixed);
  EXPECT_THROW(parse_survivors("7:1:-1:0:0"), std::runtime_error);
}

// The settle wait derived from the launcher's reap interval and the store's
// round trip, bounded.
TEST(DerivedSettle, IsTheReapIntervalPlusTwoRoundTripsAtMostTheBound) {
  EXPECT_EQ(derived_settle(std::chrono::nanoseconds(0)), milliseconds(10));
  EXPECT_EQ(derived_settle(std::chrono::microseconds(300)), milliseconds(12));
  EXPECT_EQ(derived_settle(milliseconds(40)), milliseconds(90));
  EXPECT_EQ(derived_settle(std::chrono::seconds(2)), kMaxDerivedSettle);
}

// A rank's store calls in one agreement grow with the log of its wait, not
// with its length: rank 1 waits 3 s for the census (rank 2 silent until its
// dead mark comes) in a few checks on the census taker, and the taker's own
// looks thin out. At fixed intervals (250 ms, 20 ms) they were about 28 and
// 450 calls.
TEST_F(MembershipTest, ARanksStoreCallsGrowWithTheLogOfTheWaitNotItsLength) {
  const auto run = [this](int rank) {
    comm::CountingStore counted(store_);
    MembershipOptions o;
    o.rank = rank;
    o.members = {0, 1, 2};
    o.epoch = 1;
    o.applied = 4;
    o.settle = milliseconds(20);
    o.wait_for_blocked = milliseconds(10000);
    o.deadline = milliseconds(20000);
    agree_membership(counted, o);
    return counted.counts().operations;
  };
  auto taker = std::async(std::launch::async, run, 0);
  std::this_thread::sleep_for(milliseconds(200));  // rank 0 registers first
  auto waiter = std::async(std::launch::async, run, 1);
  std::this_thread::sleep_for(milliseconds(3000));
  store_->set(dead_key(2), comm::to_bytes("1"));
  const auto taker_ops = taker.get();
  const auto waiter_ops = waiter.get();
  std::cout << "[ store calls ] census taker " << taker_ops << ", other rank " << waiter_ops << std::endl;
  EXPECT_LE(waiter_ops, 14);
  EXPECT_LE(taker_ops, 120);
}

TEST_F(MembershipTest, AMemberSilentTooLongIsFencedAndLeftOut) {
  auto a = agree(0, {0, 1, 2}, 4, milliseconds(300));
  auto b = agree(2, {0, 1, 2}, 4, milliseconds(300));
  EXPECT_EQ(a.get().lost, (std::vector<int>{1}));
  EXPECT_EQ(b.get().ranks(), (std::vector<int>{0, 2}));
  // The launcher is asked to kill it...
  EXPECT_TRUE(store_->try_get(fence_key(1)).has_value());
  // ...and if it shows up anyway, it learns it was left out.
  MembershipOptions late;
  late.rank = 1;
  late.members = {0, 1, 2};
  late.epoch = 1;
  EXPECT_THROW(agree_membership(*store_, late), LeftOutError);
}

// A silent member whose lease the store still holds may still be running
// (cut off from the store, its guard has not fenced it yet): the census
// asks for it to be fenced but publishes no list without it until its dead
// mark is set or its lease has ended on the store.
TEST_F(MembershipTest, ASilentMemberIsLeftOutOnlyOnceItsLeaseEndedOrItIsDead) {
  store_->set_expiring(comm::lease_key(1), comm::to_bytes("1"), milliseconds(1500));
  store_->set_expiring(comm::lease_key(3), comm::to_bytes("1"), milliseconds(60000));
  const auto start = std::chrono::steady_clock::now();
  auto a = agree(0, {0, 1, 2, 3}, 4, milliseconds(300));
  auto b = agree(2, {0, 1, 2, 3}, 4, milliseconds(300));
  ASSERT_EQ(a.wait_for(milliseconds(1000)), std::future_status::timeout) << "published while leases were held";
  EXPECT_TRUE(store_->try_get(fence_key(1)).has_value());  // asked for, not waited for
  EXPECT_TRUE(store_->try_get(fence_key(3)).has_value());
  store_->set(dead_key(3), comm::to_bytes("fenced"));  // its launcher killed it
  const Membership m = a.get();
  EXPECT_GE(std::chrono::steady_clock::now() - start, milliseconds(1500));  // rank 1's lease ran out
  EXPECT_EQ(m.ranks(), (std::vector<int>{0, 2}));
  EXPECT_EQ(m.lost, (std::vector<int>{1, 3}));
  EXPECT_EQ(b.get().ranks(), (std::vector<int>{0, 2}));
}

// A host cut off the network comes back after the others declared its ranks
// lost: its ranks, busy recovering from the partition, must not register
// (they would take the census of an epoch the survivors never enter) and must
// fence nobody.
TEST_F(MembershipTest, ARankDeclaredLostNeitherRegistersNorFencesTheSurvivors) {
  store_->set(dead_key(4), comm::to_bytes("lost with its host"));
  auto back = agree(4, {0, 1, 4, 5}, 4, milliseconds(200));
  EXPECT_THROW(back.get(), LeftOutError);
  EXPECT_TRUE(store_->items(alive_list_key(1)).empty());
  EXPECT_TRUE(store_->items(members_list_key(1)).empty());
  for (int r : {0, 1, 5}) EXPECT_FALSE(store_->try_get(fence_key(r)).has_value()) << "rank " << r;
}

// The same rank declared lost only after it registered, the first, so it took
// the census: the survivors it counts as silent are in another epoch, and it
// must neither fence them nor publish.
TEST_F(MembershipTest, ACensusTakerDeclaredLostMeanwhileFencesNobodyAndPublishesNothing) {
  auto taker = agree(4, {0, 1, 4, 5}, 4, milliseconds(300));
  std::this_thread::sleep_for(milliseconds(100));
  store_->set(dead_key(4), comm::to_bytes("lost with its host"));
  store_->set(dead_key(5), comm::to_bytes("lost with its host"));
  EXPECT_THROW(taker.get(), LeftOutError);
  EXPECT_TRUE(store_->items(members_list_key(1)).empty());
  for (int r : {0, 1}) EXPECT_FALSE(store_->try_get(fence_key(r)).has_value()) << "rank " << r;
}

// Epochs are fencing tokens: rank 1, cut off while ranks 0 and 2 agreed
// epoch 1 without it, comes back with its state still in epoch 0. The store
// refuses its registration in epoch 1 (its seat was closed by compare-and-set
// before the list was published), it is told why, and it wrote nothing there.
// A candidate left out is refused the same way, so it must ask again in a
// later epoch (the rejoin path).
TEST_F(MembershipTest, AStaleEpochsRegistrationIsRefusedByTheStoreAndTheRankToldSo) {
  MembershipOptions o;
  o.members = {0, 1, 2};
  o.candidates = {5};
  o.epoch = 1;
  o.settle = milliseconds(20);
  o.wait_for_blocked = milliseconds(300);
  o.deadline = milliseconds(10000);
  MembershipOptions a = o, b = o;
  a.rank = 0;
  b.rank = 2;
  auto fa = std::async(std::launch::async, [&] { return agree_membership(*store_, a); });
  auto fb = std::async(std::launch::async, [&] { return agree_membership(*store_, b); });
  EXPECT_EQ(fa.get().ranks(), (std::vector<int>{0, 2}));
  EXPECT_EQ(fb.get().lost, (std::vector<int>{1}));
  const std::size_t registered = store_->items(alive_list_key(1)).size();
  for (int stale : {1, 5}) {
    MembershipOptions back = o;
    back.rank = stale;
    try {
      agree_membership(*store_, back);
      ADD_FAILURE() << "rank " << stale << " registered in an epoch agreed without it";
    } catch (const StaleEpochError& e) {
      EXPECT_NE(std::string(e.what()).find("refused its registration in epoch 1"), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find(seat_key(1, stale)), std::string::npos) << e.what();
    }
    EXPECT_EQ(comm::to_text(*store_->try_get(seat_key(1, stale))), "closed");
  }
  EXPECT_EQ(store_->items(alive_list_key(1)).size(), registered) << "a stale rank wrote its registration";
  // The seat is the whole check: with its seat claimed (the broken variant:
  // a store that let it through), the same rank registers and is caught
  // only later, by the published list.
  store_->erase(seat_key(1, 1));
  MembershipOptions through = o;
  through.rank = 1;
  EXPECT_THROW(
      {
        try {
          agree_membership(*store_, through);
        } catch (const StaleEpochError&) {
          ADD_FAILURE() << "refused without its seat closed";
          throw;
        }
      },
      LeftOutError);
  EXPECT_EQ(store_->items(alive_list_key(1)).size(), registered + 1);
}

// For each rank and epoch one of the two compare-and-sets wins: a rank that
// claimed its seat first keeps it (the publisher's close does not overwrite
// it), so a seat never reads "closed" for a rank the census may count.
TEST_F(MembershipTest, APublisherDoesNotCloseASeatItsRankClaimedFirst) {
  store_->create(seat_key(1, 1), comm::to_bytes("registered"));  // rank 1 claimed it, then died
  store_->set(dead_key(1), comm::to_bytes("1"));
  auto a = agree(0, {0, 1});
  EXPECT_EQ(a.get().lost, (std::vector<int>{1}));
  EXPECT_EQ(comm::to_text(*store_->try_get(seat_key(1, 1))), "registered");
  EXPECT_EQ(comm::to_text(*store_->try_get(seat_key(1, 0))), "registered");
}

TEST_F(MembershipTest, ThePublicationIsCompareAndSetTheFirstOneWins) {
  // A survivor that thinks it decides alone cannot overwrite an earlier decision.
  store_->append(members_list_key(1), comm::to_bytes(format_survivors({{0, 4, 0, -1, 0, false}, {2, 4, 0, -1, 0, false}})));
  auto late = agree(1, {0, 1, 2});
  EXPECT_THROW(late.get(), LeftOutError);
  auto member = agree(2, {0, 1, 2});
  EXPECT_EQ(member.get().ranks(), (std::vector<int>{0, 2}));
}

TEST_F(MembershipTest, ManySurvivorsRacingToPublishAllAdoptOneList) {
  std::vector<std::future<Membership>> runs;
  std::vector<int> members;
  for (int r = 0; r < 12; ++r) members.push_back(r);
  store_->set(dead_key(5), comm::to_bytes("1"));
  for (int r = 0; r < 12; ++r) {
    if (r != 5) runs.push_back(agree(r, members));
  }
  std::vector<int> first;
  for (auto& run : runs) {
    const std::vector<int> ranks = run.get().ranks();
    if (first.empty()) first = ranks;
    EXPECT_EQ(ranks, first);
  }
  EXPECT_EQ(first.size(), 11u);
}

TEST_F(MembershipTest, ACommitsOutcomeTravelsBitForBit) {
  // A rank short of the commit completes it with exactly the norm the others saw.
  MembershipOptions o;
  o.members = {0, 1};
  o.epoch = 1;
  o.settle = milliseconds(20);
  o.deadline = milliseconds(5000);
  MembershipOptions a = o, b = o;
  a.rank = 0;
  a.applied = 7;
  a.grad_norm = 0.1 + 1e-17;  // not representable in decimal text at %g precision
  b.rank = 1;
  b.applied = 6;
  b.pending = 7;
  b.skipped = true;
  auto fa = std::async(std::launch::async, [&] { return agree_membership(*store_, a); });
  auto fb = std::async(std::launch::async, [&] { return agree_membership(*store_, b); });
  const Membership m = fa.get();
  EXPECT_EQ(fb.get().survivors, m.survivors);
  ASSERT_EQ(m.survivors.size(), 2u);
  EXPECT_EQ(m.survivors[0].grad_norm, a.grad_norm);
  EXPECT_EQ(m.survivors[0].applied, 7);
  EXPECT_EQ(m.survivors[1].pending, 7);
  EXPECT_TRUE(m.survivors[1].skipped);
}

TEST_F(MembershipTest, WhenTheCensusTakerDiesTheOthersTakeOverWithoutWaitingItOut) {
  // Rank 0 registered first (so it takes the census), then died.
  store_->append(alive_list_key(1), comm::to_bytes("0 4 0"));
  store_->set(dead_key(0), comm::to_bytes("1"));
  const auto start = std::chrono::steady_clock::now();
  auto a = agree(1, {0, 1, 2}, 4, milliseconds(8000));
  auto b = agree(2, {0, 1, 2}, 4, milliseconds(8000));
  EXPECT_EQ(a.get().ranks(), (std::vector<int>{1, 2}));
  EXPECT_EQ(b.get().lost, (std::vector<int>{0}));
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(4));
}

TEST_F(MembershipTest, ThePublisherErasesTheKeysOfTheEpochBeforeTheFailedOne) {
  store_->set(comm::group_keys_prefix(1) + "world/x", comm::to_bytes("old"));
  store_->set(comm::group_keys_prefix(2) + "world/x", comm::to_bytes("current"));
  store_->append(alive_list_key(1), comm::to_bytes("0 4 0"));
  MembershipOptions o;
  o.rank = 0;
  o.members = {0};
  o.epoch = 3;
  o.settle = milliseconds(10);
  agree_membership(*store_, o);
  EXPECT_FALSE(store_->try_get(comm::group_keys_prefix(1) + "world/x"));
  EXPECT_TRUE(store_->items(alive_list_key(1)).empty());
  EXPECT_TRUE(store_->try_get(comm::group_keys_prefix(2) + "world/x"));
}

TEST_F(MembershipTest, NoAgreementByTheDeadlineIsAnErrorNotAHang) {
  MembershipOptions o;
  o.rank = 0;
  o.members = {0, 1};
  o.epoch = 1;
  o.wait_for_blocked = milliseconds(60000);
  o.deadline = milliseconds(300);
  const auto start = std::chrono::steady_clock::now();
  EXPECT_THROW(agree_membership(*store_, o), std::runtime_error);
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(3));
}

}  // namespace
}  // namespace ntp::elastic
