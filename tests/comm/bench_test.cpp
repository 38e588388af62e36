// The benchmark behind `ntp bench comm`, the local launcher, and the pure
// call-check logic.
#include <gtest/gtest.h>

#include <cstdlib>

#include "comm/bench.h"
#include "comm/call_check.h"
#include "comm/local_ranks.h"
#include "tests/comm/thread_ranks.h"

namespace ntp::comm {
namespace {

using namespace std::chrono_literals;

TEST(Bench, ParseBytes) {
  EXPECT_EQ(parse_bytes("4096", "--min-bytes"), 4096u);
  EXPECT_EQ(parse_bytes("1K", "--min-bytes"), 1024u);
  EXPECT_EQ(parse_bytes("64M", "--max-bytes"), 64u << 20);
  EXPECT_EQ(parse_bytes("64MiB", "--max-bytes"), 64u << 20);
  EXPECT_EQ(parse_bytes("1G", "--max-bytes"), 1ull << 30);
  try {
    parse_bytes("12Q", "--max-bytes");
    ADD_FAILURE();
  } catch (const CommError& e) {
    EXPECT_NE(std::string(e.what()).find("--max-bytes"), std::string::npos);
  }
  EXPECT_THROW(parse_bytes("lots", "--min-bytes"), CommError);
}

TEST(Bench, BusFactorsFollowNcclTests) {
  EXPECT_DOUBLE_EQ(bus_factor("all_reduce", 4), 1.5);
  EXPECT_DOUBLE_EQ(bus_factor("all_gather", 4), 0.75);
  EXPECT_DOUBLE_EQ(bus_factor("reduce_scatter", 8), 0.875);
  EXPECT_DOUBLE_EQ(bus_factor("broadcast", 8), 1.0);
}

TEST(Bench, EveryOpAndSizeWithoutWrongResults) {
  testing::TempStoreDir dir;
  auto store = open_store(dir.spec());
  std::vector<std::vector<CommBenchRow>> rows(3);
  testing::rethrow_first(testing::run_threads(3, [&](int rank) {
    auto g = create_group(store, testing::group_options(3, rank, "bench"));
    CommBenchOptions opts;
    opts.ops = bench_ops();
    opts.min_bytes = 1024;
    opts.max_bytes = 8192;
    opts.iters = 3;
    rows[static_cast<std::size_t>(rank)] = run_comm_bench(*g, opts);
  }));
  ASSERT_EQ(rows[0].size(), 5u * 4u);
  for (const auto& row : rows[0]) {
    EXPECT_EQ(row.wrong, 0) << row.op << " " << row.bytes;
    EXPECT_GT(row.time_us, 0.0);
    EXPECT_NEAR(row.busbw_gbps, row.algbw_gbps * bus_factor(row.op, 3), 1e-12);
  }
  // Ranks agree on the figures (max time over ranks, summed wrong counts).
  for (std::size_t i = 0; i < rows[0].size(); ++i) EXPECT_EQ(rows[1][i].time_us, rows[0][i].time_us);
  EXPECT_NE(format_bench_table(rows[0], "t").find("# wrong results: 0 (OK)"), std::string::npos);
}

TEST(Bench, RejectsUnknownOpAndEmptyRange) {
  testing::run_group(1, "bench-bad", [](Group& g) {
    CommBenchOptions opts;
    // The message names the flag a user of `ntp bench comm` has to change.
    const auto expect_error_naming = [&](const std::string& flag) {
      try {
        run_comm_bench(g, opts);
        ADD_FAILURE() << "accepted; expected an error naming " << flag;
      } catch (const CommError& e) {
        EXPECT_EQ(e.kind(), CommErrorKind::kBadInput);
        EXPECT_NE(std::string(e.what()).find(flag), std::string::npos) << e.what();
      }
    };
    opts.ops = {"all_reduce_fast"};
    expect_error_naming("--op");
    opts.ops = {"all_reduce"};
    opts.min_bytes = 4096;
    opts.max_bytes = 1024;
    expect_error_naming("--min-bytes");
    opts.min_bytes = 0;
    expect_error_naming("--min-bytes");
  });
}

class LauncherEnv : public ::testing::Test {
 protected:
  void TearDown() override {
    ::unsetenv("RANK");
    ::unsetenv("WORLD_SIZE");
  }
};

TEST_F(LauncherEnv, RankFromEnvironment) {
  int rank = -1, world = 0;
  EXPECT_FALSE(launcher_rank(rank, world));
  ::setenv("RANK", "3", 1);
  ::setenv("WORLD_SIZE", "4", 1);
  EXPECT_TRUE(launcher_rank(rank, world));
  EXPECT_EQ(rank, 3);
  EXPECT_EQ(world, 4);
  ::setenv("RANK", "5", 1);
  try {
    launcher_rank(rank, world);
    ADD_FAILURE() << "rank outside the world accepted";
  } catch (const CommError& e) {
    EXPECT_EQ(e.kind(), CommErrorKind::kBadInput);
    EXPECT_NE(std::string(e.what()).find("RANK=5"), std::string::npos) << e.what();
  }
  ::setenv("RANK", "two", 1);
  EXPECT_THROW(launcher_rank(rank, world), CommError);
  ::unsetenv("WORLD_SIZE");
  EXPECT_THROW(launcher_rank(rank, world), CommError);
}

TEST(LocalRanks, EnvironmentOutcomesAndDeadline) {
  auto ok = run_local_ranks({"/bin/sh", "-c", "test \"$RANK\" -lt \"$WORLD_SIZE\" && test \"$LOCAL_RANK\" = \"$RANK\""},
                            3, {}, 10s);
  EXPECT_TRUE(ok.ok);
  auto failing = run_local_ranks({"/bin/sh", "-c", "exit $RANK"}, 2, {}, 10s);
  EXPECT_FALSE(failing.ok);
  EXPECT_EQ(failing.outcome[0], "exit 0");
  EXPECT_EQ(failing.outcome[1], "exit 1");
  const auto start = std::chrono::steady_clock::now();
  auto hung = run_local_ranks({"/bin/sleep", "30"}, 2, {}, 1s);
  EXPECT_FALSE(hung.ok);
  EXPECT_EQ(hung.outcome[0], "killed at deadline");
  EXPECT_LT(std::chrono::steady_clock::now() - start, 10s);
  EXPECT_THROW(run_local_ranks({"/bin/true"}, 0, {}, 1s), CommError);
}

CallDescriptor all_reduce_call(std::uint64_t count) {
  CallDescriptor call;
  call.op = CallOp::kAllReduce;
  call.type = DataType::kFloat32;
  call.count = count;
  return call;
}

std::vector<std::int64_t> gather(const std::vector<CallDescriptor>& calls) {
  std::vector<std::int64_t> all;
  for (const auto& c : calls) {
    auto words = encode(c, static_cast<int>(calls.size()));
    all.insert(all.end(), words.begin(), words.end());
  }
  return all;
}

TEST(CallCheck, AgreeingCallsPass) {
  EXPECT_TRUE(find_mismatch(gather({all_reduce_call(5), all_reduce_call(5), all_reduce_call(5)}), 3).detail.empty());
}

TEST(CallCheck, TheRankThatDiffersIsNamed) {
  const auto m = find_mismatch(gather({all_reduce_call(5), all_reduce_call(5), all_reduce_call(7)}), 3);
  EXPECT_EQ(m.rank, 2);
  EXPECT_NE(m.detail.find("7 elements"), std::string::npos) << m.detail;
  auto other_type = all_reduce_call(5);
  other_type.type = DataType::kFloat64;
  EXPECT_EQ(find_mismatch(gather({all_reduce_call(5), other_type}), 2).rank, 1);
  auto bad_local = all_reduce_call(5);
  bad_local.local_ok = false;
  EXPECT_EQ(find_mismatch(gather({bad_local, all_reduce_call(5)}), 2).rank, 0);
}

TEST(CallCheck, AllToAllVCountsMustPairUp) {
  CallDescriptor a, b;
  a.op = b.op = CallOp::kAllToAllV;
  a.counts = {1, 2};
  a.recv_counts = {1, 3};
  b.counts = {3, 4};
  b.recv_counts = {2, 4};
  EXPECT_TRUE(find_mismatch(gather({a, b}), 2).detail.empty());
  b.recv_counts = {5, 4};  // rank 0 sends 2 to rank 1, which expects 5
  const auto m = find_mismatch(gather({a, b}), 2);
  EXPECT_EQ(m.rank, 0);
  EXPECT_NE(m.detail.find("expects 5"), std::string::npos) << m.detail;
}

TEST(CallCheck, AllGatherVContributionMustMatchCounts) {
  CallDescriptor a, b;
  a.op = b.op = CallOp::kAllGatherV;
  a.counts = b.counts = {2, 3};
  a.count = 2;
  b.count = 4;
  EXPECT_EQ(find_mismatch(gather({a, b}), 2).rank, 1);
}

}  // namespace
}  // namespace ntp::comm
