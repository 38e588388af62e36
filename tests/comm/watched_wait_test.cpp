// Waits of watched contexts (comm/gloo_watched.h). The watch must fail only a
// wait whose own peer failed: a peer that finished its part and closed its
// connections is how every group ends.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <thread>

#include "comm/gloo_watched.h"
#include "tests/comm/thread_ranks.h"

namespace ntp::comm {
namespace {

// Rank 1 sends and leaves; rank 2 sends only after rank 0 has waited on it
// for three watch intervals, with its pair to rank 1 closed all that time.
// Seen to fail when the watch failed a wait on any failed pair of the context.
TEST(WatchedWaits, APeerThatFinishedAndLeftDoesNotFailAWaitOnAnother) {
  testing::TempStoreDir dir;
  auto store = open_store(dir.spec());
  testing::rethrow_first(testing::run_threads(3, [&](int rank) {
    auto group = create_group(store, testing::group_options(3, rank, "left"));
    std::vector<float> mine(1000, static_cast<float>(rank));
    if (rank == 1) {
      group->send(mine, 0, 1);
      std::this_thread::sleep_for(kWaitCheck / 2);  // rank 0 has read it all
      return;                                       // leaves: its connections close
    }
    if (rank == 2) {
      std::this_thread::sleep_for(3 * kWaitCheck);
      group->send(mine, 0, 2);
      return;
    }
    std::vector<float> from1(1000), from2(1000);
    group->exchange({P2POp::recv(from1, 1, 1), P2POp::recv(from2, 2, 2)});
    EXPECT_EQ(from1[999], 1.0f);
    EXPECT_EQ(from2[999], 2.0f);
  }));
}

// The same at scale, in the collectives' own patterns: every rank leaves as
// soon as its call returns, while others still wait in the call.
TEST(WatchedWaits, RanksLeavingAfterTheirLastCallDoNotFailTheOthers) {
  for (bool sparse : {false, true}) {
    testing::TempStoreDir dir;
    auto store = open_store(dir.spec());
    testing::rethrow_first(testing::run_threads(33, [&](int rank) {
      GroupOptions opts = testing::group_options(33, rank, sparse ? "leave-sparse" : "leave");
      opts.sparse = sparse;
      auto group = create_group(store, opts);
      std::vector<float> data(1000, 1.0f);
      group->all_reduce(data.data(), data.size());
      EXPECT_EQ(data[999], 33.0f);
      group->barrier();
    }));
  }
}

// A rank aborted in the middle of a run of all-reduces (as a trainer aborts
// the groups of a failed epoch) must take every other member out of the
// call well before the deadline: its ring neighbours fail on its closed
// connections, break their own groups, and so on round the ring. Repeated
// at several moments, so that the abort lands inside messages as well as
// between them.
TEST(WatchedWaits, AnAbortMidCallReachesEveryMemberBeforeTheDeadline) {
  constexpr int kRanks = 16;
  const auto deadline = std::chrono::milliseconds(20000);
  for (int round = 0; round < 6; ++round) {
    testing::TempStoreDir dir;
    auto store = open_store(dir.spec());
    const int victim = (5 * round + 3) % kRanks;
    std::atomic<int> calls_done{0};
    std::vector<double> failed_after(kRanks, -1.0);
    std::chrono::steady_clock::time_point aborted_at{};
    std::atomic<bool> aborted{false};
    testing::rethrow_first(testing::run_threads(kRanks, [&](int rank) {
      auto group = create_group(store, testing::group_options(kRanks, rank, "cascade" + std::to_string(round), 1,
                                                                deadline));
      std::thread aborter;
      if (rank == victim) {
        aborter = std::thread([&, round] {
          while (calls_done.load() < kRanks * (2 + round)) std::this_thread::sleep_for(std::chrono::microseconds(200));
          std::this_thread::sleep_for(std::chrono::microseconds(500 * round));
          aborted_at = std::chrono::steady_clock::now();
          aborted = true;
          group->abort("test");
        });
      }
      std::vector<float> data(1 << 18, 1.0f);
      try {
        for (int call = 0; call < 10000; ++call) {
          group->all_reduce(data.data(), data.size());
          calls_done.fetch_add(1);
        }
        ADD_FAILURE() << "rank " << rank << " never saw the abort";
      } catch (const CommError&) {
        while (!aborted.load()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
        failed_after[static_cast<std::size_t>(rank)] =
            std::chrono::duration<double>(std::chrono::steady_clock::now() - aborted_at).count();
      }
      if (aborter.joinable()) aborter.join();
    }));
    for (int rank = 0; rank < kRanks; ++rank) {
      EXPECT_LT(failed_after[static_cast<std::size_t>(rank)], 5.0)
          << "round " << round << ": rank " << rank << " (victim " << victim << ") left its call "
          << failed_after[static_cast<std::size_t>(rank)] << " s after the abort";
    }
  }
}

}  // namespace
}  // namespace ntp::comm
