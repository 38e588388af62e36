// --verify under model.precision = "bf16" (docs/train.md, "Tolerances under
// bf16"): a nonuniform dp 2 x tp 2 run (replica 0 at TP 1, replica 1 at TP 2)
// passes against its one-process replay, and an update wrong by 3 % in any
// tensor class, after 1 or after 3 steps, fails it. The wrong update is made
// by scaling what the run changed (model.bin's final − initial) for every
// tensor of one class, which is what a mis-scaled update of that class leaves
// in model.bin; the replay runs once per run and the check is compare_updates,
// so the sweep costs no more replays.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "model/model_file.h"
#include "model/parameters.h"
#include "tensor/gemm_backend.h"
#include "tests/support/cli_run.h"
#include "train/config.h"
#include "train/local_trainer.h"
#include "train/model_setup.h"
#include "train/run_dir.h"
#include "train/verify.h"

namespace ntp::train {
namespace {

namespace fs = std::filesystem;

const std::vector<std::string> kClasses = {"embedding", "norm", "bias", "weight"};

// A finished run and its one-process replay.
struct Replayed {
  model::GptConfig gpt;
  std::vector<float> initial, run, ref;
  double zero_grad_bound = 0;
};

Replayed replay(const fs::path& dir) {
  const Config config = load_config((dir / "config.toml").string(), {});
  LocalTrainer reference(config, dir, TrainerRole::kReference);
  Replayed r;
  r.gpt = reference.setup().gpt;
  r.initial.assign(reference.params().begin(), reference.params().end());
  std::vector<double> lrs;
  for (const nlohmann::json& row : read_jsonl(dir / "schedule.jsonl")) {
    const auto samples = row.at("samples").get<std::vector<std::vector<std::int64_t>>>();
    lrs.push_back(reference.step(row.at("step").get<std::int64_t>(), samples, nullptr, StepUpdate::kApply).lr);
  }
  r.ref.assign(reference.params().begin(), reference.params().end());
  r.run = model::read_model_file((dir / "model.bin").string()).params;
  r.zero_grad_bound = zero_gradient_update_bound(lrs, config.train.beta1, config.train.beta2);
  return r;
}

// The run's update of every tensor of `cls` scaled by 1 + error.
std::vector<float> scaled(const Replayed& r, const model::ParameterLayout& full, const std::string& cls,
                          double error) {
  std::vector<float> out = r.run;
  for (const model::TensorSpec& spec : full.tensors()) {
    if (tensor_class(spec.name) != cls) continue;
    for (std::int64_t i = 0; i < spec.count; ++i) {
      const auto k = static_cast<std::size_t>(spec.offset + i);
      out[k] = static_cast<float>(r.initial[k] + (1 + error) * (static_cast<double>(r.run[k]) - r.initial[k]));
    }
  }
  return out;
}

UpdateCheck check(const Replayed& r, const std::vector<float>& run) {
  const model::ParameterLayout full(r.gpt, model::Shard::full(r.gpt));
  return compare_updates(full, r.initial, run, r.ref, verify_tolerance(tensor::Precision::kBf16), r.zero_grad_bound);
}

class Bf16VerifyTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("ntp_bf16_verify_" + std::to_string(::getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  // `ntp train` in bf16, nonuniform dp 2 x tp 2, with --verify; the verdict line.
  std::string train(const fs::path& run_dir, int steps, const std::string& extra = "") {
    const testing::CliRun r = testing::run_cli(
        std::string(NTP_BINARY),
        "train --set train.steps=" + std::to_string(steps) +
            " --set model.layers=2 --set model.seq_len=32 --set train.micro_batch=2 --set run.trace_steps=0"
            " --set parallel.dp=2 --set parallel.tp=2 --set 'parallel.failed={0=[1]}'"
            " --set model.precision='\"bf16\"' --verify " +
            extra + " --run-dir " + run_dir.string());
    EXPECT_EQ(r.exit_code, 0) << r.out << r.err;
    return r.out;
  }
  fs::path dir_;
};

// The smallest error of {0.5, 1, 2, 3, 5} % in one class's updates that fails
// the check, printed per class (what docs/train.md reports), and 3 % must.
void expect_detects(const Replayed& r, const char* when) {
  const model::ParameterLayout full(r.gpt, model::Shard::full(r.gpt));
  for (const std::string& cls : kClasses) {
    double smallest = 0;
    for (const double error : {0.005, 0.01, 0.02, 0.03, 0.05}) {
      const UpdateCheck c = check(r, scaled(r, full, cls, error));
      if (!c.pass()) {
        smallest = error;
        break;
      }
    }
    std::printf("bf16 verify, %s: smallest update error caught in %s tensors: %s\n", when, cls.c_str(),
                smallest > 0 ? (std::to_string(100 * smallest) + " %").c_str() : "none up to 5 %");
    EXPECT_GT(smallest, 0) << cls << " " << when;
    EXPECT_LE(smallest, 0.03) << cls << " " << when;
    // And a wrong update is named by a tensor of its class.
    const UpdateCheck wrong = check(r, scaled(r, full, cls, 0.03));
    ASSERT_FALSE(wrong.pass()) << cls;
    EXPECT_EQ(tensor_class(wrong.failures.front().substr(0, wrong.failures.front().find(':'))), cls)
        << wrong.failures.front();
  }
}

// The run in `dir` (its output `out`, `when` its length: "3 steps") passed
// --verify and its own update check, and a wrong 3 % update in any class fails it.
void expect_passes_and_detects(const std::string& out, const fs::path& dir, const std::string& when) {
  EXPECT_NE(out.find("verify: pass — " + when + ", 4 checks"), std::string::npos) << out;
  const Replayed r = replay(dir);
  EXPECT_TRUE(check(r, r.run).pass());
  expect_detects(r, when.c_str());
}

TEST_F(Bf16VerifyTest, NonuniformRunPassesAndAThreePercentWrongUpdateFailsAfterThreeSteps) {
  expect_passes_and_detects(train(dir_, 3), dir_, "3 steps");
}

TEST_F(Bf16VerifyTest, NonuniformRunPassesAndAThreePercentWrongUpdateFailsAfterOneStep) {
  expect_passes_and_detects(train(dir_, 1), dir_, "1 step");
}

// The fp32 tolerance is too tight for bf16 (the check is not vacuous: the
// same run judged as fp32 fails), and the bf16 one is looser than fp32's.
TEST_F(Bf16VerifyTest, TheFp32ToleranceRejectsABf16Run) {
  train(dir_, 3);
  const Replayed r = replay(dir_);
  const model::ParameterLayout full(r.gpt, model::Shard::full(r.gpt));
  EXPECT_FALSE(compare_updates(full, r.initial, r.run, r.ref, verify_tolerance(tensor::Precision::kFp32),
                               r.zero_grad_bound)
                   .pass());
}

// A CPU without AVX512-BF16 (DNNL_MAX_CPU_ISA caps oneDNN below it) runs the
// emulated path, says so in run_started's threads, and still passes --verify.
TEST_F(Bf16VerifyTest, WithoutAvx512Bf16TheEmulatedPathRunsSaysSoAndVerifies) {
  const testing::CliRun r = testing::run_cli(
      "DNNL_MAX_CPU_ISA=AVX512_CORE_VNNI " + std::string(NTP_BINARY),
      "train --set train.steps=2 --set model.layers=1 --set model.seq_len=32 --set run.trace_steps=0"
      " --set model.precision='\"bf16\"' --verify --run-dir " + dir_.string());
  EXPECT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_NE(r.out.find("verify: pass"), std::string::npos) << r.out;
  std::ifstream events(dir_ / "events.jsonl");
  const std::string text((std::istreambuf_iterator<char>(events)), std::istreambuf_iterator<char>());
  EXPECT_NE(text.find("gemm bf16 emulated (no avx512_bf16"), std::string::npos);
}

// The mutation suite's 3 % update error (test.mutation = update_x1.03: every
// update of the run 3 % too large, the replay's right) fails a bf16 run's
// --verify after 1 step and after 3, naming the update check.
TEST_F(Bf16VerifyTest, TheThreePercentUpdateMutationFailsAfterOneAndThreeSteps) {
  for (const int steps : {1, 3}) {
    const fs::path run = dir_ / ("steps" + std::to_string(steps));
    const testing::CliRun r = testing::run_cli(
        "NTP_TEST_MUTATIONS=1 timeout -s KILL 150 " + std::string(NTP_BINARY),
        "train --set train.steps=" + std::to_string(steps) +
            " --set model.layers=2 --set model.seq_len=32 --set train.micro_batch=2 --set run.trace_steps=0"
            " --set parallel.dp=2 --set parallel.tp=2 --set 'parallel.failed={0=[1]}'"
            " --set model.precision='\"bf16\"' --set test.mutation=update_x1.03 --verify --run-dir " +
            run.string());
    EXPECT_EQ(r.exit_code, 1) << steps << " steps:\n" << r.out << r.err;
    EXPECT_NE(r.out.find("verify: FAIL"), std::string::npos) << steps << " steps:\n" << r.out;
  }
}

// A bf16 dp 2 x tp 2 job of 8 steps, a checkpoint every 4, under a hard time limit.
const std::string kBf16Job =
    " --set model.layers=1 --set model.seq_len=32 --set train.micro_batch=2 --set run.trace_steps=0"
    " --set train.global_batch=8 --set train.steps=8 --set train.checkpoint_every=4 --set parallel.dp=2"
    " --set parallel.tp=2 --set model.precision='\"bf16\"' --set deadline.collective_s=10"
    " --set deadline.heartbeat_s=1.5";

testing::CliRun ntp_limited(const std::string& args) {
  return testing::run_cli("timeout -s KILL 150 " + std::string(NTP_BINARY), args);
}

std::vector<double> losses(const fs::path& run) {
  std::vector<double> out;
  for (const nlohmann::json& row : read_jsonl(run / "metrics.jsonl")) out.push_back(row.at("loss").get<double>());
  return out;
}

bool has_event(const fs::path& run, const std::string& name) {
  for (const nlohmann::json& e : read_jsonl(run / "events.jsonl"))
    if (e.value("event", "") == name) return true;
  return false;
}

std::string file_bytes(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

// What holds state stays fp32 in a bf16 run: a run stopped by a killed worker
// resumes from its checkpoint and ends bit for bit where the uninterrupted run
// ends, an in-job recovery redoes its step and verifies, model.bin holds
// weights bf16 cannot represent (the fp32 master copy), and the llm.c export
// of the final checkpoint is model.bin byte for byte.
TEST_F(Bf16VerifyTest, CheckpointsResumeRecoveryAndExportKeepTheFp32MasterState) {
  const fs::path reference = dir_ / "reference", stopped = dir_ / "stopped", recovered = dir_ / "recovered";
  const testing::CliRun ref = ntp_limited("train --run-dir " + reference.string() + kBf16Job);
  ASSERT_EQ(ref.exit_code, 0) << ref.out << ref.err;
  const std::vector<double> want = losses(reference);
  ASSERT_EQ(want.size(), 8u);

  const testing::CliRun stop =
      ntp_limited("train --run-dir " + stopped.string() + kBf16Job + " --set 'test.failures=\"3@6:start\"'");
  ASSERT_EQ(stop.exit_code, 1) << "a worker killed at step 6 ends the run\n" << stop.out << stop.err;
  const testing::CliRun resumed = ntp_limited("train --resume " + stopped.string() + " --verify");
  ASSERT_EQ(resumed.exit_code, 0) << resumed.out << resumed.err;
  EXPECT_NE(resumed.out.find("verify: pass"), std::string::npos) << resumed.out;
  EXPECT_EQ(losses(stopped), want);

  const testing::CliRun rec = ntp_limited("train --run-dir " + recovered.string() + kBf16Job +
                                          " --set elastic.recover=true --set elastic.settle_s=0.2"
                                          " --set 'test.failures=\"2@2:backward\"' --verify");
  ASSERT_EQ(rec.exit_code, 0) << rec.out << rec.err;
  EXPECT_NE(rec.out.find("verify: pass"), std::string::npos) << rec.out;
  EXPECT_TRUE(has_event(recovered, "step_resumed")) << "no in-job recovery happened";

  const std::vector<float> params = model::read_model_file((reference / "model.bin").string()).params;
  const auto off_bf16 = std::count_if(params.begin(), params.end(),
                                      [](float x) { return tensor::from_bf16(tensor::to_bf16(x)) != x; });
  EXPECT_GT(off_bf16, static_cast<std::ptrdiff_t>(params.size() / 2)) << "model.bin looks rounded to bf16";
  const fs::path exported = dir_ / "export.bin";
  const testing::CliRun ex = ntp_limited("export " + (reference / "checkpoints" / "step-8").string() + " --llmc " +
                                         exported.string());
  ASSERT_EQ(ex.exit_code, 0) << ex.out << ex.err;
  EXPECT_EQ(file_bytes(exported), file_bytes(reference / "model.bin"));
}

TEST(PrecisionConfig, DefaultsToFp32ParsesBf16AndRefusesCudaAndOtherWords) {
  EXPECT_EQ(load_config("", {}).model.precision, tensor::Precision::kFp32);
  const Config bf16 = load_config("", {"model.precision=\"bf16\""});
  EXPECT_EQ(bf16.model.precision, tensor::Precision::kBf16);
  EXPECT_EQ(thread_setup(bf16.model, 1).precision, tensor::Precision::kBf16);
  EXPECT_THROW(load_config("", {"model.precision=\"fp16\""}), std::exception);
  try {
    load_config("", {"model.precision=\"bf16\"", "model.device=\"cuda\""});
    ADD_FAILURE() << "bf16 on cuda accepted";
  } catch (const std::exception& e) {
    EXPECT_NE(std::string(e.what()).find("model.precision"), std::string::npos) << e.what();
  }
}

// Diagnostic (not a check): how far the run is from the replay, per class, as
// quantiles of |Δrun − Δref| / (|Δref| + rms(Δref)); what the bf16 tolerance
// is set from. Run with --gtest_also_run_disabled_tests.
TEST_F(Bf16VerifyTest, DISABLED_PrintNoise) {
  for (const int steps : {1, 3, 10}) {
    const fs::path run_dir = dir_ / std::to_string(steps);
    train(run_dir, steps);
    const Replayed r = replay(run_dir);
    const model::ParameterLayout full(r.gpt, model::Shard::full(r.gpt));
    std::map<std::string, std::vector<double>> ratios;
    for (const model::TensorSpec& spec : full.tensors()) {
      double sq = 0;
      for (std::int64_t i = 0; i < spec.count; ++i) {
        const auto k = static_cast<std::size_t>(spec.offset + i);
        sq += std::pow(static_cast<double>(r.ref[k]) - r.initial[k], 2);
      }
      const double rms = std::sqrt(sq / static_cast<double>(spec.count));
      for (std::int64_t i = 0; i < spec.count; ++i) {
        if (zero_gradient_element(spec, i, r.gpt)) continue;
        const auto k = static_cast<std::size_t>(spec.offset + i);
        const double ref = static_cast<double>(r.ref[k]) - r.initial[k];
        const double run = static_cast<double>(r.run[k]) - r.initial[k];
        ratios[tensor_class(spec.name)].push_back(std::abs(run - ref) / (std::abs(ref) + rms));
      }
    }
    for (auto& [cls, v] : ratios) {
      std::sort(v.begin(), v.end());
      const auto q = [&](double f) { return v[static_cast<std::size_t>(f * static_cast<double>(v.size() - 1))]; };
      std::printf("%d steps %-9s n=%zu  q50 %.2e  q90 %.2e  q99 %.2e  q99.9 %.2e  max %.2e\n", steps, cls.c_str(),
                  v.size(), q(0.5), q(0.9), q(0.99), q(0.999), v.back());
    }
  }
}

}  // namespace
}  // namespace ntp::train
