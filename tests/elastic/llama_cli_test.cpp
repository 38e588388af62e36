// A Llama model through everything the trainer does for GPT-2, from the
// outside: a nonuniform job (one replica at reduced TP) that verifies,
// checkpoints that resume (and refuse a GPT-2 configuration), in-job recovery
// from a killed worker, deterministic greedy sampling, llama2.c export and
// init_from.
#include <filesystem>
#include <fstream>
#include <string>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "model/llama2c_checkpoint.h"
#include "cli_run.h"
#include "run_files.h"

namespace {

namespace fs = std::filesystem;

const std::string kLlama =
    " --set model.family=llama --set model.preset=llama-tiny --set model.layers=1 --set model.seq_len=32"
    " --set model.heads=8 --set model.kv_heads=4"
    " --set train.micro_batch=2 --set train.global_batch=8 --set run.trace_steps=0"
    " --set deadline.collective_s=10 --set deadline.rendezvous_s=30 --set deadline.heartbeat_s=1.5";

struct Result {
  int code = -1;
  std::string output;
};

Result ntp(const std::string& args) {
  const ntp::testing::CliRun r = ntp::testing::run_cli("timeout -s KILL 150 " + std::string(NTP_BINARY), args);
  return {r.exit_code, r.out + r.err};
}

class LlamaCliTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("ntp_llama_cli_" + std::to_string(::getpid()) + "_" +
                                        ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override {
    if (!HasFailure()) fs::remove_all(dir_);
  }
  fs::path dir_;
};

bool verified(const Result& r) { return r.output.find("\"verify\":\"pass\"") != std::string::npos; }

// dp 2 x tp 4 with replica 0 at TP 3 (slot 2 failed); 4 steps, a checkpoint
// at step 2; resumed at TP 1; sampled greedily twice; exported.
TEST_F(LlamaCliTest, NonuniformJobVerifiesResumesSamplesAndExports) {
  const fs::path run = dir_ / "run";
  const Result trained = ntp("train --run-dir " + run.string() + kLlama +
                             " --set train.steps=4 --set train.checkpoint_every=2 --set parallel.dp=2"
                             " --set parallel.tp=4 --set 'parallel.failed={0=[2]}' --verify");
  ASSERT_EQ(trained.code, 0) << trained.output;
  EXPECT_TRUE(verified(trained)) << trained.output;
  const nlohmann::json manifest =
      nlohmann::json::parse(std::ifstream(run / "checkpoints" / "step-2" / "manifest.json"));
  EXPECT_EQ(manifest.dump().find("\"family\":\"llama\"") != std::string::npos, true) << manifest.dump();

  // The model.bin is a llama2.c checkpoint of the trained model.
  EXPECT_EQ(ntp::model::read_llama2c_config((run / "model.bin").string()).kv_heads, 4);

  const Result resumed = ntp("train --resume " + (run / "checkpoints" / "step-2").string() + " --set parallel.tp=1 --set 'parallel.failed={}' --verify");
  ASSERT_EQ(resumed.code, 0) << resumed.output;
  EXPECT_TRUE(verified(resumed)) << resumed.output;

  // A GPT-2 configuration does not load the Llama checkpoint.
  const Result wrong = ntp("train --resume " + (run / "checkpoints" / "step-2").string() +
                           " --set model.family=gpt2 --set model.preset=tiny --set model.kv_heads=0"
                           " --set model.ffn_hidden=0");
  EXPECT_EQ(wrong.code, 2) << wrong.output;
  EXPECT_NE(wrong.output.find("model.family cannot change"), std::string::npos) << wrong.output;

  const std::string sample = "sample " + run.string() + " --prompt 'The ' --tokens 12 --temperature 0";
  const Result first = ntp(sample), second = ntp(sample);
  ASSERT_EQ(first.code, 0) << first.output;
  EXPECT_EQ(first.output, second.output);
  EXPECT_EQ(first.output.rfind("The ", 0), 0u) << first.output;

  const fs::path exported = dir_ / "exported.bin";
  const Result exp = ntp("export " + run.string() + " --llama2c " + exported.string());
  ASSERT_EQ(exp.code, 0) << exp.output;
  EXPECT_EQ(ntp("export " + run.string() + " --llmc " + (dir_ / "x.bin").string()).code, 2);

  // The export starts a new run (init_from) whose first loss is the loss the
  // exported parameters give.
  const Result from = ntp("train --run-dir " + (dir_ / "from").string() + kLlama +
                          " --set train.steps=1 --set model.init_from=" + exported.string());
  EXPECT_EQ(from.code, 2) << "model.preset is set with init_from:\n" << from.output;
  const Result from_ok = ntp("train --run-dir " + (dir_ / "from_ok").string() +
                             " --set model.family=llama --set model.seq_len=32 --set train.micro_batch=2"
                             " --set train.global_batch=8 --set train.steps=1 --set model.init_from=" +
                             exported.string());
  EXPECT_EQ(from_ok.code, 0) << from_ok.output;
}

// In-job recovery: a worker of replica 1 killed in the backward of step 2;
// the run finishes every step and verifies.
TEST_F(LlamaCliTest, RecoversFromAKilledWorker) {
  const fs::path run = dir_ / "run";
  const Result r = ntp("train --run-dir " + run.string() + kLlama +
                       " --set train.steps=5 --set parallel.dp=2 --set parallel.tp=2 --set elastic.recover=true"
                       " --set elastic.settle_s=0.2 --set 'test.failures=\"2@2:backward\"' --verify");
  ASSERT_NE(r.code, 137) << "the run hung:\n" << r.output;
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_TRUE(verified(r)) << r.output;
  EXPECT_FALSE(ntp::testing::events_named(run, "failure_injected").empty()) << r.output;
  EXPECT_FALSE(ntp::testing::events_named(run, "step_resumed").empty()) << r.output;
}

}  // namespace
