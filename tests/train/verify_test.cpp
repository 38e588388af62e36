// The checks of --verify on synthetic inputs: each passes at the noise level of
// float reassociation and fails on a broken variant, naming what broke.
#include "train/verify.h"

#include <cmath>
#include <filesystem>
#include <fstream>
#include <random>

#include <fmt/format.h>
#include <gtest/gtest.h>

#include "model/parameters.h"
#include "tests/model/model_test_util.h"
#include "train/state_hash.h"

namespace ntp::train {
namespace {

namespace fs = std::filesystem;

bool mentions(const std::vector<std::string>& failures, const std::string& text) {
  for (const std::string& f : failures) {
    if (f.find(text) != std::string::npos) return true;
  }
  return false;
}

// A trained-looking state: after one AdamW step every update is about ±lr
// (m̂/√v̂ = sign g), key biases within ±lr of noise. `ref` is the replay,
// `run` the replay plus reassociation noise of 1e-6 relative.
struct Updates {
  model::ParameterLayout full{model::testing::small_test_config(),
                              model::Shard::full(model::testing::small_test_config())};
  std::vector<float> initial, ref, run;
  double lr = 1e-3;

  Updates() {
    std::mt19937 rng(7);
    std::normal_distribution<float> init(0.0f, 0.02f);
    std::uniform_real_distribution<double> unit(-1.0, 1.0);
    const auto n = static_cast<std::size_t>(full.size());
    initial.resize(n);
    ref.resize(n);
    run.resize(n);
    for (const model::TensorSpec& spec : full.tensors()) {
      for (std::int64_t i = 0; i < spec.count; ++i) {
        const auto k = static_cast<std::size_t>(spec.offset + i);
        initial[k] = init(rng);
        const double u = unit(rng);
        const bool key_bias = zero_gradient_element(spec, i, full.config());
        // Updates of every size down to 1e-3 lr (elements whose gradient is near 0).
        const double delta = key_bias ? lr * u : lr * (u < 0 ? -1 : 1) * std::pow(10.0, 3 * u * u - 3);
        ref[k] = static_cast<float>(initial[k] + delta);
        const double noise = key_bias ? lr * unit(rng) : delta * 1e-6 * unit(rng);
        run[k] = static_cast<float>(initial[k] + delta + noise);
      }
    }
  }

  void set_update(const std::string& tensor, double factor) {
    const model::TensorSpec& spec = full[tensor];
    for (std::int64_t i = 0; i < spec.count; ++i) {
      const auto k = static_cast<std::size_t>(spec.offset + i);
      run[k] = static_cast<float>(initial[k] + factor * (static_cast<double>(ref[k]) - initial[k]));
    }
  }

