#include "sim/throughput.h"

#include <algorithm>

namespace ntp::sim {
namespace {

// Replicas worth training and the TP degree the job syncs at. Without
// packing a replica is worth its lowest stage; with packing the groups,
// sorted by k, fill replicas pp at a time. Every replica that trains makes
// the whole job sync at its degree, so the policy admits replicas from the
// healthiest down and stops where admitting more would lower the throughput.
struct Contribution {
  double replicas = 0.0;
  int sync_tp = 0;
  double throughput = 0.0;  // relative to failure-free (fraction of dp replicas)
};

Contribution contribution(const ReplicaView& view, const PolicyTable& t, const StepTable& steps,
                          bool pack) {
  const int tp = view.tp();
  const double healthy = steps.step_s[static_cast<std::size_t>(tp)];
  const std::vector<int>& hist = pack ? view.groups_with() : view.replicas_with();
  Contribution best;
  double replicas_sum = 0.0;
  int sync_tp = tp;
  int carry = 0;  // packed groups waiting to fill a replica
  for (int k = tp; k >= 0; --k) {
    const int n = hist[static_cast<std::size_t>(k)];
    const double share = t.share[static_cast<std::size_t>(k)];
    if (share <= 0.0) break;  // shares only shrink with k
    if (n == 0) continue;
    int replicas = n;
    if (pack) {
      replicas = (carry + n) / view.pp();
      carry = (carry + n) % view.pp();
    }
    if (replicas == 0) continue;
    replicas_sum += replicas * share;
    sync_tp = std::min(sync_tp, t.run_tp[static_cast<std::size_t>(k)]);
    const double value = replicas_sum / view.replicas() * healthy /
                         steps.step_s[static_cast<std::size_t>(sync_tp)];
    if (value > best.throughput) best = {replicas_sum, sync_tp, value};
  }
  return best;
}

double fixed_batch_throughput(const ReplicaView& view, const PolicyTable& t,
                              const StepTable& steps) {
  // The job needs every replica; the slowest one sets the pace.
  const auto& hist = view.replicas_with();
  int low = 0;
  while (hist[static_cast<std::size_t>(low)] == 0) ++low;
  const auto k = static_cast<std::size_t>(low);
  if (!t.participates(low) || t.speed[k] <= 0.0) return 0.0;
  const int sync = t.run_tp[k];
  const double healthy = steps.step_s[static_cast<std::size_t>(view.tp())];
  const double exposed = steps.step_s[static_cast<std::size_t>(sync)] - steps.pipeline_s;
  return healthy / (steps.pipeline_s / t.speed[k] + exposed);
}

}  // namespace

StepTable::StepTable(const StepModel& model)
    : step_s(static_cast<std::size_t>(model.tp() + 1), 0.0),
      pipeline_s((model.microbatches() + model.bubble_ratio()) * model.microbatch_s(model.tp())) {
  for (int k = 1; k <= model.tp(); ++k) step_s[static_cast<std::size_t>(k)] = model.step_s(k);
}

double throughput(const ReplicaView& view, const PolicyTable& table, const StepTable& steps,
                  const ThroughputOptions& options) {
  if (options.fixed_global_batch) return fixed_batch_throughput(view, table, steps);
  return contribution(view, table, steps, options.pack).throughput;
}

}  // namespace ntp::sim
