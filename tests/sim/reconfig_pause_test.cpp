// The reconfiguration pause from the layout library's transition plans: the
// rejoining GPU receives exactly its healthy shard over NVLink, a failure
// pulls the lost shard from the peer replica over the NICs, times follow the
// bandwidths and the state size, a constant in the scenario overrides the
// plan, and the timeline charges what the plan says.
#include "sim/reconfig_pause.h"

#include <gtest/gtest.h>

#include "sim/pricing.h"
#include "sim/timeline.h"
#include "sim/trace.h"
#include "test_scenarios.h"

namespace ntp::sim {
namespace {

Scenario planned() {
  Scenario s = testing::small_scenario();
  s.policies.reconfig_s.reset();
  s.policies.rejoin_s.reset();
  return s;
}

// Parameters of one healthy GPU's shard of a stage (every unit count of the
// small scenario divides by TP 8).
double healthy_shard_elements(const Scenario& s) {
  double e = 0.0;
  for (const StageUnits& k : stage_units(s)) e += static_cast<double>(k.units / s.parallel.tp) * k.elements;
  return e;
}

TEST(ReconfigPause, ARejoiningGpuReceivesItsShardFromItsOwnReplica) {
  const Scenario s = planned();
  const StepModel m(s);
  const ReconfigPause p = reconfig_pause(s, m);
  const double shard_bytes = healthy_shard_elements(s) * s.model.state_bytes;
  EXPECT_DOUBLE_EQ(p.rejoin_bytes_up, shard_bytes);
  EXPECT_EQ(p.rejoin_bytes_out, 0.0);
  EXPECT_DOUBLE_EQ(p.rejoin_move_s, shard_bytes / m.nvlink_Bps());
  EXPECT_DOUBLE_EQ(p.rejoin_s, s.policies.protocol_s + p.rejoin_move_s);
}

TEST(ReconfigPause, AFailurePullsTheLostShardFromThePeerAndRedoesTheStep) {
  const Scenario s = planned();
  const StepModel m(s);
  const ReconfigPause p = reconfig_pause(s, m);
  // The lost shard crosses to the 7 survivors: the busiest GPU moves at
  // least a 7th of it and at most all of it over its NIC.
  const double shard_bytes = healthy_shard_elements(s) * s.model.state_bytes;
  EXPECT_GE(p.failure_bytes_out, shard_bytes / 7.0);
  EXPECT_LE(p.failure_bytes_out, shard_bytes);
  EXPECT_GT(p.failure_move_s, p.failure_bytes_out / m.nic_Bps() * (1.0 - 1e-12));
  EXPECT_DOUBLE_EQ(p.failure_s, s.policies.protocol_s + p.failure_move_s + m.healthy().step_s);
}

TEST(ReconfigPause, TimesFollowTheStateSizeAndTheBandwidths) {
  Scenario s = planned();
  const ReconfigPause base = reconfig_pause(s, StepModel(s));
  s.model.state_bytes *= 2;
  const ReconfigPause doubled = reconfig_pause(s, StepModel(s));
  EXPECT_NEAR(doubled.failure_move_s, 2.0 * base.failure_move_s, 1e-12 * base.failure_move_s);
  EXPECT_NEAR(doubled.rejoin_move_s, 2.0 * base.rejoin_move_s, 1e-12 * base.rejoin_move_s);
  s = planned();
  s.cluster.nic_gbps *= 4;
  const ReconfigPause fast_nic = reconfig_pause(s, StepModel(s));
  EXPECT_LT(fast_nic.failure_move_s, base.failure_move_s);
  EXPECT_DOUBLE_EQ(fast_nic.rejoin_move_s, base.rejoin_move_s);  // NVLink only
}

TEST(ReconfigPause, AWholeDomainFailureMovesNothingIntoTheDeadGroup) {
  Scenario s = planned();
  s.failures.blast_radius = s.cluster.domain_size;
  const ReconfigPause p = reconfig_pause(s, StepModel(s));
  EXPECT_GT(p.failure_s, s.policies.protocol_s);
  EXPECT_GT(p.rejoin_s, s.policies.protocol_s);
}

TEST(ReconfigPause, ConstantsInTheScenarioOverrideThePlan) {
  Scenario s = planned();
  s.policies.reconfig_s = 60.0;
  s.policies.rejoin_s = 0.0;
  const ReconfigPause p = reconfig_pause(s, StepModel(s));
  EXPECT_EQ(p.failure_s, 60.0);
  EXPECT_EQ(p.rejoin_s, 0.0);
  EXPECT_GT(p.failure_move_s, 0.0);  // still reported
}

TEST(ReconfigPause, TheTimelineChargesThePlannedPauses) {
  Scenario s = planned();
  s.policies.protocol_s = 300.0;  // large enough to see in hours
  const std::vector<TraceFailure> trace =
      parse_trace("hours,gpu,repair_hours\n10,0,10\n", "t.csv", s.cluster.gpus);
  const Pricing pricing(s);
  const TimelineSeed r = run_timeline_seed(s, pricing, &trace, 0);
  const double expected_h = (pricing.pause().failure_s + pricing.pause().rejoin_s) / 3600.0;
  EXPECT_GT(expected_h, 600.0 / 3600.0);
  EXPECT_NEAR(r.pause_hours[static_cast<std::size_t>(Policy::kNtp)], expected_h, 1e-9);
}

}  // namespace
}  // namespace ntp::sim