  UpdateCheck check() const {
    const std::vector<double> lrs = {lr};
    return compare_updates(full, initial, run, ref, {}, zero_gradient_update_bound(lrs, 0.9, 0.95));
  }
};

TEST(VerifyUpdates, PassAtTheNoiseOfReassociation) {
  const Updates u;
  const UpdateCheck check = u.check();
  EXPECT_TRUE(check.pass()) << (check.failures.empty() ? "" : check.failures[0]);
  EXPECT_EQ(check.tensors.size(), u.full.tensors().size());
  EXPECT_LT(check.worst.ratio(), 1.0);
}

TEST(VerifyUpdates, AFewNoisyElementsPassAGrossOneFails) {
  Updates u;
  const model::TensorSpec& fc1 = u.full["h0.fc1_w"];
  const std::int64_t allowed = fc1.count / 1000;  // 7 of 7744 may exceed the bound
  const auto at = [&](std::int64_t i) { return static_cast<std::size_t>(fc1.offset + i); };
  const auto noisy = [&](Updates& x, std::int64_t i, double factor) {
    x.ref[at(i)] = static_cast<float>(x.initial[at(i)] + x.lr);
    x.run[at(i)] = static_cast<float>(x.initial[at(i)] + factor * x.lr);
  };
  for (std::int64_t i = 0; i < allowed; ++i) noisy(u, i, 0.99);  // ~5x the bound each
  UpdateCheck check = u.check();
  EXPECT_TRUE(check.pass()) << check.failures[0];
  EXPECT_EQ(check.worst.over_bound, allowed);
  noisy(u, allowed, 0.99);
  check = u.check();
  ASSERT_FALSE(check.pass());
  EXPECT_NE(check.failures[0].find("h0.fc1_w: " + std::to_string(allowed + 1) + " of 7744 elements"),
            std::string::npos)
      << check.failures[0];
  // One element 10 % off (~50x its bound) is within what AdamW's noise can
  // move an element whose gradient cancels (up to 2 lr per step); one that
  // moved the other way by 2 lr is not.
  Updates w;
  noisy(w, 5, 0.9);
  EXPECT_TRUE(w.check().pass());
  Updates v;
  noisy(v, 5, -2.0);
  EXPECT_FALSE(v.check().pass());
}

TEST(VerifyUpdates, AOnePercentErrorInAnyTensorFailsNamingIt) {
  const Updates base;
  for (const model::TensorSpec& spec : base.full.tensors()) {
    for (double factor : {1.01, 0.99, 0.0}) {
      Updates u;
      u.set_update(spec.name, factor);
      const UpdateCheck check = u.check();
      ASSERT_EQ(check.failures.size(), 1u) << spec.name << " x" << factor;
      EXPECT_EQ(check.failures[0].rfind(spec.name + ":", 0), 0u) << check.failures[0];
      EXPECT_EQ(check.worst.tensor, spec.name);
    }
  }
}

TEST(VerifyUpdates, KeyBiasesAreBoundedByWhatAdamWCanMakeOfNoise) {
  Updates u;
  const model::TensorSpec& qkv_b = u.full["h0.qkv_b"];
  const std::int64_t hd = u.full.config().head_dim();
  // A key bias moved by noise in opposite directions in the two runs: passes.
  const auto key = static_cast<std::size_t>(qkv_b.offset + hd);
  u.ref[key] = static_cast<float>(u.initial[key] + u.lr);
  u.run[key] = static_cast<float>(u.initial[key] - u.lr);
  EXPECT_TRUE(u.check().pass());
  // Beyond ±lr after one step: no gradient noise does that.
  u.run[key] = static_cast<float>(u.initial[key] - 1.5 * u.lr);
  const UpdateCheck check = u.check();
  ASSERT_FALSE(check.pass());
  EXPECT_TRUE(mentions(check.failures, "h0.qkv_b")) << check.failures[0];
  EXPECT_TRUE(check.worst.zero_grad);
  EXPECT_EQ(check.worst.index, hd);
  // The query and value biases are checked like every other element.
  Updates v;
  const auto query = static_cast<std::size_t>(qkv_b.offset);
  v.ref[query] = static_cast<float>(v.initial[query] + v.lr);
  v.run[query] = static_cast<float>(v.initial[query] + 1.01 * v.lr);
  EXPECT_FALSE(v.check().pass());
}

TEST(VerifyUpdates, ZeroGradientBoundIsLrPerStepForTheFirstSteps) {
  const std::vector<double> one = {1e-3};
  EXPECT_NEAR(zero_gradient_update_bound(one, 0.9, 0.95), 1e-3, 1e-15);  // m̂/√v̂ = sign g
  const std::vector<double> three = {1e-3, 1e-3, 1e-3};
  const double b = zero_gradient_update_bound(three, 0.9, 0.95);
  EXPECT_GE(b, 3e-3);
  EXPECT_LT(b, 3.5e-3);
}

TEST(VerifyUpdates, OnlyTheKeyPartOfQkvBiasHasZeroGradient) {
  const Updates u;
  const std::int64_t hd = u.full.config().head_dim();
  const model::TensorSpec& qkv_b = u.full["h1.qkv_b"];
  EXPECT_FALSE(zero_gradient_element(qkv_b, 0, u.full.config()));
  EXPECT_TRUE(zero_gradient_element(qkv_b, hd, u.full.config()));
  EXPECT_TRUE(zero_gradient_element(qkv_b, 3 * hd + 2 * hd - 1, u.full.config()));
  EXPECT_FALSE(zero_gradient_element(qkv_b, 3 * hd + 2 * hd, u.full.config()));
  EXPECT_FALSE(zero_gradient_element(u.full["h1.qkv_w"], hd * u.full.config().d_model, u.full.config()));
}

// ---------------------------------------------------------------- samples ---

struct Schedule {
  std::vector<std::vector<std::int64_t>> expected = {{4, 1, 7, 2}, {0, 5, 3, 6}, {9, 8, 10, 11}};
  std::vector<std::int64_t> epochs = {0, 0, 1};
  std::vector<nlohmann::json> schedule, metrics;
  Schedule() {
    for (std::int64_t s = 0; s < 3; ++s) {
      const auto& e = expected[static_cast<std::size_t>(s)];
      schedule.push_back({{"step", s}, {"epoch", epochs[static_cast<std::size_t>(s)]},
                          {"samples", {{e[0]}, {e[1], e[2], e[3]}}}});
      metrics.push_back({{"step", s}, {"loss", 5.0}});
    }
  }
  CheckResult check() const { return check_samples(expected, epochs, schedule, metrics); }
};

TEST(VerifySamples, ExactlyTheScheduledSamplesOncePerStep) {
  const CheckResult c = Schedule().check();
  EXPECT_TRUE(c.pass()) << c.failures[0];
}

TEST(VerifySamples, BrokenSchedulesFailNamingStepAndSample) {
  const auto expect_failure = [](const Schedule& s, const std::string& text) {
    const CheckResult c = s.check();
    EXPECT_FALSE(c.pass()) << text;
    EXPECT_TRUE(mentions(c.failures, text)) << text << " not in: " << (c.failures.empty() ? "" : c.failures[0]);
  };
  Schedule duplicated;
  duplicated.schedule.insert(duplicated.schedule.begin() + 2, duplicated.schedule[1]);
  expect_failure(duplicated, "schedule.jsonl: step 1 appears more than once");
  Schedule missing;
  missing.schedule.erase(missing.schedule.begin() + 1);
  expect_failure(missing, "schedule.jsonl: step 1 missing");
  Schedule swapped;
  std::swap(swapped.schedule[0], swapped.schedule[1]);
  expect_failure(swapped, "schedule.jsonl: step 0 out of order");
  Schedule substituted;
  substituted.schedule[2]["samples"][1][0] = 3;
  expect_failure(substituted, "step 2: sample 3 is not in the step's batch");
  expect_failure(substituted, "step 2: sample 8 of the step's batch not trained");
  Schedule twice;
  twice.schedule[0]["samples"][1][1] = 4;
  expect_failure(twice, "step 0: sample 4 trained 2 times");
  Schedule epoch;
  epoch.schedule[2]["epoch"] = 0;
  expect_failure(epoch, "step 2 has epoch 0");
  Schedule metrics_missing;
  metrics_missing.metrics.pop_back();
  expect_failure(metrics_missing, "metrics.jsonl: step 2 missing");
}

// ---------------------------------------------------------------- holders ---

class VerifyHolders : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("ntp_verify_holders_" + std::to_string(::getpid()) + "_" +
                                        ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_ / "hashes");
    // 2 replicas x 2 ranks; replica 0 splits units [0, h) / [h, n), replica 1 by parity.
    for (int rank = 0; rank < 4; ++rank) {
      const int replica = rank / 2, slot = rank % 2;
      StateHashes h;
      const std::array<std::int64_t, 3> counts = {config_.heads, config_.ffn(), config_.padded_vocab};
      for (std::size_t k = 0; k < 3; ++k) {
        for (std::int64_t u = 0; u < counts[k]; ++u) {
          const bool mine = replica == 0 ? (u < counts[k] / 2) == (slot == 0) : (u % 2 == slot);
          if (mine) h.units[k].push_back({u, 1000 * k + static_cast<std::uint64_t>(u)});
        }
      }
      h.replicated = 42;
      write(rank, replica, slot, 2, h);
    }
  }
  void TearDown() override { fs::remove_all(dir_); }

