#include <cmath>
#include <filesystem>
#include <numeric>

#include <gtest/gtest.h>

#include "model/model.h"
#include "model/optimizer.h"
#include "model/token_data.h"
#include "tensor/context.h"
#include "train/local_trainer.h"
#include "train/lr_schedule.h"
#include "train/ntp_trainer.h"
#include "train/run_dir.h"

namespace ntp::train {
namespace {

namespace fs = std::filesystem;

TEST(LearningRate, WarmupThenCosineToATenth) {
  OptimConfig t;
  t.lr = 1e-3;
  t.steps = 11;
  t.warmup_steps = 2;
  EXPECT_DOUBLE_EQ(learning_rate(t, 0), 0.5e-3);
  EXPECT_DOUBLE_EQ(learning_rate(t, 1), 1e-3);
  EXPECT_DOUBLE_EQ(learning_rate(t, 2), 1e-3);
  EXPECT_NEAR(learning_rate(t, 10), 1e-4, 1e-15);
  for (std::int64_t s = 3; s < 11; ++s) EXPECT_LT(learning_rate(t, s), learning_rate(t, s - 1));
  t.lr_schedule = LrSchedule::kConstant;
  EXPECT_DOUBLE_EQ(learning_rate(t, 7), 1e-3);
}

// `ntp train` at TP = DP = 1 with data.order = "sequential" and llm.c's
// optimizer settings is the loop of llm.c's train_gpt2: batch i is tokens
// [i*B*T, (i+1)*B*T + 1), mean loss, AdamW. Replaying that loop directly on
// the model gives the same loss at every step, bit for bit.
TEST(LocalTrainer, SequentialRunIsTheLlmcLoop) {
  const fs::path dir = fs::temp_directory_path() / ("ntp_llmc_loop_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  std::vector<std::uint16_t> tokens(3000);
  for (std::size_t i = 0; i < tokens.size(); ++i) tokens[i] = static_cast<std::uint16_t>((i * 7 + i / 13) % 256);
  model::TokenData::write_token_file((dir / "tokens.bin").string(), tokens);

  Config c;
  c.model.layers = 1;
  c.model.seq_len = 16;
  c.model.threads = 1;
  c.data.path = (dir / "tokens.bin").string();
  c.data.order = DataOrder::kSequential;
  c.train.steps = 3;
  c.train.global_batch = 4;
  c.train.micro_batch = 4;
  c.train.lr = 3e-4;
  c.train.lr_schedule = LrSchedule::kConstant;
  c.train.beta2 = 0.999;
  c.train.weight_decay = 0;
  c.train.grad_clip = 0;
  const fs::path run_dir = dir / "run";
  RunDir::create(run_dir);
  const std::vector<StepMetrics> metrics = train_local(c, run_dir, nullptr);
  ASSERT_EQ(metrics.size(), 3u);

  const model::TokenData data = model::TokenData::read_token_file(c.data.path);
  model::GptConfig gpt = model::preset("tiny");
  gpt.layers = 1;
  gpt.max_seq = 16;
  tensor::Context ctx({1});
  model::Model m(gpt, model::Shard::full(gpt), ctx);
  m.init(static_cast<std::uint64_t>(c.train.seed));
  model::AdamWConfig opt;
  opt.lr = 3e-4f;
  opt.beta1 = 0.9f;
  opt.beta2 = 0.999f;
  opt.eps = 1e-8f;
  model::AdamW adamw(opt, m.layout());
  std::vector<std::int32_t> inputs(4 * 16), targets(4 * 16);
  for (std::int64_t step = 0; step < 3; ++step) {
    data.sequential_batch(step, 4, 16, inputs.data(), targets.data());
    m.zero_grad();
    m.set_loss_scale(1.0f / 64.0f);
    const double loss = m.forward({inputs.data(), targets.data(), 4, 16}).mean();
    m.backward();
    adamw.step(m, 3e-4f);
    EXPECT_EQ(metrics[static_cast<std::size_t>(step)].loss, loss) << "step " << step;
  }
  const auto schedule = read_jsonl(run_dir / "schedule.jsonl");
  EXPECT_EQ(schedule[1]["samples"], nlohmann::json::parse("[[4,5,6,7]]"));
  fs::remove_all(dir);
}

// A single-process run has one healthy replica: with power simulated its
// plan is the default limit and the whole batch, logged and restored like a
// worker's.
TEST(LocalTrainer, SimulatedPowerPlansTheOneHealthyReplica) {
  const fs::path dir = fs::temp_directory_path() / ("ntp_local_power_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  Config c;
  c.model.layers = 1;
  c.model.seq_len = 16;
  c.model.threads = 1;
  c.train.steps = 2;
  c.train.global_batch = 2;
  c.run.trace_steps = 0;
  c.power.mode = power::PowerMode::simulated;
  c.power.tdp_w = 500.0;
  RunDir::create(dir);
  const std::vector<StepMetrics> metrics = train_local(c, dir, nullptr);
  ASSERT_EQ(metrics.size(), 2u);
  EXPECT_EQ(metrics[1].power, (std::vector<ReplicaPower>{{500.0, 1.0}}));
  std::vector<std::string> power_events;
  for (const nlohmann::json& e : read_jsonl(dir / "events.jsonl")) {
    const std::string name = e["event"];
    if (name.rfind("power_", 0) != 0) continue;
    power_events.push_back(name);
    if (name == "power_restored") {
      EXPECT_DOUBLE_EQ(e["device_limit_w"].get<double>(), 500.0);
    }
  }
  EXPECT_EQ(power_events,
            (std::vector<std::string>{"power_plan", "power_applied", "power_restored"}));
  fs::remove_all(dir);
}

}  // namespace
}  // namespace ntp::train
