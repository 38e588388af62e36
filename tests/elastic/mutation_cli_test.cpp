// The mutation suite: deliberate, test-only bugs in the trainer (test.mutation,
// train/mutations.h), each of which a checker must reject — `--verify` with
// exit 1 and a message naming the tensor, step, sample or unit, or the
// recovery's proof of agreement. A checker never shown to fail proves nothing.
#include <filesystem>
#include <string>

#include <gtest/gtest.h>

#include "cli_run.h"

namespace {

namespace fs = std::filesystem;

struct Result {
  int code = -1;       // 137: killed at the time limit
  std::string output;  // stdout and stderr
};

Result run(const std::string& env, const std::string& args) {
  const ntp::testing::CliRun r =
      ntp::testing::run_cli(env + " timeout -s KILL 150 " + std::string(NTP_BINARY), args);
  return {r.exit_code, r.out + r.err};
}

// dp 2 x tp 4 with replica 0 at TP 3: ranks 0-2 are replica 0, ranks 3-6
// replica 1 (rank 6 is an extra slot of the sync layout K = 3).
std::string job(const fs::path& dir, int steps) {
  return "train --run-dir " + dir.string() + " --set train.steps=" + std::to_string(steps) +
         " --set model.layers=1 --set model.seq_len=32 --set train.micro_batch=2 --set run.trace_steps=0"
         " --set deadline.collective_s=10 --set deadline.rendezvous_s=30 --set parallel.dp=2"
         " --set parallel.tp=4 --set 'parallel.failed={0=[2]}' --verify --json ";
}

struct MutationCase {
  const char* name;
  std::string sets;
  std::string expected;  // in the output of a rejected run
};

void PrintTo(const MutationCase& c, std::ostream* os) { *os << c.name; }

class MutationTest : public ::testing::TestWithParam<MutationCase> {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("ntp_mutation_" + std::to_string(::getpid()) + "_" + GetParam().name);
    fs::remove_all(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  fs::path dir_;
};

TEST_P(MutationTest, IsRejectedNamingWhatBroke) {
  const MutationCase& c = GetParam();
  const Result r = run("NTP_TEST_MUTATIONS=1", job(dir_, 2) + c.sets);
  ASSERT_NE(r.code, 137) << "the run stalled:\n" << r.output;
  EXPECT_EQ(r.code, 1) << r.output;
  EXPECT_NE(r.output.find(c.expected), std::string::npos) << "expected '" << c.expected << "' in:\n" << r.output;
}

INSTANTIATE_TEST_SUITE_P(
    Mutations, MutationTest,
    ::testing::Values(
        MutationCase{"ln_frozen", "--set test.mutation=ln_frozen", "h0.ln1_w: "},
        MutationCase{"update_x1_01", "--set test.mutation=update_x1.01", "\"verify\":\"fail\""},
        MutationCase{"local_loss_scale", "--set test.mutation=local_loss_scale", "grad_norm"},
        MutationCase{"sample_twice", "--set test.mutation=sample_twice", "step 1: loss"},
        MutationCase{"sample_skipped", "--set test.mutation=sample_skipped", "step 1: loss"},
        MutationCase{"replicated_unsynced_on_an_extra_slot",
                     "--set test.mutation=replicated_unsynced --set test.mutation_rank=6", "replicated tensors differ"},
        MutationCase{"one_replica_one_unit_one_ulp", "--set test.mutation=unit_drift --set test.mutation_rank=4",
                     "holders differ"},
        // A repaired rank rejoins but keeps its outdated units instead of
        // being rolled forward: the recovery's cross-replica hash stops the run.
        // 24 steps: a restarted worker takes seconds to start (shared
        // libraries, on a loaded host), and a run that ends first never
        // takes it back, so the mutation would never be exercised.
        MutationCase{"roll_forward_skipped",
                     "--set train.steps=24 --set elastic.recover=true --set elastic.settle_s=0.2"
                     " --set elastic.rejoin=true --set test.repair_at_step=2 --set test.mutation=skip_roll_forward"
                     " --set test.mutation_rank=1 --set 'test.failures=\"1@1:forward\"'",
                     "the replicas do not agree"}),
    [](const ::testing::TestParamInfo<MutationCase>& param_info) { return std::string(param_info.param.name); });

TEST(MutationConfig, ARunWithoutTheTestSwitchRefusesAMutation) {
  const fs::path dir = fs::temp_directory_path() / ("ntp_mutation_refused_" + std::to_string(::getpid()));
  const Result r = run("env -u NTP_TEST_MUTATIONS", job(dir, 1) + "--set test.mutation=ln_frozen");
  EXPECT_EQ(r.code, 2) << r.output;
  EXPECT_NE(r.output.find("test.mutation"), std::string::npos) << r.output;
  EXPECT_FALSE(fs::exists(dir / "metrics.jsonl"));
  fs::remove_all(dir);
}

}  // namespace