  void write(int rank, int replica, int slot, std::int64_t step, const StateHashes& h) {
    nlohmann::json j = h.to_json();
    j["rank"] = rank;
    j["replica"] = replica;
    j["slot"] = slot;
    j["step"] = step;
    j["epoch"] = 0;
    std::ofstream(path(rank)) << j.dump() << "\n";
  }
  fs::path path(int rank) const { return dir_ / "hashes" / ("rank-" + std::to_string(rank) + ".json"); }
  nlohmann::json read(int rank) const { return nlohmann::json::parse(std::ifstream(path(rank))); }
  void rewrite(int rank, const nlohmann::json& j) const { std::ofstream(path(rank)) << j.dump() << "\n"; }
  CheckResult check() const { return check_holders(dir_, 3, config_); }

  model::GptConfig config_ = model::testing::small_test_config();
  fs::path dir_;
};

TEST_F(VerifyHolders, IdenticalHoldersPass) {
  const CheckResult c = check();
  EXPECT_TRUE(c.checked);
  EXPECT_TRUE(c.pass()) << c.failures[0];
  EXPECT_EQ(c.details["complete_replicas"], nlohmann::json::parse("[0, 1]"));
}

TEST_F(VerifyHolders, NotCheckedWithoutHashes) {
  fs::remove_all(dir_ / "hashes");
  const CheckResult c = check();
  EXPECT_FALSE(c.checked);
  EXPECT_TRUE(c.pass());
  EXPECT_NE(c.note.find("no hashes/"), std::string::npos);
}

