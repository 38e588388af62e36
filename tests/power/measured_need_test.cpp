// Properties of the need from measured step times: the observation inverts
// the speed model, the smoothed estimate converges to a steady observation
// with a bounded number of re-plans, and noise inside the tolerance band
// never re-plans a settled plan.
#include "power/measured_need.h"

#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <stdexcept>

namespace ntp::power {
namespace {

TEST(ObservedNeeds, TimePerSampleAtTdpOverTheHealthyMean) {
  // Two healthy replicas at 2 and 4 ms per sample (mean 3); the degraded one
  // takes 4.5 ms per sample while boosted to 1.2x: at TDP 5.4 ms, need 1.8.
  const std::vector<double> needs =
      observed_needs(4, {{4, 10, 0.02, 1.0}, {4, 10, 0.04, 1.0}, {3, 8, 0.036, 1.2}, {0, 0, 0.0, 0.0}});
  ASSERT_EQ(needs.size(), 4u);
  EXPECT_EQ(needs[0], 1.0);
  EXPECT_EQ(needs[1], 1.0);
  EXPECT_NEAR(needs[2], 1.8, 1e-12);
  EXPECT_TRUE(std::isnan(needs[3]));  // sits out
}

TEST(ObservedNeeds, IndependentOfTheBoostWhenTheDeviceFollowsTheModel) {
  // A GPU that needs N and runs at speed s takes N/s of a healthy step: the
  // observation is N whatever boost was in force (no feedback loop).
  for (const double s : {1.0, 1.1, 1.37, 2.0}) {
    const double need = 1.6;
    const std::vector<double> o = observed_needs(2, {{2, 5, 0.05, 1.0}, {1, 5, 0.05 * need / s, s}});
    EXPECT_NEAR(o[1], need, 1e-12) << s;
  }
}

TEST(ObservedNeeds, NothingToMeasureIsNaN) {
  // No healthy replica took samples: nothing to compare against.
  for (const double o : observed_needs(4, {{4, 0, 0.01, 1.0}, {3, 5, 0.02, 1.0}})) EXPECT_TRUE(std::isnan(o));
  // A degraded replica with no samples or a time that is not positive.
  const std::vector<double> o = observed_needs(4, {{4, 5, 0.01, 1.0}, {3, 0, 0.02, 1.0}, {3, 5, 0.0, 1.0},
                                                   {3, 5, std::nan(""), 1.0}});
  EXPECT_TRUE(std::isnan(o[1]));
  EXPECT_TRUE(std::isnan(o[2]));
  EXPECT_TRUE(std::isnan(o[3]));
}

TEST(TrackNeed, SkipsTheFirstStepsThenConvergesWithFewReplans) {
  const NeedRule rule{0.5, 0.05, 1};
  std::mt19937_64 rng(7);
  std::uniform_real_distribution<double> start_d(1.0, 3.0);
  for (int trial = 0; trial < 200; ++trial) {
    const double start = start_d(rng);
    const double truth = start_d(rng);
    NeedTrack track = start_tracking({1.0, start});
    EXPECT_FALSE(track_need(track, {1.0, truth}, rule)) << "the first step is skipped";
    EXPECT_EQ(track.estimate[1], start);
    int replans = 0;
    for (int step = 0; step < 60; ++step) replans += track_need(track, {1.0, truth}, rule) ? 1 : 0;
    // The gap (at most 2) halves every step: a step moves the estimate by
    // more than the band (0.05 x a need >= 1) at most log2(2 / 0.05) ~ 5.3
    // times, and what is left after those needs at most two more re-plans.
    EXPECT_LE(replans, 8) << start << " -> " << truth;
    EXPECT_LE(std::abs(track.planned[1] - truth), 0.05 * track.planned[1]);
    EXPECT_NEAR(track.estimate[1], truth, 1e-9);
    EXPECT_EQ(track.planned[0], 1.0);  // the healthy replica never moves
    EXPECT_EQ(replans > 0, std::abs(start - truth) > 0.05 * start) << start << " -> " << truth;
  }
}

TEST(TrackNeed, NoiseInsideTheBandNeverReplansASettledPlan) {
  // Observations within +-delta of the truth, delta < tolerance / (2 + tolerance):
  // the estimate stays in that band, so once settled it never leaves the
  // planned need's tolerance band.
  const NeedRule rule{0.3, 0.1, 0};
  const double truth = 1.5;
  const double delta = 0.045;
  std::mt19937_64 rng(11);
  std::uniform_real_distribution<double> noise(-delta, delta);
  NeedTrack track = start_tracking({truth});
  for (int step = 0; step < 5000; ++step) {
    ASSERT_FALSE(track_need(track, {truth * (1.0 + noise(rng))}, rule)) << step;
  }
  // The same noise with a tolerance below it does re-plan (the check can fail).
  NeedTrack tight = start_tracking({truth});
  int replans = 0;
  for (int step = 0; step < 5000; ++step) replans += track_need(tight, {truth * (1.0 + noise(rng))}, {0.3, 0.005, 0});
  EXPECT_GT(replans, 0);
}

TEST(TrackNeed, NaNLeavesAReplicaAsItIsAndBadRulesAreRefused) {
  NeedTrack track = start_tracking({1.0, 2.0});
  EXPECT_FALSE(track_need(track, {std::nan(""), std::nan("")}, {0.5, 0.05, 0}));
  EXPECT_EQ(track.estimate[1], 2.0);
  EXPECT_THROW(track_need(track, {1.0}, {0.5, 0.05, 0}), std::invalid_argument);
  EXPECT_THROW(track_need(track, {1.0, 1.0}, {0.0, 0.05, 0}), std::invalid_argument);
  EXPECT_THROW(track_need(track, {1.0, 1.0}, {1.5, 0.05, 0}), std::invalid_argument);
  EXPECT_THROW(track_need(track, {1.0, 1.0}, {0.5, -0.1, 0}), std::invalid_argument);
  EXPECT_THROW(track_need(track, {1.0, 1.0}, {0.5, 0.05, -1}), std::invalid_argument);
}

}  // namespace
}  // namespace ntp::power
