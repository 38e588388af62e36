// A Llama model through everything the trainer does for GPT-2, from the
// outside: a nonuniform job (one replica at reduced TP) that verifies,
// checkpoints that resume (and refuse a GPT-2 configuration), in-job recovery
// from a killed worker, deterministic greedy sampling, llama2.c export and
// init_from.
#include <filesystem>
#include <fstream>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "model/llama2c_checkpoint.h"
#include "model/model_file.h"
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

bool verified(const Result& r) { return r.output.find("verify: pass — ") != std::string::npos; }

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

// power.mode = "simulated" on the nonuniform job: the plan boosts the
// degraded replica (TP 3 of 4) above the default limit and gives it the
// larger share that buys, its ranks apply that limit, the healthy replica's
// keep the default, and --verify passes.
TEST_F(LlamaCliTest, SimulatedPowerBoostsTheDegradedReplica) {
  const fs::path run = dir_ / "run";
  const Result r = ntp("train --run-dir " + run.string() + kLlama +
                       " --set train.steps=2 --set train.global_batch=16 --set parallel.dp=2 --set parallel.tp=4"
                       " --set 'parallel.failed={0=[2]}' --set power.mode=simulated --set power.tdp_w=700"
                       " --set power.max_frac=1.5 --set power.headroom_w=200 --set power.need=modelled --verify");
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_TRUE(verified(r)) << r.output;
  const std::vector<nlohmann::json> plans = ntp::testing::events_named(run, "power_plan");
  ASSERT_EQ(plans.size(), 1u) << r.output;
  const nlohmann::json& degraded = plans[0]["replicas"][0];
  const nlohmann::json& healthy = plans[0]["replicas"][1];
  EXPECT_EQ(degraded["active"], 3);
  EXPECT_GT(degraded["need"].get<double>(), 4.0 / 3.0 - 1e-9) << degraded;  // 4 KV groups on 3 GPUs: 2 on one
  EXPECT_GT(degraded["limit_w"].get<double>(), 700.0) << degraded;
  EXPECT_GT(degraded["speedup"].get<double>(), 1.0) << degraded;
  EXPECT_DOUBLE_EQ(healthy["limit_w"].get<double>(), 700.0) << healthy;
  // Unboosted, proportional shares would be 16 * 3/7 = 6.9 for the degraded replica.
  EXPECT_GE(degraded["share"].get<int>(), 7) << degraded;
  std::set<int> boosted, at_default;
  for (const nlohmann::json& e : ntp::testing::events_named(run, "power_applied")) {
    const double limit = e["device_limit_w"].get<double>();
    (e["replica"] == 0 ? boosted : at_default).insert(e["rank"].get<int>());
    EXPECT_DOUBLE_EQ(limit, e["replica"] == 0 ? degraded["limit_w"].get<double>() : 700.0) << e;
  }
  EXPECT_EQ(boosted, (std::set<int>{0, 1, 2}));
  EXPECT_EQ(at_default, (std::set<int>{3, 4, 5, 6}));
  for (const nlohmann::json& m : ntp::testing::read_jsonl_lines(run / "metrics.jsonl")) {
    EXPECT_EQ(m["samples"][0], degraded["share"]) << m;
  }
}

// model.rope_theta and model.norm_eps: a run with other values verifies and
// samples with them; a resume must keep them; llama2.c's format cannot carry
// them, so exporting one is refused (exit 3).
TEST_F(LlamaCliTest, TheRopeBaseAndNormEpsilonAreKeptOrRefused) {
  const fs::path run = dir_ / "run";
  const std::string settings = " --set model.rope_theta=500.0 --set model.norm_eps=1e-3";
  const Result trained = ntp("train --run-dir " + run.string() + kLlama + settings +
                             " --set train.steps=2 --set train.checkpoint_every=1 --set parallel.tp=2 --verify");
  ASSERT_EQ(trained.code, 0) << trained.output;
  EXPECT_TRUE(verified(trained)) << trained.output;
  const nlohmann::json manifest =
      nlohmann::json::parse(std::ifstream(run / "checkpoints" / "step-1" / "manifest.json"));
  EXPECT_FLOAT_EQ(manifest["model"]["rope_theta"].get<float>(), 500.0f) << manifest.dump();
  EXPECT_FLOAT_EQ(manifest["model"]["norm_eps"].get<float>(), 1e-3f) << manifest.dump();

  const std::string step1 = (run / "checkpoints" / "step-1").string();
  const Result rebased = ntp("train --resume " + step1 + " --set model.rope_theta=10000.0");
  EXPECT_EQ(rebased.code, 2) << rebased.output;
  EXPECT_NE(rebased.output.find("model.rope_theta cannot change"), std::string::npos) << rebased.output;
  const Result renormed = ntp("train --resume " + step1 + " --set model.norm_eps=1e-5");
  EXPECT_EQ(renormed.code, 2) << renormed.output;
  EXPECT_NE(renormed.output.find("model.norm_eps cannot change"), std::string::npos) << renormed.output;
  const Result resumed = ntp("train --resume " + step1 + " --set parallel.tp=1 --verify");
  ASSERT_EQ(resumed.code, 0) << resumed.output;
  EXPECT_TRUE(verified(resumed)) << resumed.output;

  const Result exp = ntp("export " + run.string() + " --llama2c " + (dir_ / "x.bin").string());
  EXPECT_EQ(exp.code, 3) << exp.output;
  EXPECT_NE(exp.output.find("no field for rope_theta"), std::string::npos) << exp.output;
  EXPECT_FALSE(fs::exists(dir_ / "x.bin"));

  // The run's model.bin (parameters only) samples with the run's settings:
  // the same text twice, and not the text of the same file read with the
  // defaults (seeded draws: eps 1e-3 instead of 1e-5 halves the final norm's
  // output, so every next-token distribution differs by several percent).
  const std::string sample = " --prompt 'The ' --tokens 24 --temperature 1 --seed 7";
  const Result first = ntp("sample " + run.string() + sample), second = ntp("sample " + run.string() + sample);
  const Result as_file = ntp("sample " + (run / "model.bin").string() + sample);
  ASSERT_EQ(first.code, 0) << first.output;
  ASSERT_EQ(as_file.code, 0) << as_file.output;
  EXPECT_EQ(first.output, second.output);
  EXPECT_NE(first.output, as_file.output) << "the run's settings were not applied";
}

