// `ntp bench comm` end to end: local ranks over the file store and a real
// redis-server, every operation without wrong results, the --json rows, and
// bad flags rejected (exit 2, the flag named, nothing on stdout) before any
// rank starts.
#include <gtest/gtest.h>
#include <unistd.h>

#include <fstream>
#include <string>

#include "cli_run.h"
#include "tests/comm/redis_server.h"

namespace {

using ntp::testing::run_cli;

std::string bench(const std::string& args) { return "bench comm " + args; }

TEST(BenchCli, EveryOpOverThreeLocalRanksWritesItsJsonRows) {
  const std::string json_path =
      ::testing::TempDir() + "ntp_bench_cli_" + std::to_string(::getpid()) + ".json";
  const auto run = run_cli(NTP_BINARY, bench("--nproc 3 --op all --min-bytes 1K --max-bytes 4K "
                                             "--iters 3 --warmup 1 --json " + json_path));
  ASSERT_EQ(run.exit_code, 0) << run.err;
  EXPECT_NE(run.out.find("# wrong results: 0 (OK)"), std::string::npos) << run.out;
  std::ifstream in(json_path);
  int rows = 0;
  for (std::string line; std::getline(in, line);) {
    EXPECT_NE(line.find("\"wrong\":0"), std::string::npos) << line;
    EXPECT_NE(line.find("\"ranks\":3"), std::string::npos) << line;
    ++rows;
  }
  EXPECT_EQ(rows, 5 * 3);  // 5 operations x 1K, 2K, 4K
  std::remove(json_path.c_str());
}

TEST(BenchCli, LocalRanksOverARealRedisServer) {
  if (!ntp::comm::testing::RedisServer::available()) GTEST_SKIP() << "redis-server is not installed";
  ntp::comm::testing::RedisServer redis;
  const auto run = run_cli(NTP_BINARY, bench("--nproc 2 --max-bytes 2K --iters 3 --store " +
                                             redis.spec("bench-cli")));
  ASSERT_EQ(run.exit_code, 0) << run.err;
  EXPECT_NE(run.out.find("store " + redis.spec("bench-cli")), std::string::npos) << run.out;
  EXPECT_NE(run.out.find("# wrong results: 0 (OK)"), std::string::npos) << run.out;
}

// Bad input: exit 2, the flag named on stderr, nothing on stdout.
void expect_bad_input(const std::string& args, const std::string& named) {
  const auto run = run_cli(NTP_BINARY, bench(args));
  EXPECT_EQ(run.exit_code, 2) << args << "\n" << run.err;
  EXPECT_TRUE(run.out.empty()) << args << "\n" << run.out;
  EXPECT_NE(run.err.find(named), std::string::npos) << args << "\n" << run.err;
}

TEST(BenchCli, BadFlagsAreRejectedBeforeAnyRankRuns) {
  expect_bad_input("--nproc 2 --max-bytes 4K --json /nonexistent-ntp-dir/rows.json", "--json");
  expect_bad_input("--nproc 2 --min-bytes 2M --max-bytes 1M", "--min-bytes");
  expect_bad_input("--nproc 2 --max-bytes 1X", "--max-bytes");
  expect_bad_input("--nproc 2 --op all_reduce_fast", "--op");
  expect_bad_input("--nproc 0", "--nproc");
  expect_bad_input("--nproc 2 --store redis://127.0.0.1:1", "redis://127.0.0.1:1");
  expect_bad_input("--nproc 2 --no-such-flag", "--no-such-flag");
}

}  // namespace
