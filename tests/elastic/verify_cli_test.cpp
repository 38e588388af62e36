// `ntp verify` on real multi-process runs and on broken copies of them: every
// check is shown to fail on a run directory that breaks it (exit 1, naming
// the tensor, step, sample or unit), and to pass on the run itself.
#include <sys/wait.h>

#include <array>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "model/llmc_checkpoint.h"
#include "model/parameters.h"
#include "train/config.h"
#include "train/local_trainer.h"
#include "train/run_dir.h"
#include "train/state_hash.h"
#include "train/verify.h"

namespace ntp::train {
namespace {

namespace fs = std::filesystem;

struct CliResult {
  int code = -1;
  std::string output;
};

CliResult ntp(const std::string& args) {
  CliResult run;
  std::FILE* pipe = ::popen((std::string(NTP_BINARY) + " " + args + " 2>&1").c_str(), "r");
  std::array<char, 4096> buffer{};
  for (std::size_t n; (n = std::fread(buffer.data(), 1, buffer.size(), pipe)) > 0;) run.output.append(buffer.data(), n);
  const int status = ::pclose(pipe);
  run.code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return run;
}

class VerifyCliTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("ntp_verify_cli_" + std::to_string(::getpid()) + "_" +
                                        ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  // A degraded 2 x TP 4 job (replica 0 without slot 2): real reassociation
  // noise between the run and the replay.
  fs::path train(const std::string& name, int steps) {
    const fs::path run = dir_ / name;
    const CliResult r = ntp("train --run-dir " + run.string() + " --set train.steps=" + std::to_string(steps) +
                      " --set model.layers=1 --set model.seq_len=32 --set train.micro_batch=2"
                      " --set deadline.collective_s=20 --set parallel.dp=2 --set parallel.tp=4"
                      " --set parallel.failed={0=[2]} --verify");
    EXPECT_EQ(r.code, 0) << r.output;
    return run;
  }
  fs::path copy(const fs::path& run, const std::string& name) {
    const fs::path to = dir_ / name;
    fs::copy(run, to, fs::copy_options::recursive);
    return to;
  }
  fs::path dir_;
};

std::vector<nlohmann::json> read_rows(const fs::path& path) { return read_jsonl(path); }

void write_rows(const fs::path& path, const std::vector<nlohmann::json>& rows) {
  std::ofstream out(path, std::ios::trunc);
  for (const nlohmann::json& row : rows) out << row.dump() << "\n";
}

// The replay's initial parameters of a run directory (same seed / init_from).
std::vector<float> initial_params(const fs::path& run) {
  const Config config = load_config((run / "config.toml").string(), {});
  const LocalTrainer trainer(config, run, TrainerRole::kReference);
  return {trainer.params().begin(), trainer.params().end()};
}

// model.bin with tensor `name`'s update (final − initial) multiplied by `factor`.
void scale_update(const fs::path& run, const std::string& name, double factor) {
  model::LlmcCheckpoint ckpt = model::read_llmc_checkpoint((run / "model.bin").string());
  const std::vector<float> initial = initial_params(run);
  const model::ParameterLayout full(ckpt.config, model::Shard::full(ckpt.config));
  const model::TensorSpec& spec = full[name];
  for (std::int64_t i = spec.offset; i < spec.offset + spec.count; ++i) {
    const auto k = static_cast<std::size_t>(i);
    ckpt.params[k] = static_cast<float>(initial[k] + factor * (static_cast<double>(ckpt.params[k]) - initial[k]));
  }
  model::write_llmc_checkpoint((run / "model.bin").string(), ckpt.config, ckpt.params);
}

// Replays `run` and checks model.bin against it with every tensor's update
// scaled by 1.01, and with every tensor left at its initial value: each
// variant must fail naming exactly that tensor.
void expect_every_tensor_checked(const fs::path& run) {
  const Config config = load_config((run / "config.toml").string(), {});
  LocalTrainer reference(config, run, TrainerRole::kReference);
  const std::vector<float> initial(reference.params().begin(), reference.params().end());
  std::vector<double> lrs;
  for (const nlohmann::json& row : read_rows(run / "schedule.jsonl")) {
    lrs.push_back(reference.step(row["step"], row["samples"].get<std::vector<std::vector<std::int64_t>>>()).lr);
  }
  const model::LlmcCheckpoint trained = model::read_llmc_checkpoint((run / "model.bin").string());
  const model::ParameterLayout full(trained.config, model::Shard::full(trained.config));
  const double zero_grad = zero_gradient_update_bound(lrs, config.train.beta1, config.train.beta2);
  const UpdateCheck clean = compare_updates(full, initial, trained.params, reference.params(), {}, zero_grad);
  ASSERT_TRUE(clean.pass()) << clean.failures[0];
  for (const model::TensorSpec& spec : full.tensors()) {
    for (double factor : {1.01, 0.99, 0.0}) {
      std::vector<float> broken = trained.params;
      for (std::int64_t i = spec.offset; i < spec.offset + spec.count; ++i) {
        const auto k = static_cast<std::size_t>(i);
        broken[k] = static_cast<float>(initial[k] + factor * (static_cast<double>(broken[k]) - initial[k]));
      }
      const UpdateCheck check = compare_updates(full, initial, broken, reference.params(), {}, zero_grad);
      ASSERT_EQ(check.failures.size(), 1u) << spec.name << " x" << factor;
      EXPECT_EQ(check.failures[0].rfind(spec.name + ":", 0), 0u) << check.failures[0];
    }
  }
}

TEST_F(VerifyCliTest, AOnePercentErrorInAnyTensorIsCaughtAfterOneAndThreeSteps) {
  for (int steps : {1, 3}) {
    SCOPED_TRACE(steps);
    const fs::path run = train("run" + std::to_string(steps), steps);
    expect_every_tensor_checked(run);
  }
}

// The failures of RUN_DIR/verify.json, which `ntp verify` writes.
std::string failures_in_file(const fs::path& run) {
  return nlohmann::json::parse(std::ifstream(run / kVerifyFile))["failures"].dump();
}

// One finished run, then a broken copy per check: `ntp verify` passes the run
// and rejects each copy with exit 1 and a one-line verdict naming what broke.
TEST_F(VerifyCliTest, EveryCheckRejectsABrokenRunDirectory) {
  const fs::path run = train("run", 3);
  const CliResult clean = ntp("verify " + run.string());
  ASSERT_EQ(clean.code, 0) << clean.output;
  // One line. Every rank wrote hashes/rank-<r>.json, so all four checks ran:
  // every holder of every unit agrees.
  EXPECT_EQ(clean.output.rfind("verify: pass — 3 steps, 4 checks, worst update ", 0), 0u) << clean.output;
  EXPECT_EQ(clean.output.find('\n'), clean.output.size() - 1) << clean.output;
  EXPECT_EQ(nlohmann::json::parse(std::ifstream(run / kVerifyFile))["holders"], "pass");

  const auto expect_rejected = [&](const fs::path& broken, const std::string& text) {
    const CliResult r = ntp("verify " + broken.string());
    EXPECT_EQ(r.code, 1) << broken.filename() << ": " << r.output;
    EXPECT_EQ(r.output.rfind("verify: FAIL — ", 0), 0u) << r.output;
    EXPECT_NE(r.output.find(text), std::string::npos) << "expected '" << text << "' in: " << r.output;
  };

  fs::path d = copy(run, "update_x1.01");
  scale_update(d, "h0.fc2_wt", 1.01);
  expect_rejected(d, "h0.fc2_wt: ");

  d = copy(run, "ln_not_updated");
  scale_update(d, "h0.ln2_b", 0.0);
  expect_rejected(d, "h0.ln2_b: ");

  d = copy(run, "loss_off");
  std::vector<nlohmann::json> metrics = read_rows(run / "metrics.jsonl");
  metrics[1]["loss"] = metrics[1]["loss"].get<double>() * (1 + 1e-4);
  write_rows(d / "metrics.jsonl", metrics);
  expect_rejected(d, "step 1: loss ");

  d = copy(run, "grad_norm_off");
  metrics = read_rows(run / "metrics.jsonl");
  metrics[2]["grad_norm"] = metrics[2]["grad_norm"].get<double>() * 1.01;
  write_rows(d / "metrics.jsonl", metrics);
  expect_rejected(d, "step 2: grad_norm ");

  const std::vector<nlohmann::json> schedule = read_rows(run / "schedule.jsonl");
  d = copy(run, "row_duplicated");
  std::vector<nlohmann::json> rows = schedule;
  rows.insert(rows.begin() + 2, rows[1]);
  write_rows(d / "schedule.jsonl", rows);
  expect_rejected(d, "schedule.jsonl: step 1 appears more than once");

  d = copy(run, "row_missing");
  rows = schedule;
  rows.erase(rows.begin() + 1);
  write_rows(d / "schedule.jsonl", rows);
  expect_rejected(d, "schedule.jsonl: step 1 missing");

  d = copy(run, "sample_substituted");
  rows = schedule;
  const std::int64_t original = rows[2]["samples"][1][0];
  const std::int64_t other = rows[0]["samples"][0][0];
  rows[2]["samples"][1][0] = other;
  write_rows(d / "schedule.jsonl", rows);
  expect_rejected(d, "step 2: sample " + std::to_string(other) + " is not in the step's batch");
  const std::string not_trained = "step 2: sample " + std::to_string(original) + " of the step's batch not trained";
  EXPECT_NE(failures_in_file(d).find(not_trained), std::string::npos) << failures_in_file(d);

  d = copy(run, "sample_duplicated");
  rows = schedule;
  const std::int64_t twice = rows[0]["samples"][0][0];
  rows[0]["samples"][1][0] = twice;
  write_rows(d / "schedule.jsonl", rows);
  expect_rejected(d, "step 0: sample " + std::to_string(twice) + " trained 2 times");

  // The hash files the ranks wrote: replica 0 at TP 3 (ranks 0-2), replica 1
  // at TP 4 (ranks 3-6).
  d = run;
  const CliResult with_hashes = ntp("verify " + d.string() + " --json");
  ASSERT_EQ(with_hashes.code, 0) << with_hashes.output;
  const nlohmann::json report = nlohmann::json::parse(with_hashes.output);
  EXPECT_EQ(report["holders"], "pass");
  EXPECT_EQ(report["holder_check"]["details"]["complete_replicas"], nlohmann::json::parse("[0, 1]"));
  const model::LlmcCheckpoint ckpt = model::read_llmc_checkpoint((run / "model.bin").string());
  const model::ParameterLayout full(ckpt.config, model::Shard::full(ckpt.config));
  EXPECT_EQ(report["tensors"].size(), full.tensors().size());

  const fs::path unit_changed = copy(d, "hash_unit_changed");
  nlohmann::json j = nlohmann::json::parse(std::ifstream(unit_changed / "hashes" / "rank-3.json"));
  const std::int64_t unit = j["neurons"][0][0];
  j["neurons"][0][1] = "0123456789abcdef";
  std::ofstream(unit_changed / "hashes" / "rank-3.json", std::ios::trunc) << j.dump() << "\n";
  expect_rejected(unit_changed, "neurons unit " + std::to_string(unit) + ": holders differ");
  expect_rejected(unit_changed, "rank 3 holds 0123456789abcdef");

  const fs::path replicated_changed = copy(d, "hash_replicated_changed");
  j = nlohmann::json::parse(std::ifstream(replicated_changed / "hashes" / "rank-0.json"));
  j["replicated"] = "0123456789abcdef";
  std::ofstream(replicated_changed / "hashes" / "rank-0.json", std::ios::trunc) << j.dump() << "\n";
  expect_rejected(replicated_changed, "replicated tensors differ");
  expect_rejected(replicated_changed, "rank 0 holds 0123456789abcdef");
}

TEST_F(VerifyCliTest, MissingRunFilesAreBadInput) {
  CliResult r = ntp("verify " + (dir_ / "nothing").string());
  EXPECT_EQ(r.code, 2) << r.output;
  EXPECT_NE(r.output.find("does not exist"), std::string::npos) << r.output;
  fs::create_directories(dir_ / "empty");
  std::ofstream(dir_ / "empty" / "config.toml") << "";
  r = ntp("verify " + (dir_ / "empty").string());
  EXPECT_EQ(r.code, 2) << r.output;
  EXPECT_NE(r.output.find("model.bin"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("schedule.jsonl"), std::string::npos) << r.output;
  EXPECT_EQ(ntp("verify").code, 2);
}

}  // namespace
}  // namespace ntp::train
