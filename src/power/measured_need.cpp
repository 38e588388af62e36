// The need from measured step times (see measured_need.h and docs/power.md).
#include "power/measured_need.h"

#include <cmath>
#include <limits>
#include <stdexcept>
#include <string>

namespace ntp::power {
namespace {

constexpr double kNone = std::numeric_limits<double>::quiet_NaN();

bool measurable(const ReplicaStepTime& r) {
  return r.active > 0 && r.samples > 0 && std::isfinite(r.compute_s) && r.compute_s > 0.0 &&
         std::isfinite(r.speedup) && r.speedup > 0.0;
}

// Seconds per sample of a TDP GPU's work: the time scaled by the speed it ran at.
double tdp_seconds_per_sample(const ReplicaStepTime& r) {
  return r.compute_s * r.speedup / static_cast<double>(r.samples);
}

}  // namespace

std::vector<double> observed_needs(int n, const std::vector<ReplicaStepTime>& step) {
  double healthy_sum = 0.0;
  int healthy = 0;
  for (const ReplicaStepTime& r : step) {
    if (r.active >= n && measurable(r)) {
      healthy_sum += tdp_seconds_per_sample(r);
      ++healthy;
    }
  }
  std::vector<double> needs(step.size(), kNone);
  if (healthy == 0) return needs;
  const double reference = healthy_sum / healthy;
  for (std::size_t i = 0; i < step.size(); ++i) {
    if (!measurable(step[i])) continue;
    needs[i] = step[i].active >= n ? 1.0 : tdp_seconds_per_sample(step[i]) / reference;
  }
  return needs;
}

void validate(const NeedRule& rule) {
  if (!std::isfinite(rule.smoothing) || rule.smoothing <= 0.0 || rule.smoothing > 1.0) {
    throw std::invalid_argument("need_smoothing must be in (0, 1]");
  }
  if (!std::isfinite(rule.tolerance) || rule.tolerance < 0.0) {
    throw std::invalid_argument("need_tolerance must be finite and >= 0");
  }
  if (rule.skip_steps < 0) throw std::invalid_argument("skip_steps must be >= 0");
}

NeedTrack start_tracking(const std::vector<double>& start) { return {start, start, 0}; }

bool track_need(NeedTrack& track, const std::vector<double>& observed, const NeedRule& rule) {
  validate(rule);
  if (observed.size() != track.estimate.size() || track.planned.size() != track.estimate.size()) {
    throw std::invalid_argument("observed: " + std::to_string(observed.size()) + " replicas, the track has " +
                                std::to_string(track.estimate.size()));
  }
  if (track.steps_seen++ < rule.skip_steps) return false;
  bool replan = false;
  for (std::size_t i = 0; i < observed.size(); ++i) {
    if (std::isnan(observed[i])) continue;
    double& e = track.estimate[i];
    e += rule.smoothing * (observed[i] - e);
    replan = replan || std::abs(e - track.planned[i]) > rule.tolerance * track.planned[i];
  }
  if (replan) track.planned = track.estimate;
  return replan;
}

}  // namespace ntp::power
