// Every collective against a locally computed reference, for group sizes
// 1..8 with ranks as threads, including uneven counts (and zeros) in the -v
// forms. The same checks run with ranks as processes in process_test.cpp.
#include <gtest/gtest.h>

#include "tests/comm/collective_checks.h"
#include "tests/comm/thread_ranks.h"

namespace ntp::comm {
namespace {

using testing::run_group;

class Collectives : public ::testing::TestWithParam<int> {};

TEST_P(Collectives, AllReduce) { run_group(GetParam(), "ar", [](Group& g) { testing::check_all_reduce(g, 1000); }); }
TEST_P(Collectives, AllGather) { run_group(GetParam(), "ag", testing::check_all_gather); }
TEST_P(Collectives, AllGatherVUneven) { run_group(GetParam(), "agv", testing::check_all_gather_v); }
TEST_P(Collectives, ReduceScatterUneven) { run_group(GetParam(), "rs", testing::check_reduce_scatter); }
TEST_P(Collectives, AllToAllVUneven) { run_group(GetParam(), "a2a", testing::check_all_to_all_v); }
TEST_P(Collectives, BroadcastFromEveryRoot) { run_group(GetParam(), "bc", testing::check_broadcast); }
TEST_P(Collectives, ExchangeRing) { run_group(GetParam(), "ring", testing::check_exchange_ring); }
TEST_P(Collectives, BlockingSendRecvPairs) { run_group(GetParam(), "p2p", testing::check_send_recv); }
TEST_P(Collectives, Barrier) { run_group(GetParam(), "barrier", testing::check_barrier); }

INSTANTIATE_TEST_SUITE_P(GroupSize, Collectives, ::testing::Range(1, 9));

TEST(Collectives, LargeAllReduceSpansManySegments) {
  run_group(4, "large", [](Group& g) { testing::check_all_reduce(g, 3 * 1024 * 1024 + 17); });
}

TEST(Collectives, EmptyAndSingleElement) {
  run_group(3, "tiny", [](Group& g) {
    testing::check_all_reduce(g, 0);
    testing::check_all_reduce(g, 1);
  });
}

TEST(Collectives, RepeatedCallsKeepOrder) {
  run_group(4, "repeat", [](Group& g) {
    for (int step = 0; step < 50; ++step) {
      std::vector<float> data(33, static_cast<float>(g.rank() + step));
      g.all_reduce(data.data(), data.size());
      ASSERT_EQ(data[0], static_cast<float>(0 + 1 + 2 + 3 + 4 * step));
    }
  });
}

TEST(Collectives, WithoutCallChecks) {
  testing::TempStoreDir dir;
  auto store = open_store(dir.spec());
  testing::rethrow_first(testing::run_threads(4, [&](int rank) {
    auto opts = testing::group_options(4, rank, "nocheck");
    opts.check_inputs = false;
    auto g = create_group(store, opts);
    testing::check_every_collective(*g);
  }));
}

}  // namespace
}  // namespace ntp::comm
