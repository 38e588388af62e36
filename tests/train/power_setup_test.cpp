// The trainer's side of power.mode: the RankPower a worker builds from its
// configuration, the plan it logs, and its restore paths (simulated backend,
// the same LimitGuard calls as NVML).
#include "train/power_setup.h"

#include <atomic>
#include <chrono>
#include <csignal>
#include <filesystem>
#include <string>
#include <thread>
#include <unistd.h>

#include <gtest/gtest.h>

namespace ntp::train {
namespace {

PowerConfig simulated_config() {
  PowerConfig config;
  config.mode = power::PowerMode::simulated;
  config.tdp_w = 700.0;
  config.max_frac = 1.4;
  config.headroom_w = 150.0;
  config.alpha = 0.7;
  return config;
}

TEST(PowerSetup, OptionsCarryTheConfiguredModelAndTheRanksGpu) {
  const power::RankPowerOptions options = rank_power_options(simulated_config(), "GPU-abc");
  EXPECT_EQ(options.mode, power::PowerMode::simulated);
  EXPECT_DOUBLE_EQ(options.model.tdp_w, 700.0);
  EXPECT_DOUBLE_EQ(options.model.max_frac, 1.4);
  EXPECT_DOUBLE_EQ(options.model.alpha, 0.7);
  EXPECT_DOUBLE_EQ(options.headroom_w, 150.0);
  EXPECT_EQ(options.nvml.devices, (std::vector<std::string>{"GPU-abc"}));
  EXPECT_TRUE(options.restore_on_signal);
  EXPECT_TRUE(rank_power_options(simulated_config(), "").nvml.devices.empty());
}

TEST(PowerSetup, PlanJsonIsThePolicysPlan) {
  const power::RankPower rank(rank_power_options(simulated_config(), ""));
  const power::BoostPlan plan = rank.plan(4, {3, 0, 4}, 12);
  const power::BoostPlan expected =
      power::plan_boost(4, {3, 0, 4}, 150.0, 12, power::DevicePowerModel{700.0, 1.4, 0.7});
  const nlohmann::json json = plan_json(plan);
  ASSERT_EQ(json.size(), 3u);
  for (std::size_t r = 0; r < 3; ++r) {
    EXPECT_EQ(json[r]["replica"], r);
    EXPECT_EQ(json[r]["active"], expected.replicas[r].active);
    EXPECT_DOUBLE_EQ(json[r]["limit_w"].get<double>(), expected.replicas[r].limit_w);
    EXPECT_DOUBLE_EQ(json[r]["speedup"].get<double>(), expected.replicas[r].speedup);
    EXPECT_EQ(json[r]["share"], expected.replicas[r].share);
  }
  EXPECT_DOUBLE_EQ(json[0]["need"].get<double>(), 4.0 / 3.0);  // n/k: no need given
  EXPECT_EQ(json[0]["cap"], power::to_string(expected.replicas[0].cap));
  EXPECT_DOUBLE_EQ(json[1]["need"].get<double>(), 0.0);  // sits out
  const std::vector<ReplicaPower> metrics = replica_power(plan);
  EXPECT_DOUBLE_EQ(metrics[0].limit_w, expected.replicas[0].limit_w);
  EXPECT_DOUBLE_EQ(metrics[2].speedup, 1.0);
}

// A model whose 128 heads split unevenly at TP 30 of 32 (5 heads on the
// busiest GPU against 4), with FFN neurons and vocabulary rows that split
// almost evenly.
ModelSetup uneven_model() {
  ModelSetup model;
  model.gpt = {50257, 50304, 4, 8192, 128, 2048};
  model.seq_len = 2048;
  return model;
}

TEST(PowerSetup, ModelledNeedIsTheBusiestGpusWorkAboveNOverK) {
  const std::vector<power::UnitWork> work = step_work(uneven_model());
  const std::vector<double> needs = modelled_needs(32, {30, 32, 0}, work);
  ASSERT_EQ(needs.size(), 3u);
  // Heads alone would need 5/4, neurons and rows about 32/30: the need lies between.
  EXPECT_GT(needs[0], 32.0 / 30.0 + 0.05);
  EXPECT_LT(needs[0], 1.25);
  EXPECT_EQ(needs[1], 1.0);
  EXPECT_EQ(needs[2], 0.0);
  // A model that splits evenly needs exactly n/k.
  ModelSetup even = uneven_model();
  even.gpt = {50257, 50304, 4, 64 * 32, 32, 2048};
  EXPECT_DOUBLE_EQ(modelled_needs(4, {2}, step_work(even))[0], 2.0);
}

// A pipeline stage's work: its blocks only, and the LM head's rows only on
// the last stage. A middle stage of the uneven model splits heads 5 against
// 4 and neurons 69 against 64 at TP 30 of 32, and has no rows: its need is
// its blocks' alone, higher than the whole model's (whose nearly even rows
// pull it down); the last stage's lies between.
TEST(PowerSetup, AStagesWorkIsItsBlocksAndTheHeadOnlyOnTheLastStage) {
  const ModelSetup model = uneven_model();
  const std::vector<power::UnitWork> middle = step_work(model, {1, 3});
  ASSERT_EQ(middle.size(), 3u);
  EXPECT_EQ(middle[2].cost, 0.0);
  EXPECT_DOUBLE_EQ(middle[0].cost, step_work(model)[0].cost / 2.0);  // 2 of 4 blocks
  EXPECT_GT(step_work(model, {3, 4})[2].cost, 0.0);
  const double whole = modelled_needs(32, {30}, step_work(model))[0];
  const double blocks = modelled_needs(32, {30}, middle)[0];
  const double last = modelled_needs(32, {30}, step_work(model, {3, 4}))[0];
  EXPECT_GT(blocks, whole);
  EXPECT_LE(last, blocks);
  EXPECT_EQ(modelled_needs(32, {32}, middle)[0], 1.0);
}

// RankPowerRun in a temporary run folder, with its power_plan event.
class PowerRunTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() /
           ("ntp_power_need_" + std::to_string(::getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    std::filesystem::remove_all(dir_);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  // TP 32 x 2 replicas, replica 0 at 30 of 32, B200-like power model.
  static Config tp30_config(double headroom_w) {
    Config config;
    config.parallel.tp = 32;
    config.parallel.dp = 2;
    config.parallel.failed = {{{0, 0}, {30, 31}}};
    config.power.mode = power::PowerMode::simulated;
    config.power.tdp_w = 1000.0;
    config.power.max_frac = 1.3;
    config.power.alpha = 0.65;
    config.power.headroom_w = headroom_w;
    return config;
  }

  // `place`: the rank configured (rank 0 logs the plan). `applied`: its power_applied event.
  nlohmann::json configure(const Config& config, std::vector<std::int64_t>* shares, PowerRank place = {},
                           nlohmann::json* applied = nullptr) {
    const RunDir run = RunDir::create(dir_);
    RankPowerRun power(config, run, place, "");
    *shares = power.configure(config.parallel, 64, uneven_model());
    power.restore("exit");
    nlohmann::json plan;
    for (const nlohmann::json& e : run.read_events()) {
      if (e["event"] == "power_plan") plan = e["replicas"];
      if (e["event"] == "power_applied" && applied != nullptr) *applied = e;
    }
    std::filesystem::remove_all(dir_);
    return plan;
  }

  std::filesystem::path dir_;
};

TEST_F(PowerRunTest, TrainerBoostsToTheModelledNeedWhenTheHeadroomAllows) {
  const double need = modelled_needs(32, {30}, step_work(uneven_model()))[0];
  std::vector<std::int64_t> shares;
  const nlohmann::json plan = configure(tp30_config(8000.0), &shares);
  ASSERT_EQ(plan.size(), 2u) << plan;
  EXPECT_DOUBLE_EQ(plan[0]["need"].get<double>(), need);
  EXPECT_DOUBLE_EQ(plan[0]["speedup"].get<double>(), need);  // full pace, above n/k
  EXPECT_GT(plan[0]["speedup"].get<double>(), 32.0 / 30.0 + 0.05);
  EXPECT_EQ(plan[0]["cap"], "none");
  EXPECT_EQ(shares, (std::vector<std::int64_t>{32, 32}));
  // The n/k plan stops at 32/30 with a lower limit: a trainer ignoring the need fails here.
  const power::BoostPlan n_over_k =
      power::plan_boost(32, {30, 32}, 8000.0, 64, power::DevicePowerModel{1000.0, 1.3, 0.65});
  EXPECT_GT(plan[0]["limit_w"].get<double>(), n_over_k.replicas[0].limit_w + 1.0);
}

TEST_F(PowerRunTest, TrainerReportsTheBindingCapAndRebalancesForTheNeed) {
  const double need = modelled_needs(32, {30}, step_work(uneven_model()))[0];
  const Config config = tp30_config(1000.0);
  std::vector<std::int64_t> shares;
  const nlohmann::json plan = configure(config, &shares);
  ASSERT_EQ(plan.size(), 2u) << plan;
  EXPECT_EQ(plan[0]["cap"], "domain_budget");
  EXPECT_LT(plan[0]["speedup"].get<double>(), need);
  const power::DevicePowerModel model{1000.0, 1.3, 0.65};
  const power::BoostPlan expected = power::plan_boost(32, {30, 32}, {need, 1.0}, 1000.0, 64, model);
  EXPECT_EQ(shares, (std::vector<std::int64_t>{expected.replicas[0].share, expected.replicas[1].share}));
  // The degraded replica takes less than the n/k plan would give it.
  const power::BoostPlan n_over_k = power::plan_boost(32, {30, 32}, 1000.0, 64, model);
  EXPECT_LT(shares[0], n_over_k.replicas[0].share) << plan;
}

std::atomic<int> g_chained{0};
extern "C" void on_chained_signal(int signo) { g_chained.store(signo); }

// SIGTERM to a worker whose GPU is boosted: the limit goes back to the default
// before the signal takes its course (here a handler installed earlier, which
// lets the test process survive to look).
TEST(PowerSetup, SigtermRestoresTheBoostedLimitThenChains) {
  struct sigaction test_handler {};
  test_handler.sa_handler = on_chained_signal;
  sigemptyset(&test_handler.sa_mask);
  struct sigaction original {};
  ASSERT_EQ(::sigaction(SIGTERM, &test_handler, &original), 0);
  g_chained.store(0);
  {
    power::RankPower rank(rank_power_options(simulated_config(), ""));
    const power::BoostPlan plan = rank.plan(4, {3, 4}, 8);
    const power::PowerDecision decision = rank.apply(plan, 4, 0);
    ASSERT_GT(decision.device_limit_w, 700.0);
    ASSERT_EQ(std::raise(SIGTERM), 0);
    for (int i = 0; i < 500 && g_chained.load() == 0; ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    EXPECT_EQ(g_chained.load(), SIGTERM) << "the signal did not reach the earlier handler";
    EXPECT_DOUBLE_EQ(rank.controller()->get_limit_w(0), 700.0);
  }
  ::sigaction(SIGTERM, &original, nullptr);
}

// Pipeline stages: the uneven model's 4 blocks over pp 3 ({0,1}, {1,3},
// {3,4}); replica 0's middle stage runs at 30 of 32. The replica's need is
// that stage's (its blocks alone, no LM head rows), above the whole model's
// at 30; the middle stage's ranks get the replica plan's limit, a healthy
// stage's ranks the default (1000 W) and no speed-up.
TEST_F(PowerRunTest, WithStagesTheNeediestStageSetsTheReplicasPlanAndOnlyItIsBoosted) {
  Config config = tp30_config(8000.0);
  config.parallel.pp = 3;
  config.parallel.failed = {{{0, 1}, {30, 31}}};
  const std::vector<model::StageRange> stages = {{0, 1}, {1, 3}, {3, 4}};
  const double middle = modelled_needs(32, {30}, step_work(uneven_model(), stages[1]))[0];
  const double whole = modelled_needs(32, {30}, step_work(uneven_model()))[0];
  ASSERT_GT(middle, whole);
  std::vector<std::int64_t> shares;
  nlohmann::json boosted, healthy;
  const nlohmann::json plan = configure(config, &shares, PowerRank{0, 0, 0, 1, stages}, &boosted);
  ASSERT_EQ(plan.size(), 2u) << plan;
  EXPECT_DOUBLE_EQ(plan[0]["need"].get<double>(), middle);
  EXPECT_DOUBLE_EQ(plan[1]["need"].get<double>(), 1.0);
  EXPECT_DOUBLE_EQ(boosted["device_limit_w"].get<double>(), plan[0]["limit_w"].get<double>()) << boosted;
  EXPECT_GT(boosted["device_limit_w"].get<double>(), 1000.0);
  EXPECT_EQ(boosted["share"], plan[0]["share"]);
  configure(config, &shares, PowerRank{0, 0, 0, 2, stages}, &healthy);  // replica 0's last stage: all 32 slots
  EXPECT_DOUBLE_EQ(healthy["device_limit_w"].get<double>(), 1000.0) << healthy;
  EXPECT_DOUBLE_EQ(healthy["speedup"].get<double>(), 1.0) << healthy;
  // Without every stage's blocks the plan cannot be made: a clear error, not a guess.
  EXPECT_THROW(configure(config, &shares, PowerRank{0, 0, 0, 1, {}}), std::logic_error);
}

}  // namespace
}  // namespace ntp::train
