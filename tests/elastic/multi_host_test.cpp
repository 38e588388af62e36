// A host the others went on without (leave_if_others_went_on), through a
// real file store and run directory: declared lost with its host, or every
// rank lost while the others agreed without them; it leaves the job to them
// (and says so in the store), and only then.
#include "elastic/multi_host.h"

#include <filesystem>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "comm/store.h"
#include "elastic/fencer.h"
#include "elastic/membership.h"
#include "elastic/worker.h"
#include "tests/support/test_dir.h"

namespace ntp::elastic {
namespace {

namespace fs = std::filesystem;

class LeaveIfOthersWentOnTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = test::fresh_test_dir("ntp_multi_host");
    fs::create_directories(dir_ / "store");
    store_ = comm::open_store("file:" + (dir_ / "store").string());
    run_ = std::make_unique<train::RunDir>(train::RunDir::create(dir_ / "run"));
    config_.parallel.dp = 2;
    config_.parallel.tp = 2;
    config_.elastic.recover = true;
    config_.deadline.rendezvous_s = 0.5;  // how long a host looks for the agreement: 1.5 s
    node_.nnodes = 2;
    node_.store = "redis://10.0.0.1:6379?job=j";
  }
  void TearDown() override { fs::remove_all(dir_); }

  // Host 0 (ranks 0 and 1) after its launch: each rank exited with `codes[i]`.
  LaunchResult ended(const std::vector<int>& codes) {
    LaunchResult result;
    for (std::size_t i = 0; i < codes.size(); ++i) {
      RankExit r;
      r.rank = static_cast<int>(i);
      r.running = false;
      r.exited = true;
      r.code = codes[i];
      r.tolerated_exit = codes[i] == kExitSelfFenced;
      result.ranks.push_back(r);
    }
    return result;
  }
  void agreed(int epoch, const std::vector<int>& survivors) {
    run_->event("membership_agreed", {{"epoch", epoch}, {"survivors", survivors}});
  }
  void leave(const LaunchResult& result, double since) {
    leave_if_others_went_on(*store_, config_, *run_, host_of(config_, node_), result, since);
  }
  bool said_it_left() { return store_->try_get("ntp/host_left/0").has_value(); }

  fs::path dir_;
  std::shared_ptr<comm::Store> store_;
  std::unique_ptr<train::RunDir> run_;
  train::Config config_;
  NodeOptions node_;
};

TEST_F(LeaveIfOthersWentOnTest, AHostWhoseRanksFencedThemselvesLeavesOnceTheOthersAgreedWithoutThem) {
  const double since = train::unix_time_s();
  agreed(1, {2, 3});
  try {
    leave(ended({kExitSelfFenced, kExitSelfFenced}), since);
    FAIL() << "the host stayed";
  } catch (const HostCutOff& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("node 0 lost every rank, ranks 0-1 (they fenced themselves"), std::string::npos) << what;
    EXPECT_NE(what.find("redis://10.0.0.1:6379 agreed epoch 1 without them (survivors [2,3])"), std::string::npos)
        << what;
  }
  EXPECT_TRUE(said_it_left()) << "the next host would not write the run's summary";
}

// Each broken variant of the rule: the host must stay (and the caller's
// verdict follows) when the agreement keeps one of its ranks, came before
// this launch, or one of its ranks did not fail; and a one-host job never
// looks.
TEST_F(LeaveIfOthersWentOnTest, ItStaysUnlessEveryRankWasLostAndAnAgreementSinceItsLaunchLeftThemAllOut) {
  agreed(1, {2, 3});  // before this launch
  const double since = train::unix_time_s() + 0.001;
  EXPECT_NO_THROW(leave(ended({kExitSelfFenced, kExitSelfFenced}), since));
  agreed(2, {1, 2, 3});  // keeps rank 1
  EXPECT_NO_THROW(leave(ended({kExitSelfFenced, kExitSelfFenced}), since));
  agreed(3, {2, 3});
  EXPECT_NO_THROW(leave(ended({0, kExitSelfFenced}), since));  // rank 0 finished
  node_.nnodes = 1;
  EXPECT_NO_THROW(leave(ended({kExitSelfFenced, kExitSelfFenced, kExitSelfFenced, kExitSelfFenced}), since));
  EXPECT_FALSE(said_it_left());
  node_.nnodes = 2;
  EXPECT_THROW(leave(ended({kExitSelfFenced, kExitSelfFenced}), since), HostCutOff);  // epoch 3
}

// Cut off and back before the store calls gave up: another host's watcher
// declared a rank lost with its host, whatever the launch's own records say.
TEST_F(LeaveIfOthersWentOnTest, AHostWhoseRanksWereDeclaredLostWithItLeaves) {
  store_->set(fence_key(1), comm::to_bytes(kLostWithHost));
  try {
    leave(ended({0, 0}), train::unix_time_s());
    FAIL() << "the host stayed";
  } catch (const HostCutOff& e) {
    EXPECT_NE(std::string(e.what()).find("declared its ranks [1] lost"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace ntp::elastic