TEST_F(VerifyHolders, OneUnitChangedNamesKindUnitAndRanks) {
  nlohmann::json j = read(3);  // replica 1, slot 1: odd units
  j["neurons"][2][1] = "00000000deadbeef";  // neuron unit 5
  rewrite(3, j);
  const CheckResult c = check();
  ASSERT_FALSE(c.pass());
  EXPECT_TRUE(mentions(c.failures, "neurons unit 5: holders differ: rank 0 holds")) << c.failures[0];
  EXPECT_TRUE(mentions(c.failures, "rank 3 holds 00000000deadbeef")) << c.failures[0];
}

TEST_F(VerifyHolders, ReplicatedChangedNamesTheRank) {
  nlohmann::json j = read(1);
  j["replicated"] = "0000000000000043";
  rewrite(1, j);
  const CheckResult c = check();
  ASSERT_FALSE(c.pass());
  EXPECT_TRUE(mentions(c.failures, "replicated tensors differ: ranks 0, 2, 3 hold 000000000000002a; rank 1 holds "
                                   "0000000000000043"))
      << c.failures[0];
}

TEST_F(VerifyHolders, WrongStepFails) {
  nlohmann::json j = read(2);
  j["step"] = 1;
  rewrite(2, j);
  const CheckResult c = check();
  EXPECT_TRUE(mentions(c.failures, "rank-2.json: rank 2 ends at step 1, the run's last step is 2"));
}

TEST_F(VerifyHolders, AUnitHeldTwiceInAReplicaFails) {
  nlohmann::json j = read(0);
  j["heads"].push_back({config_.heads - 1, "0000000000000000"});
  rewrite(0, j);
  const CheckResult c = check();
  EXPECT_TRUE(mentions(c.failures, "replica 0: heads unit " + std::to_string(config_.heads - 1) + " held by ranks 0, 1"));
}