// A model file says its format: a llama2.c file trains and samples without
// model.family; a model.family it contradicts, a file of neither format and a
// truncated file of each are refused with exit 2 (before any run folder) by
// train, sample and export alike, naming what the file is or both checks.
TEST_F(LlamaCliTest, AModelFileSaysItsFormatToTrainSampleAndExport) {
  const auto written = [&](const char* name, const ntp::model::GptConfig& c) {
    const fs::path path = dir_ / name;
    ntp::model::write_model_file(path.string(), c,
                                 std::vector<float>(static_cast<std::size_t>(ntp::model::parameter_count(c)), 0.01f));
    return path;
  };
  const fs::path llama = written("llama.bin", ntp::model::preset("llama-tiny", ntp::model::Family::kLlama));
  const fs::path gpt2 = written("gpt2.bin", ntp::model::preset("tiny"));
  const std::string small = " --set train.steps=1 --set train.global_batch=2 --set train.micro_batch=2"
                            " --set run.trace_steps=0";
  const Result trained = ntp("train --run-dir " + (dir_ / "run").string() + small +
                             " --set model.init_from=" + llama.string() + " --verify");
  ASSERT_EQ(trained.code, 0) << trained.output;
  EXPECT_TRUE(verified(trained)) << trained.output;  // the replay takes the family from the file too
  EXPECT_EQ(ntp::model::read_llama2c_config((dir_ / "run" / "model.bin").string()).kv_heads, 2);
  const Result sampled = ntp("sample " + llama.string() + " --prompt ab --tokens 3 --temperature 0");
  EXPECT_EQ(sampled.code, 0) << sampled.output;

  const Result contradicted = ntp("train --run-dir " + (dir_ / "wrong").string() + small +
                                  " --set model.family=llama --set model.init_from=" + gpt2.string());
  EXPECT_EQ(contradicted.code, 2) << contradicted.output;
  EXPECT_NE(contradicted.output.find("holds a gpt2 model (llm.c's format): set model.family = \"gpt2\""),
            std::string::npos)
      << contradicted.output;

  std::ofstream(dir_ / "notes.bin") << "neither llm.c nor llama2.c";
  const fs::path short_llama = dir_ / "short_llama.bin", short_gpt2 = dir_ / "short_gpt2.bin";
  fs::copy_file(llama, short_llama);
  fs::resize_file(short_llama, fs::file_size(llama) - 4);
  fs::copy_file(gpt2, short_gpt2);
  fs::resize_file(short_gpt2, fs::file_size(gpt2) - 4);
  const std::pair<fs::path, std::string> refused[] = {
      {dir_ / "notes.bin", "notes.bin: neither an llm.c checkpoint (header[0] magic is "},
      {short_llama, "short_llama.bin: neither an llm.c checkpoint (header[0] magic is 64, expected 20240326) nor a "
                    "llama2.c checkpoint (size: file has"},
      {short_gpt2, "short_gpt2.bin: parameters: truncated"}};
  for (const auto& [file, says] : refused) {
    const fs::path run = dir_ / (file.filename().string() + ".run");
    for (const std::string& command : {"train --run-dir " + run.string() + small + " --set model.init_from=" +
                                           file.string(),
                                       "sample " + file.string() + " --prompt ab --tokens 3"}) {
      const Result r = ntp(command);
      EXPECT_EQ(r.code, 2) << command << "\n" << r.output;
      EXPECT_NE(r.output.find(says), std::string::npos) << command << "\n" << r.output;
    }
    EXPECT_FALSE(fs::exists(run)) << "a refused run leaves nothing behind";
  }
  const Result neither = ntp("sample " + (dir_ / "notes.bin").string() + " --prompt ab");
  EXPECT_NE(neither.output.find("expected 20240326) nor a llama2.c checkpoint ("), std::string::npos)
      << neither.output;

  // export reads checkpoint folders: a model file is named for what it is.
  const Result exported = ntp("export " + llama.string() + " --llmc " + (dir_ / "x.bin").string());
  EXPECT_EQ(exported.code, 2) << exported.output;
  EXPECT_NE(exported.output.find("a checkpoint in llama2.c's format (llama: vocab 256"), std::string::npos)
      << exported.output;
  const Result not_a_model = ntp("export " + (dir_ / "notes.bin").string() + " --llmc " + (dir_ / "x.bin").string());
  EXPECT_EQ(not_a_model.code, 2) << not_a_model.output;
  EXPECT_NE(not_a_model.output.find("neither an llm.c checkpoint"), std::string::npos) << not_a_model.output;
}

}  // namespace
