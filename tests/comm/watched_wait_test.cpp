// Waits of watched contexts (comm/gloo_watched.h). The watch must fail only a
// wait whose own peer failed: a peer that finished its part and closed its
// connections is how every group ends.
#include <gtest/gtest.h>

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

}  // namespace
}  // namespace ntp::comm