// Rank 3 wrote its file at the end, was then lost (SIGSTOP, fenced) and the
// survivors recovered in epoch 1: rank 2 now holds every unit of replica 1.
// The epoch-0 file is left out, not read as a second holder; a file of the
// last epoch that disagrees still fails.
TEST_F(VerifyHolders, AFileFromBeforeTheLastRecoveryIsLeftOut) {
  for (int rank : {0, 1}) {
    nlohmann::json j = read(rank);
    j["epoch"] = 1;
    rewrite(rank, j);
  }
  nlohmann::json whole = read(2);
  const nlohmann::json other = read(3);
  for (const char* kind : {"heads", "neurons", "vocab"})
    for (const auto& unit : other[kind]) whole[kind].push_back(unit);
  whole["epoch"] = 1;
  rewrite(2, whole);
  CheckResult c = check();
  EXPECT_TRUE(c.pass()) << c.failures[0];
  EXPECT_NE(c.note.find("hashes/rank-3.json (epoch 0)"), std::string::npos) << c.note;
  EXPECT_EQ(c.details["left_out"].size(), 1u);
  // Without the epochs the stale file is a second holder: the check catches it.
  nlohmann::json stale = read(3);
  stale["epoch"] = 1;
  rewrite(3, stale);
  c = check();
  EXPECT_TRUE(mentions(c.failures, "held by ranks 2, 3")) << (c.failures.empty() ? "" : c.failures[0]);
}

TEST_F(VerifyHolders, AReplicaWithoutOneRanksFileIsIncompleteNotWrong) {
  fs::remove(path(3));
  CheckResult c = check();
  EXPECT_TRUE(c.pass()) << c.failures[0];
  EXPECT_NE(c.note.find("replica 1 (rank 2)"), std::string::npos) << c.note;
  EXPECT_NE(c.note.find("did not finish"), std::string::npos) << c.note;
  fs::remove(path(1));
  c = check();
  EXPECT_TRUE(mentions(c.failures, "no replica has a hash for every unit"));
}

// Pipeline stages: ranks 4-7 hold stage 1 of the same two replicas (pp 2),
// with other blocks, so other unit and replicated hashes; GPT-2's last stage
// holds a copy of the first stage's wte, so its vocabulary hashes are stage
// 0's. Units compare within a stage, the tied copy with the first stage.
TEST_F(VerifyHolders, StagesCompareWithinAStageAndTheTiedCopyWithTheFirst) {
  for (int rank = 0; rank < 4; ++rank) {
    nlohmann::json j = read(rank);
    j["stage"] = 0;
    rewrite(rank, j);
    for (const char* kind : {"heads", "neurons"}) {
      for (auto& unit : j[kind]) unit[1] = fmt::format("{:016x}", 7000 + unit[0].get<std::int64_t>());
    }
    j["replicated"] = "0000000000000063";
    j["rank"] = rank + 4;
    j["stage"] = 1;
    rewrite(rank + 4, j);
  }
  CheckResult c = check_holders(dir_, 3, config_, 2);
  EXPECT_TRUE(c.pass()) << c.failures[0];
  // Read without their stage, stage 1's files disagree with stage 0's.
  for (int rank = 4; rank < 8; ++rank) {
    nlohmann::json j = read(rank);
    j.erase("stage");
    rewrite(rank, j);
  }
  c = check_holders(dir_, 3, config_, 2);
  EXPECT_TRUE(mentions(c.failures, "replicated tensors differ")) << c.failures.size();
  EXPECT_TRUE(mentions(c.failures, "heads unit 0: holders differ"));
  for (int rank = 4; rank < 8; ++rank) {
    nlohmann::json j = read(rank);
    j["stage"] = 1;
    rewrite(rank, j);
  }
  // The tied copy one ulp away from the first stage's wte.
  nlohmann::json copy = read(5);  // replica 0, slot 1 of stage 1
  copy["vocab"][0][1] = "00000000deadbeef";
  rewrite(5, copy);
  c = check_holders(dir_, 3, config_, 2);
  ASSERT_FALSE(c.pass());
  EXPECT_TRUE(mentions(c.failures, "stage 0 vocab unit 32: holders differ: ranks 1, 2, 6 hold")) << c.failures[0];
  EXPECT_TRUE(mentions(c.failures, "rank 5 holds 00000000deadbeef")) << c.failures[0];
  // Llama's last stage holds its own LM head: compared within stage 1 only.
  model::GptConfig llama = model::testing::llama_test_config();
  llama.heads = config_.heads;
  llama.kv_heads = config_.heads;
  llama.ffn_hidden = config_.ffn();
  const CheckResult own = check_holders(dir_, 3, llama, 2);
  EXPECT_TRUE(mentions(own.failures, "stage 1 vocab unit 32: holders differ: rank 6 holds 00000000000007f0; rank 5 holds")) << own.failures[0];
  EXPECT_FALSE(mentions(own.failures, "stage 0 vocab unit"));
  // A file of a stage the run does not have (pp 2: stages 0 and 1) fails.
  nlohmann::json third = read(4);
  third["stage"] = 2;
  rewrite(4, third);
  c = check_holders(dir_, 3, config_, 2);
  EXPECT_TRUE(mentions(c.failures, "rank-4.json: rank 4 names stage 2, the run has 2 (parallel.pp)"));
  third["stage"] = 1;
  rewrite(4, third);
  // A stage-1 rank missing leaves its replica incomplete in that stage.
  fs::remove(path(7));
  c = check_holders(dir_, 3, config_, 2);
  EXPECT_NE(c.note.find("stage 1"), std::string::npos) << c.note;
}

