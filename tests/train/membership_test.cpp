// Membership agreement through a real file store, one thread per rank.
#include "train/membership.h"

#include <filesystem>
#include <future>
#include <thread>

#include <gtest/gtest.h>

namespace ntp::train {
namespace {

namespace fs = std::filesystem;
using std::chrono::milliseconds;

class MembershipTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("ntp_membership_" + std::to_string(::getpid()) + "_" +
                                        ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    store_ = comm::open_store("file:" + dir_.string());
  }
  void TearDown() override { fs::remove_all(dir_); }

  std::future<Membership> agree(int rank, std::vector<int> members, milliseconds silence = milliseconds(5000)) {
    MembershipOptions o;
    o.rank = rank;
    o.members = std::move(members);
    o.epoch = 1;
    o.settle = milliseconds(50);
    o.silence = silence;
    o.deadline = milliseconds(10000);
    return std::async(std::launch::async, [this, o] { return agree_membership(*store_, o); });
  }

  fs::path dir_;
  std::shared_ptr<comm::Store> store_;
};

TEST_F(MembershipTest, SurvivorsAgreeWithoutTheDeadRank) {
  store_->set(dead_key(1), comm::to_bytes("1"));
  std::vector<std::future<Membership>> runs;
  for (int r : {3, 0, 2}) runs.push_back(agree(r, {0, 1, 2, 3}));
  for (auto& run : runs) {
    const Membership m = run.get();
    EXPECT_EQ(m.epoch, 1u);
    EXPECT_EQ(m.survivors, (std::vector<int>{0, 2, 3}));
    EXPECT_EQ(m.lost, (std::vector<int>{1}));
  }
}

TEST_F(MembershipTest, DeathsWithinTheSettleWindowMakeOneReconfiguration) {
  store_->set(dead_key(0), comm::to_bytes("1"));
  auto leader = agree(1, {0, 1, 2, 3});
  auto other = agree(3, {0, 1, 2, 3});
  // Rank 2 registered, then died before the leader published.
  store_->set("ntp/e1/alive/2", comm::to_bytes("1"));
  store_->set(dead_key(2), comm::to_bytes("1"));
  EXPECT_EQ(leader.get().survivors, (std::vector<int>{1, 3}));
  EXPECT_EQ(other.get().lost, (std::vector<int>{0, 2}));
}

TEST_F(MembershipTest, AMemberSilentTooLongCountsAsLost) {
  auto a = agree(0, {0, 1, 2}, milliseconds(300));
  auto b = agree(2, {0, 1, 2}, milliseconds(300));
  EXPECT_EQ(a.get().lost, (std::vector<int>{1}));
  EXPECT_EQ(b.get().survivors, (std::vector<int>{0, 2}));
  // The silent rank shows up late: it learns it was left out.
  MembershipOptions late;
  late.rank = 1;
  late.members = {0, 1, 2};
  late.epoch = 1;
  EXPECT_THROW(agree_membership(*store_, late), std::runtime_error);
}

}  // namespace
}  // namespace ntp::train
