// The worker's watch on ranks declared lost with their host, through a real
// file store: it reports each new entry once, skips the history it started
// after, and aborts a Gloo call blocked on the lost rank long before the
// call's own deadline.
#include "elastic/loss_watch.h"

#include <atomic>
#include <chrono>
#include <filesystem>
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

// Rank 1 keeps its end of group {0, 1} open and never calls, as a rank on a
// host cut off from the network does; rank 0's all_reduce (deadline 20 s)
// fails within a second of the fencer's entry.
TEST_F(LossWatchTest, AbortsACallBlockedOnARankDeclaredLost) {
  LossWatch watch(store_, 20ms, [](int rank) { comm::abort_groups_with(rank, "declared lost with its host"); });
  std::atomic<bool> done{false};
  std::chrono::steady_clock::time_point declared_at, failed_at;
  std::string error;
  auto member = [&](int rank) {
    comm::GroupOptions o;
    o.ranks = {0, 1};
    o.global_rank = rank;
    o.epoch = 1;
    o.name = "loss-watch";
    o.timeout = 20s;
    auto g = comm::create_group(store_, o);
    if (rank == 1) {
      while (!done) std::this_thread::sleep_for(10ms);
      return;
    }
    std::thread fencer([&] {
      std::this_thread::sleep_for(200ms);
      declared_at = std::chrono::steady_clock::now();
      declare("1");
    });
    std::vector<float> x(100, 1.0f);
    try {
      g->all_reduce(x.data(), x.size());
    } catch (const comm::CommError& e) {
      error = e.what();
    }
    failed_at = std::chrono::steady_clock::now();
    fencer.join();
    done = true;
  };
  std::thread rank1(member, 1);
  member(0);
  rank1.join();
  // Rank 0's member aborted names the loss; rank 1's (a thread of this
  // process too) may have closed the connection first.
  EXPECT_TRUE(error.find("declared lost with its host") != std::string::npos ||
              error.find("connection closed") != std::string::npos)
      << error;
  EXPECT_LT(std::chrono::duration<double>(failed_at - declared_at).count(), 1.0);
}

}  // namespace
}  // namespace ntp::elastic