// ---------------------------------------------------------------- verdict ---

// A result as verify_run leaves it after `steps` clean steps: every check run
// and passed, the worst update element `ratio` x its bound in a tensor of
// `elements` with `over` elements over their bound.
VerifyResult passing_result(std::int64_t steps, const std::string& tensor, double ratio, std::int64_t over,
                            std::int64_t elements) {
  VerifyResult r;
  r.pass = true;
  r.steps = steps;
  for (std::int64_t s = 0; s < steps; ++s) {
    r.loss.steps.push_back({s, 4.0, 4.0});
    r.grad_norm.steps.push_back({s, 1.0, 1.0});
  }
  ElementDiff small{"h0.ln1_w", 3, 1e-3, 1e-3, 1e-6, false};
  small.elements = 64;
  ElementDiff worst{tensor, 17, 1e-3 + ratio * 1e-6, 1e-3, 1e-6, false};
  worst.over_bound = over;
  worst.elements = elements;
  r.updates.tensors = {small, worst};
  r.updates.worst = worst;
  return r;
}

TEST(VerifyVerdict, PassSaysStepsChecksAndTheWorstUpdateAgainstTheAllowance) {
  VerifyResult r = passing_result(30, "h0.fc2_wt", 2.5, 1, 589824);
  EXPECT_EQ(verdict_line(r), "verify: pass — 30 steps, 4 checks, worst update 2.5× its bound on 1 of 589,824 "
                             "elements of h0.fc2_wt, within the 0.1 % allowance");
  // Without hashes/ the holder check did not run, and the line says so.
  r.holders.checked = false;
  r.holders.note = "no hashes/ in the run directory";
  EXPECT_EQ(verdict_line(r), "verify: pass — 30 steps, 3 checks (holders not checked), worst update 2.5× its bound "
                             "on 1 of 589,824 elements of h0.fc2_wt, within the 0.1 % allowance");
}

TEST(VerifyVerdict, PassWordingForNoOutliersAndForSeveral) {
  VerifyResult r = passing_result(1, "h1.qkv_w", 0.42, 0, 1234567);
  EXPECT_EQ(verdict_line(r), "verify: pass — 1 step, 4 checks, worst update 0.42× its bound, in h1.qkv_w");
  r = passing_result(1, "h1.qkv_w", 0, 0, 1234567);  // a single-process run: bit-identical
  EXPECT_EQ(verdict_line(r), "verify: pass — 1 step, 4 checks, every update exactly the replay's");
  r = passing_result(3, "h1.qkv_w", 3.1, 12, 1234567);
  r.updates.tensors[0].over_bound = 1;  // another tensor's outlier
  r.skipped_steps = {2};
  EXPECT_EQ(verdict_line(r), "verify: pass — 3 steps (1 without update), 4 checks, worst update 3.1× its bound, "
                             "12 of 1,234,567 elements of h1.qkv_w over it, within the 0.1 % allowance (as are the "
                             "outliers of 1 other tensor)");
}

