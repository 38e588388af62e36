#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

#include "sim/pricing.h"
#include "sim/timeline.h"
#include "sim/trace.h"
#include "test_scenarios.h"

namespace ntp::sim {
namespace {

std::size_t idx(Policy p) { return static_cast<std::size_t>(p); }

TEST(Timeline, NoFailuresIsFullGoodputForEveryPolicy) {
  Scenario s = testing::small_scenario();
  s.failures.rate_per_gpu_day = 0.0;
  s.policies.ckpt.write_s = 60;  // optimal interval without failures: never checkpoint
  const TimelineResult r = run_timeline(s, Pricing(s), nullptr);
  for (int p = 0; p < kPolicyCount; ++p) {
    EXPECT_DOUBLE_EQ(r.policy[static_cast<std::size_t>(p)].goodput_mean, 1.0) << p;
    EXPECT_DOUBLE_EQ(r.policy[static_cast<std::size_t>(p)].pause_hours_mean, 0.0) << p;
  }
  EXPECT_EQ(r.failures_mean, 0.0);
}

// Little's law / alternating renewal: with failures at rate lambda while up and
// repairs of mean R, the long-run failed fraction is lambda R / (1 + lambda R)
// (~ lambda R when small), for any uptime distribution with that mean.
void expect_littles_law(FailureDist dist, double shape, int blast = 1);

// In steady state each GPU is down independently with probability
// phi = lambda R / (1 + lambda R), so with PP 1 dp-drop keeps (1 - phi)^tp.
TEST(Timeline, DpDropKeepsTheHealthyGroupFraction) {
  Scenario s = testing::small_scenario();
  s.failures.rate_per_gpu_day = 0.024;
  s.failures.hardware_share = 1.0;
  s.failures.hardware_repair = {RepairKind::kExponential, 10.0, 0.0};
  s.policies.compare = {Policy::kDpDrop};
  s.run.duration_days = 3000;
  s.run.bucket_hours = 24 * 30;
  const TimelineResult r = run_timeline(s, Pricing(s), nullptr);
  const double phi = 0.01 / 1.01;
  EXPECT_NEAR(r.policy[idx(Policy::kDpDrop)].goodput_mean, std::pow(1.0 - phi, 8), 0.003);
}

void expect_littles_law(FailureDist dist, double shape, int blast) {
  Scenario s = testing::small_scenario();
  s.failures.blast_radius = blast;  // each failure takes `blast` GPUs: blast x the failed fraction
  s.failures.rate_per_gpu_day = 0.024;  // 1e-3 per GPU-hour
  s.failures.distribution = dist;
  s.failures.weibull_shape = shape;
  s.failures.hardware_share = 0.5;
  s.failures.hardware_repair = {RepairKind::kExponential, 16.0, 0.0};
  s.failures.software_repair = {RepairKind::kFixed, 4.0, 0.0};  // mean repair 10 h
  s.run.duration_days = 3000;
  s.run.bucket_hours = 24 * 30;
  s.policies.compare = {Policy::kNtp};
  const TimelineResult r = run_timeline(s, Pricing(s), nullptr);
  const double lr = 1e-3 * blast * 10.0;
  EXPECT_NEAR(r.failed_fraction_mean / (lr / (1.0 + lr)), 1.0, 0.03);
}

TEST(Timeline, SteadyStateFailedFractionFollowsLittlesLaw) {
  expect_littles_law(FailureDist::kExponential, 1.0);
}

TEST(Timeline, LittlesLawHoldsForWeibullUptimesToo) {
  expect_littles_law(FailureDist::kWeibull, 0.7);
}

TEST(Timeline, LittlesLawScalesWithTheBlastRadius) {
  expect_littles_law(FailureDist::kExponential, 1.0, 4);
}

// ckpt-restart under Poisson failures at job rate L (restart R, compute tau,
// write C, cycle c = tau + C): an up period U ~ Exp(L) commits
// tau * floor(U / c), E = tau q / (1 - q) with q = exp(-L c); a down period
// lasts until R passes without a failure, E = (exp(L R) - 1) / L. Renewal-reward:
// goodput = tau q / (1 - q) * L / exp(L R). ckpt-restart runs on replacement
// hardware, so L = rate * gpus even while the fleet has GPUs down.
double ckpt_renewal_goodput(double rate) {
  const double q = std::exp(-rate * 1.1);
  return 1.0 * q / (1.0 - q) * rate / std::exp(rate * 0.5);
}

TEST(Timeline, CheckpointRestartMatchesItsRenewalFormula) {
  Scenario s = testing::small_scenario();
  s.failures.rate_per_gpu_day = 0.024;  // 1e-3 per GPU-hour
  s.failures.hardware_share = 1.0;
  s.policies.compare = {Policy::kCkptRestart};
  s.policies.ckpt = {1.0, 360.0, 1800.0};  // tau 1 h, write 0.1 h, restart 0.5 h
  s.run.duration_days = 2000;
  s.run.bucket_hours = 24 * 30;
  const double job_rate = 1e-3 * s.cluster.gpus;
  for (const double repair_h : {2.0, 200.0}) {  // 0.2 % and 17 % of the fleet down
    s.failures.hardware_repair = {RepairKind::kFixed, repair_h, 0.0};
    const TimelineResult r = run_timeline(s, Pricing(s), nullptr);
    EXPECT_NEAR(r.policy[idx(Policy::kCkptRestart)].goodput_mean / ckpt_renewal_goodput(job_rate),
                1.0, 0.01)
        << repair_h;
    if (repair_h > 100.0) {
      // Counting only the fleet's up GPUs would be 5 % optimistic here.
      EXPECT_GT(r.failed_fraction_mean, 0.15);
      EXPECT_GT(ckpt_renewal_goodput(job_rate * (1.0 - r.failed_fraction_mean)) /
                    ckpt_renewal_goodput(job_rate),
                1.04);
    }
  }
}

TEST(Timeline, SameSeedSameOutputWhateverTheThreadCount) {
  Scenario s = testing::small_scenario();
  s.failures.rate_per_gpu_day = 0.01;
  s.spares.domains = 2;
  s.run.seeds = 6;
  s.run.threads = 1;
  const Pricing pricing(s);
  const TimelineResult a = run_timeline(s, pricing, nullptr);
  s.run.threads = 4;
  const TimelineResult b = run_timeline(s, pricing, nullptr);
  for (std::size_t p = 0; p < kPolicyCount; ++p) {
    EXPECT_EQ(a.policy[p].goodput_mean, b.policy[p].goodput_mean);
    EXPECT_EQ(a.policy[p].pause_hours_mean, b.policy[p].pause_hours_mean);
  }
  EXPECT_EQ(a.series_mean, b.series_mean);
  EXPECT_EQ(a.failed_series_mean, b.failed_series_mean);
  s.run.seed = 2;
  const TimelineResult c = run_timeline(s, pricing, nullptr);
  EXPECT_NE(a.failed_series_mean, c.failed_series_mean);
}

TEST(Timeline, CheckpointCyclesAreCreditedPerBucketInClosedForm) {
  Scenario s = testing::small_scenario();
  s.failures.rate_per_gpu_day = 0.0;
  s.policies.compare = {Policy::kCkptRestart};
  s.policies.ckpt = {1.0, 3600.0, 900.0};  // 1 h of compute, then 1 h writing: half the time
  s.run.duration_days = 3;
  s.run.bucket_hours = 5;  // buckets cut cycles in the middle
  const TimelineSeed r = run_timeline_seed(s, Pricing(s), nullptr, 0);
  EXPECT_NEAR(r.goodput[idx(Policy::kCkptRestart)], 0.5, 1e-12);
  ASSERT_EQ(r.series.size(), 15u);  // 72 h in 5 h buckets: the last one 2 h
  for (std::size_t b = 0; b + 1 < r.series.size(); ++b) {
    // [5b, 5b + 5) holds 3 compute hours when it starts on a compute hour, else 2.
    const double expected = (b % 2 == 0 ? 3.0 : 2.0) / 5.0;
    EXPECT_NEAR(r.series[b][idx(Policy::kCkptRestart)], expected, 1e-12) << b;
  }
  EXPECT_NEAR(r.series.back()[idx(Policy::kCkptRestart)], 0.5, 1e-12);
}

TEST(Timeline, TinyCheckpointIntervalCostsNoTime) {
  // 1e-7 h between free checkpoints: 7e9 cycles in 30 days, credited in
  // closed form (a loop over cycles would not finish).
  Scenario s = testing::small_scenario();
  s.policies.compare = {Policy::kCkptRestart};
  s.policies.ckpt = {1e-7, 0.0, 3600.0};
  const auto trace = parse_trace("10,0,10\n", "t.csv", s.cluster.gpus);
  const TimelineSeed r = run_timeline_seed(s, Pricing(s), &trace, 0);
  const double T = 720.0;  // only the 1 h restart is lost (and < 1e-7 h of work)
  EXPECT_NEAR(r.goodput[idx(Policy::kCkptRestart)], (T - 1.0) / T, 1e-9);
  EXPECT_LT(r.ckpt_lost_hours, 1e-7 * (1.0 + 1e-6));
}

TEST(Timeline, SeedsBeyondOneBlockAreSummedInSeedOrder) {
  // 300 seeds run as blocks of 256: the means are the plain seed-order means.
  Scenario s = testing::small_scenario();
  s.failures.rate_per_gpu_day = 0.01;
  s.run.seeds = 300;
  s.run.duration_days = 5;
  const Pricing pricing(s);
  const TimelineResult r = run_timeline(s, pricing, nullptr);
  PolicyValues sum{};
  double worst = 1.0;
  for (int i = 0; i < s.run.seeds; ++i) {
    const TimelineSeed seed = run_timeline_seed(s, pricing, nullptr, i);
    for (std::size_t p = 0; p < kPolicyCount; ++p) sum[p] += seed.goodput[p];
    worst = std::min(worst, seed.goodput[idx(Policy::kDpDrop)]);
    if (i == 0) {
      EXPECT_EQ(seed.series, r.first_seed.series);
    }
  }
  for (std::size_t p = 0; p < kPolicyCount; ++p) {
    EXPECT_DOUBLE_EQ(r.policy[p].goodput_mean, sum[p] / s.run.seeds) << p;
  }
  EXPECT_EQ(r.policy[idx(Policy::kDpDrop)].goodput_min, worst);
  EXPECT_LT(worst, 1.0);  // failures happened: the check is not vacuous
}

// Each element draws from streams of its own: the spare pool (its elements
// come after the job's) leaves the job's failure history as it was.
TEST(Timeline, SparesSweepLeavesTheJobsFailureHistoryUnchanged) {
  Scenario s = testing::small_scenario();
  s.failures.rate_per_gpu_day = 0.02;
  s.run.duration_days = 20;
  const auto history = [&](int spares, int seed) {
    s.spares.domains = spares;
    return run_timeline_seed(s, Pricing(s), nullptr, seed);
  };
  for (int seed = 0; seed < 3; ++seed) {
    const TimelineSeed none = history(0, seed);
    ASSERT_GT(none.failures, 10);
    for (const int spares : {1, 4, 16}) {
      const TimelineSeed with = history(spares, seed);
      EXPECT_EQ(with.failure_digest, none.failure_digest) << spares;
      EXPECT_EQ(with.failures, none.failures) << spares;
      EXPECT_EQ(with.failed_fraction, none.failed_fraction) << spares;
      // ntp does not use spares: its goodput moves only by the rounding of
      // integrals split at the spares' own events.
      EXPECT_NEAR(with.goodput[idx(Policy::kNtp)], none.goodput[idx(Policy::kNtp)], 1e-12);
    }
  }
  // The digest tells histories apart: another seed, or another rate.
  s.spares.domains = 0;
  const std::uint64_t base = history(0, 0).failure_digest;
  EXPECT_NE(history(0, 1).failure_digest, base);
  s.failures.rate_per_gpu_day = 0.021;
  EXPECT_NE(history(0, 0).failure_digest, base);
}

// One failure of GPU 0 at hour 10, back at hour 20, in a 30-day run of 32
// replicas: every policy's goodput has a closed form.
class OneFailure : public ::testing::Test {
 protected:
  void SetUp() override {
    s.policies.ckpt = {4.0, 0.0, 3600.0};
    s.spares.domains = 1;
    s.spares.swap_hours = 1.0;
    trace = parse_trace("hours,gpu,repair_hours\n10,0,10\n", "t.csv", s.cluster.gpus);
  }
  TimelineSeed run() const { return run_timeline_seed(s, Pricing(s), &trace, 0); }

