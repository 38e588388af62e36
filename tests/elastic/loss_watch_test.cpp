// The worker's watch on ranks declared lost with their host and on failed
// epochs, through a real file store: it reports each new entry and each live
// epoch's failure once, skips the history it started after and marks on other
// epochs, and aborts a Gloo call blocked on the lost rank, or in the failed
// epoch, long before the call's own deadline.
#include "elastic/loss_watch.h"

#include <atomic>
#include <chrono>
#include <filesystem>
#include <functional>
#include <string>
#include <utility>
#include <mutex>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "comm/error.h"
#include "comm/group.h"
#include "elastic/membership.h"
#include "tests/support/test_dir.h"

namespace ntp::elastic {
namespace {

namespace fs = std::filesystem;
using namespace std::chrono_literals;

class LossWatchTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = test::fresh_test_dir("ntp_loss_watch");
    fs::create_directories(dir_ / "store");
    store_ = comm::open_store("file:" + (dir_ / "store").string());
  }
  void TearDown() override { fs::remove_all(dir_); }
  void declare(const std::string& item) { store_->append(lost_list_key(), comm::to_bytes(item)); }

  fs::path dir_;
  std::shared_ptr<comm::Store> store_;
};

TEST_F(LossWatchTest, ReportsEachRankDeclaredAfterItStartedOnce) {
  declare("3");  // recovered from before this worker started
  std::mutex mutex;
  std::vector<int> seen;
  {
    LossWatch watch(store_, 20ms, [&](int rank) {
      std::lock_guard lock(mutex);
      seen.push_back(rank);
    });
    declare("5");
    declare("not a rank");
    declare("6");
    for (int i = 0; i < 100; ++i) {
      std::this_thread::sleep_for(20ms);
      std::lock_guard lock(mutex);
      if (seen.size() >= 2) break;
    }
    std::this_thread::sleep_for(100ms);  // more polls: nothing is reported twice
  }
  EXPECT_EQ(seen, (std::vector<int>{5, 6}));
}

// How rank 0's all_reduce (deadline 20 s) in group {0, 1} of epoch 1 ends
// when rank 1 keeps its end open and never calls, as a rank on a host cut off
// from the network or one blocked elsewhere does, and `report` is called
// 200 ms into the call.
struct BlockedCall {
  std::string error;
  double seconds_after_report = 0;
};

BlockedCall call_blocked_on_rank_1(const std::shared_ptr<comm::Store>& store, const std::function<void()>& report) {
  std::atomic<bool> done{false};
  std::chrono::steady_clock::time_point reported_at, failed_at;
  BlockedCall out;
  auto member = [&](int rank) {
    comm::GroupOptions o;
    o.ranks = {0, 1};
    o.global_rank = rank;
    o.epoch = 1;
    o.name = "loss-watch";
    o.timeout = 20s;
    auto g = comm::create_group(store, o);
    if (rank == 1) {
      while (!done) std::this_thread::sleep_for(10ms);
      return;
    }
    std::thread reporter([&] {
      std::this_thread::sleep_for(200ms);
      reported_at = std::chrono::steady_clock::now();
      report();
    });
    std::vector<float> x(100, 1.0f);
    try {
      g->all_reduce(x.data(), x.size());
    } catch (const comm::CommError& e) {
      out.error = e.what();
    }
    failed_at = std::chrono::steady_clock::now();
    reporter.join();
    done = true;
  };
  std::thread rank1(member, 1);
  member(0);
  rank1.join();
  out.seconds_after_report = std::chrono::duration<double>(failed_at - reported_at).count();
  return out;
}

// Rank 0's call fails within a second of the fencer's entry.
TEST_F(LossWatchTest, AbortsACallBlockedOnARankDeclaredLost) {
  LossWatch watch(store_, 20ms, [](int rank) { comm::abort_groups_with(rank, "declared lost with its host"); });
  const BlockedCall call = call_blocked_on_rank_1(store_, [&] { declare("1"); });
  // Rank 0's member aborted names the loss; rank 1's (a thread of this
  // process too) may have closed the connection first.
  EXPECT_TRUE(call.error.find("declared lost with its host") != std::string::npos ||
              call.error.find("connection closed") != std::string::npos)
      << call.error;
  EXPECT_LT(call.seconds_after_report, 1.0);
}

EpochWatch abort_epochs(std::uint64_t live) {
  return {[live] { return live; }, [](std::uint64_t epoch, int reporter) {
            comm::abort_epoch_groups(epoch, "epoch marked failed by rank " + std::to_string(reporter));
          }};
}

// Rank 0's call fails within a second of another member's failure mark on its epoch.
TEST_F(LossWatchTest, AbortsACallBlockedInAnEpochAMemberMarkedFailed) {
  LossWatch watch(store_, 20ms, [](int) {}, abort_epochs(1));
  const BlockedCall call = call_blocked_on_rank_1(store_, [&] { store_->create(failed_key(1), comm::to_bytes("5")); });
  EXPECT_TRUE(call.error.find("epoch marked failed by rank 5") != std::string::npos ||
              call.error.find("connection closed") != std::string::npos)
      << call.error;
  EXPECT_LT(call.seconds_after_report, 1.0);
}

// The check fails: a mark on another epoch than the one the rank trains in
// leaves the call to its own deadline (cut short here by the test).
TEST_F(LossWatchTest, AMarkOnAnotherEpochAbortsNothing) {
  LossWatch watch(store_, 20ms, [](int) {}, abort_epochs(1));
  const BlockedCall call = call_blocked_on_rank_1(store_, [&] {
    store_->create(failed_key(2), comm::to_bytes("5"));
    store_->create(failed_key(0), comm::to_bytes("5"));
    std::this_thread::sleep_for(600ms);  // 30 intervals with no abort
    store_->create(failed_key(1), comm::to_bytes("6"));
  });
  EXPECT_GT(call.seconds_after_report, 0.55) << call.error;
  EXPECT_LT(call.seconds_after_report, 1.6) << call.error;
}

// Each epoch's failure is reported once, and only while it is the live one.
TEST_F(LossWatchTest, ReportsEachLiveEpochsFailureOnce) {
  std::atomic<std::uint64_t> live{1};
  std::mutex mutex;
  std::vector<std::pair<std::uint64_t, int>> seen;
  const auto wait_for = [&](std::size_t n) {
    for (int i = 0; i < 100; ++i) {
      {
        std::lock_guard lock(mutex);
        if (seen.size() >= n) return;
      }
      std::this_thread::sleep_for(20ms);
    }
  };
  {
    LossWatch watch(store_, 20ms, [](int) {}, {[&] { return live.load(); }, [&](std::uint64_t e, int reporter) {
                                                 std::lock_guard lock(mutex);
                                                 seen.emplace_back(e, reporter);
                                               }});
    store_->create(failed_key(1), comm::to_bytes("7"));
    wait_for(1);
    std::this_thread::sleep_for(100ms);  // more looks: not again
    live = 2;
    store_->create(failed_key(2), comm::to_bytes("3"));
    wait_for(2);
    std::this_thread::sleep_for(100ms);
  }
  EXPECT_EQ(seen, (std::vector<std::pair<std::uint64_t, int>>{{1, 7}, {2, 3}}));
}

}  // namespace
}  // namespace ntp::elastic