TEST(VerifyVerdict, AFailedUpdateNamesTheTensorAndItsCounts) {
  VerifyResult r = passing_result(30, "h0.fc2_wt", 9.87, 589000, 589824);
  r.pass = false;
  r.updates.tensors[1].fails = true;
  r.updates.failures = {"h0.fc2_wt: 589000 of 589824 elements changed differently from the replay (...)"};
  r.failures = r.updates.failures;
  EXPECT_EQ(verdict_line(r), "verify: FAIL — 30 steps, 1 of 4 checks failed (updates): h0.fc2_wt: 589,000 of "
                             "589,824 elements over their bound (589 allowed), worst 9.87× at element 17");
}

TEST(VerifyVerdict, TheFirstFailingCheckComesFirstAndTheRestAreCounted) {
  VerifyResult r = passing_result(30, "h0.fc2_wt", 0.5, 0, 589824);
  r.pass = false;
  r.loss.failed = 1;
  r.holders.failures = {"neurons unit 5: holders differ: rank 3 holds 0123456789abcdef; ranks 0, 1 hold "
                        "fedcba9876543210"};
  r.failures = {"step 4: loss 4.1 in metrics.jsonl, 4.2 in the replay (relative diff 0.0238 > 1e-05)",
                r.holders.failures[0]};
  EXPECT_EQ(verdict_line(r), "verify: FAIL — 30 steps, 2 of 4 checks failed (loss and grad norm, holders): step 4: "
                             "loss 4.1 in metrics.jsonl, 4.2 in the replay (relative diff 0.0238 > 1e-05); 1 more "
                             "failure in verify.json");
  r.loss.failed = 0;
  r.failures.erase(r.failures.begin());
  EXPECT_EQ(verdict_line(r), "verify: FAIL — 30 steps, 1 of 4 checks failed (holders): neurons unit 5: holders "
                             "differ: rank 3 holds 0123456789abcdef; ranks 0, 1 hold fedcba9876543210");
}

// From the check itself: a 1 % error in one tensor, and a NaN.
TEST(VerifyVerdict, NamesTheTensorCompareUpdatesFailed) {
  Updates u;
  u.set_update("h0.fc1_w", 1.01);
  VerifyResult r;
  r.steps = 1;
  r.updates = u.check();
  r.failures = r.updates.failures;
  const std::string line = verdict_line(r);
  EXPECT_EQ(line.rfind("verify: FAIL — 1 step, 1 of 3 checks failed (updates): h0.fc1_w: ", 0), 0u) << line;
  EXPECT_NE(line.find(" of 7,744 elements over their bound (7 allowed), worst "), std::string::npos) << line;
  u.run[static_cast<std::size_t>(u.full["h0.fc2_wt"].offset + 2)] = std::nanf("");
  r.updates = u.check();
  r.failures = r.updates.failures;
  EXPECT_NE(verdict_line(r).find("h0.fc1_w: "), std::string::npos) << verdict_line(r);
  EXPECT_NE(verdict_line(r).find("(and 1 more tensor)"), std::string::npos) << verdict_line(r);
  u.set_update("h0.fc1_w", 1.0);
  r.updates = u.check();
  EXPECT_NE(verdict_line(r).find("h0.fc2_wt: 1 of "), std::string::npos) << verdict_line(r);
  EXPECT_NE(verdict_line(r).find("element 2 is NaN in the run"), std::string::npos) << verdict_line(r);
}

TEST(VerifyVerdict, TheFullResultGoesToVerifyJson) {
  const fs::path dir = fs::temp_directory_path() / ("ntp_verify_json_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  VerifyResult r = passing_result(30, "h0.fc2_wt", 2.5, 1, 589824);
  write_verify_json(dir, r);
  const nlohmann::json j = nlohmann::json::parse(std::ifstream(dir / "verify.json"));
  EXPECT_EQ(j["verify"], "pass");
  EXPECT_EQ(j["tensors"].size(), 2u);  // the detail, not just the line's fields
  EXPECT_EQ(j["worst_update"]["elements"], 589824);
  EXPECT_FALSE(fs::exists(dir / "verify.json.partial"));
  fs::remove_all(dir);
  EXPECT_THROW(write_verify_json(dir, r), std::runtime_error);  // names the file it could not write
}

}  // namespace
}  // namespace ntp::train