  Scenario s = testing::small_scenario();
  std::vector<TraceFailure> trace;
  const double T = 720.0;
};

TEST_F(OneFailure, EachPolicyLosesWhatTheFormulaSays) {
  const TimelineSeed r = run();
  const Pricing pricing(s);
  EXPECT_NEAR(r.goodput[idx(Policy::kDpDrop)], 1.0 - 10.0 / T / 32.0, 1e-12);
  EXPECT_NEAR(r.goodput[idx(Policy::kSpares)], 1.0 - 1.0 / T / 32.0, 1e-12);
  const StepModel& m = pricing.model();
  const double v = std::max(
      (31.0 + pricing.table(Policy::kNtp).share[7]) / 32.0 * m.step_s(8) / m.step_s(7), 31.0 / 32.0);
  EXPECT_NEAR(r.goodput[idx(Policy::kNtp)], 1.0 - 10.0 / T * (1.0 - v), 1e-12);
  // ckpt-restart: checkpoints at 4 and 8 h; the 2 h since are lost; 1 h restart.
  EXPECT_NEAR(r.goodput[idx(Policy::kCkptRestart)], (T - 3.0) / T, 1e-12);
  EXPECT_NEAR(r.ckpt_lost_hours, 2.0, 1e-12);
  EXPECT_NEAR(r.pause_hours[idx(Policy::kCkptRestart)], 1.0, 1e-9);
  EXPECT_EQ(r.failures, 1);
  EXPECT_EQ(r.peak_failed_gpus, 1);
  EXPECT_EQ(r.spares_needed[idx(Policy::kDpDrop)], 1);
  // PP 1: one spare completes the replica or forms a new one (its share at
  // k = 7 is below 1).
  EXPECT_EQ(r.spares_needed[idx(Policy::kNtp)], 1);
}

TEST_F(OneFailure, BoostEnergyIsTheBoostedGroupsPowerAboveTdpOverItsTime) {
  const TimelineSeed r = run();
  const double extra_w = Pricing(s).table(Policy::kNtpPw).extra_w[7];
  EXPECT_GT(extra_w, 0.0);  // 7 GPUs share 8 x TDP: each above TDP
  EXPECT_NEAR(r.boost_energy_kwh, extra_w * 10.0 / 1000.0, 1e-9);
  EXPECT_EQ(Pricing(s).table(Policy::kNtp).extra_w[7], 0.0);
}

TEST_F(OneFailure, ReconfigurationPausesAreCharged) {
  s.policies.reconfig_s = 360;  // 0.1 h after the failure
  s.policies.rejoin_s = 720;    // 0.2 h after the repair
  const TimelineSeed r = run();
  EXPECT_NEAR(r.pause_hours[idx(Policy::kDpDrop)], 0.3, 1e-9);
  EXPECT_NEAR(r.pause_hours[idx(Policy::kNtp)], 0.3, 1e-9);
  EXPECT_NEAR(r.goodput[idx(Policy::kDpDrop)], 1.0 - (9.9 / 32.0 + 0.3) / T, 1e-12);
}

// With a fixed global batch dp-drop runs at the pace of its 31 replicas
// until the spare arrives (it used to pause), and without a spare for the
// 10 hours of the repair.
TEST_F(OneFailure, FixedGlobalBatchSlowsDpDropUntilTheSpareArrives) {
  s.policies.fixed_global_batch = true;
  ReplicaView v(s.groups(), s.parallel.pp, s.parallel.tp);
  v.set_active(0, 7);
  const double slow = Pricing(s).value(Policy::kDpDrop, v, v);
  ASSERT_GT(slow, 0.9);
  ASSERT_LT(slow, 1.0);
  const TimelineSeed r = run();
  EXPECT_NEAR(r.pause_hours[idx(Policy::kDpDrop)], 0.0, 1e-9);
  EXPECT_NEAR(r.goodput[idx(Policy::kDpDrop)], 1.0 - (1.0 - slow) * 1.0 / T, 1e-12);
  s.spares.domains = 0;
  const TimelineSeed none = run();
  EXPECT_NEAR(none.pause_hours[idx(Policy::kDpDrop)], 0.0, 1e-9);
  EXPECT_NEAR(none.goodput[idx(Policy::kDpDrop)], 1.0 - (1.0 - slow) * 10.0 / T, 1e-12);
}

TEST_F(OneFailure, ShareOfTimeAboveAFailedThreshold) {
  // 1 of 256 GPUs is 0.39 %: above 0.3 % for the 10 hours it is down, never above 0.5 %.
  s.run.thresholds_percent = {0.0, 0.3, 0.5};
  const TimelineSeed r = run();
  ASSERT_EQ(r.above_threshold.size(), 3u);
  EXPECT_NEAR(r.above_threshold[0], 10.0 / T, 1e-12);
  EXPECT_NEAR(r.above_threshold[1], 10.0 / T, 1e-12);
  EXPECT_EQ(r.above_threshold[2], 0.0);
}

// A warm start runs the failure process before time 0, so a short run starts
// in the steady state: its failed fraction is Little's law's from the first
// hour, where a cold start (every GPU new at 0) stays well below it.
TEST(Timeline, WarmStartBeginsInTheSteadyState) {
  Scenario s = testing::small_scenario();
  s.failures.rate_per_gpu_day = 0.024;  // 1e-3 per GPU-hour
  s.failures.hardware_share = 1.0;
  s.failures.hardware_repair = {RepairKind::kFixed, 40.0, 0.0};
  s.run.duration_days = 1;  // shorter than one repair
  s.run.seeds = 400;
  s.run.bucket_hours = 24;
  s.policies.compare = {Policy::kNtp};
  const double steady = 0.04 / 1.04;
  const double cold = run_timeline(s, Pricing(s), nullptr).failed_fraction_mean;
  EXPECT_LT(cold, 0.5 * steady);  // ramps up over the first 40 hours
  s.run.warmup_days = 10;
  const TimelineResult warm = run_timeline(s, Pricing(s), nullptr);
  EXPECT_NEAR(warm.failed_fraction_mean / steady, 1.0, 0.03);
  // Failures before time 0 are not the run's: about rate x GPUs x 24 h of them count.
  EXPECT_NEAR(warm.failures_mean / (1e-3 * 256 * 24 * (1.0 - steady)), 1.0, 0.05);
}

TEST(Timeline, OptimalIntervalCountsOnlyTraceFailuresWithinTheRun) {
  Scenario s = testing::small_scenario();  // 30 days = 720 h
  s.policies.ckpt = {0.0, 60.0, 900.0};    // optimal: sqrt(2 * write * MTBF)
  const auto inside = parse_trace("10,0,1\n", "t.csv", s.cluster.gpus);
  const auto beyond = parse_trace("10,0,1\n5000,1,1\n", "t.csv", s.cluster.gpus);
  const double expected = std::sqrt(2.0 * (60.0 / 3600.0) * 720.0);  // one failure in 720 h
  EXPECT_NEAR(ckpt_interval_hours(s, &inside), expected, 1e-12);
  EXPECT_NEAR(ckpt_interval_hours(s, &beyond), expected, 1e-12);
}

TEST(Trace, BadLinesAreRejectedWithFileAndLine) {
  try {
    parse_trace("1,0,2\n3,99,1\n", "f.csv", 64);
    FAIL();
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("f.csv:2: gpu 99"), std::string::npos);
  }
  EXPECT_THROW(parse_trace("1,0\n", "f.csv", 64), std::invalid_argument);
  EXPECT_THROW(parse_trace("x,0,1\n", "f.csv", 64), std::invalid_argument);
}

}  // namespace
}  // namespace ntp::sim
