#pragma once
// The need from measured step times: what a degraded replica's compute time
// per sample, against a healthy replica's, says about the per-GPU speed it
// needs, and the rule that turns a noisy series of such observations into a
// few re-plans. Pure (no clock, no I/O): the trainer feeds it the times every
// rank receives in the step's commit record, so every rank takes the same
// decision. Formulas and the argument that it does not oscillate:
// docs/power.md, "The need from measured step times".
#include <vector>

namespace ntp::power {

// One replica in one step: its active GPUs (0 = sits out), the samples it
// computed, the compute seconds of its slowest rank (waiting for other
// replicas left out) and the per-GPU speed-up it ran at (the plan in force).
struct ReplicaStepTime {
  int active = 0;
  long samples = 0;
  double compute_s = 0.0;
  double speedup = 1.0;
};

// The need each replica showed in one step. Its seconds per sample over the
// healthy replicas' (their mean, each taken at TDP: times their speed-up),
// times the speed-up it ran at: a GPU at speed s does a TDP GPU's work in 1/s
// of the time, so rho = t/t_healthy measured at s means need rho * s. A
// healthy replica (active >= n) shows 1. NaN where there is nothing to
// measure: the replica sits out or took no sample or its time is not a
// finite positive number; and for every replica when no healthy replica did.
std::vector<double> observed_needs(int n, const std::vector<ReplicaStepTime>& step);

// The smoothing and hysteresis of the measured need (power.need_smoothing,
// power.need_tolerance).
struct NeedRule {
  // Weight of one step's observation in the estimate, in (0, 1]:
  // estimate += smoothing * (observed - estimate).
  double smoothing = 0.2;
  // Re-plan when some replica's estimate is more than this fraction away from
  // the need in force (>= 0): |estimate - planned| > tolerance * planned.
  double tolerance = 0.05;
  // The first steps of a configuration are not observed (warm caches, first
  // use of the groups).
  int skip_steps = 1;
};

// The tracking state of one configuration, the same on every rank.
struct NeedTrack {
  std::vector<double> estimate;  // smoothed need per replica
  std::vector<double> planned;   // the need the plan in force was made for
  int steps_seen = 0;
};

// The state at a (re)configuration: both the estimate and the planned need
// start at `start` (the modelled needs, or 1 for a healthy replica).
NeedTrack start_tracking(const std::vector<double>& start);

// Folds one step's observations (observed_needs; NaN leaves a replica as it
// is) into the estimate. Returns true when the plan should be made again:
// some replica's estimate left the tolerance band around its planned need.
// The caller then plans with `track.estimate`, which this call has already
// copied into `track.planned`. Throws std::invalid_argument naming the field
// when the rule is out of range or `observed` has the wrong size.
bool track_need(NeedTrack& track, const std::vector<double>& observed, const NeedRule& rule);

// Throws std::invalid_argument naming the field unless 0 < smoothing <= 1,
// tolerance >= 0 and skip_steps >= 0, all finite.
void validate(const NeedRule& rule);

}  // namespace ntp::power
