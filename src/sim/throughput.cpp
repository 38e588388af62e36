#include "sim/throughput.h"

#include <algorithm>
#include <cmath>

namespace ntp::sim {
namespace {

// The replicas a policy has admitted so far: their worth in healthy replicas
// (each counts its share), the sum of their paces, how many, and the lowest
// degree among them (the job's sync degree).
struct Admitted {
  double capacity = 0.0;
  double speed = 0.0;
  int replicas = 0;
  int sync_tp = 0;
};

// Walks the job's replicas from the healthiest down, as a policy admits them:
// visit(admitted) after each k with replicas; stops when visit returns true.
// Without packing a replica is worth its lowest stage; with packing the
// groups, sorted by k, fill replicas pp at a time. `spare_groups` healthy
// groups join at k = n (whole replicas of pp of them unless packed).
template <class Visit>
void admit(const ReplicaView& view, const PolicyTable& t, bool pack, int spare_groups, Visit visit) {
  const int tp = view.tp();
  const std::vector<int>& hist = pack ? view.groups_with() : view.replicas_with();
  Admitted a;
  a.sync_tp = tp;
  int carry = 0;  // packed groups waiting to fill a replica
  for (int k = tp; k >= 0; --k) {
    int n = hist[static_cast<std::size_t>(k)];
    if (k == tp) n += pack ? spare_groups : spare_groups / view.pp();
    const double share = t.share[static_cast<std::size_t>(k)];
    if (share <= 0.0) return;  // shares only shrink with k
    if (n == 0) continue;
    int replicas = n;
    if (pack) {
      replicas = (carry + n) / view.pp();
      carry = (carry + n) % view.pp();
    }
    if (replicas == 0) continue;
    a.capacity += replicas * share;
    a.speed += replicas * t.speed[static_cast<std::size_t>(k)];
    a.replicas += replicas;
    a.sync_tp = std::min(a.sync_tp, t.run_tp[static_cast<std::size_t>(k)]);
    if (visit(a)) return;
  }
}

double sync_pace(const StepTable& steps, int tp, int sync_tp) {
  return steps.step_s[static_cast<std::size_t>(tp)] / steps.step_s[static_cast<std::size_t>(sync_tp)];
}

// Elastic batch: every replica that trains makes the whole job sync at its
// degree, so the policy stops where admitting more would lower the throughput.
double elastic_throughput(const ReplicaView& view, const PolicyTable& t, const StepTable& steps,
                          bool pack) {
  double best = 0.0;
  admit(view, t, pack, 0, [&](const Admitted& a) {
    best = std::max(best, a.capacity / view.replicas() * sync_pace(steps, view.tp(), a.sync_tp));
    return false;
  });
  return best;
}

// A whole replica's worth less a hair, so that shares summing to the global
// batch in exact arithmetic are not refused for a rounding error.
constexpr double kFullBatchSlack = 1e-9;

// Fixed global batch: the job runs at the healthy pace (synced at the lowest
// degree admitted) once the admitted replicas take dp replicas' worth of
// samples. Short of that, it runs at the pace they allow: the step stretches
// until they take the whole batch, each at its own pace f_r. A replica does
// P f_r - b microbatches in a pipeline of P microbatch times (the bubble b is
// paid at its pace), so the N admitted take dp m when P = (dp m + N b) / sum f_r;
// the step is then P tau + the exposed sync. Replicas are admitted from the
// healthiest down while that helps (a degraded one lowers the sync degree).
double fixed_batch_throughput(const ReplicaView& view, const PolicyTable& t, const StepTable& steps,
                              bool pack, int spare_groups) {
  const int tp = view.tp();
  const double healthy = steps.step_s[static_cast<std::size_t>(tp)];
  const double full_pipeline = steps.microbatches + steps.bubble;  // in microbatch times
  const double tau = steps.pipeline_s / full_pipeline;
  double value = 0.0;
  admit(view, t, pack, spare_groups, [&](const Admitted& a) {
    if (a.capacity >= view.replicas() - kFullBatchSlack) {
      value = std::max(value, sync_pace(steps, tp, a.sync_tp));
      return true;
    }
    const double pipeline =
        std::max(full_pipeline, (view.replicas() * steps.microbatches + a.replicas * steps.bubble) / a.speed);
    const double exposed_sync = steps.step_s[static_cast<std::size_t>(a.sync_tp)] - steps.pipeline_s;
    value = std::max(value, healthy / (pipeline * tau + exposed_sync));
    return false;
  });
  return value;
}

}  // namespace

bool takes_full_batch(const ReplicaView& view, const PolicyTable& t, bool pack, int spare_groups) {
  bool full = false;
  admit(view, t, pack, spare_groups, [&](const Admitted& a) {
    full = a.capacity >= view.replicas() - kFullBatchSlack;
    return full;
  });
  return full;
}

namespace {

// Without packing a spare domain either completes a degraded replica (taking
// the place of its failed domain: the replica then counts 1, not its share)
// or joins others to form a new replica (pp / groups-per-domain of them per
// replica). Completions are taken from the lowest share up; the number taken
// from a block of equal shares is 0, all, or just enough (the cost is linear
// in between), so the minimum is found in O(n).
int spares_unpacked(const ReplicaView& view, const PolicyTable& t, int groups_per_domain) {
  const int tp = view.tp();
  const std::vector<int>& hist = view.replicas_with();
  double shortfall = view.replicas() - kFullBatchSlack;
  for (int k = 0; k <= tp; ++k) shortfall -= hist[static_cast<std::size_t>(k)] * t.share[static_cast<std::size_t>(k)];
  if (shortfall <= 0.0) return 0;
  const auto forming = [&](double left) {  // domains that form replicas covering `left`
    if (left <= 0.0) return 0;
    const auto replicas = static_cast<long>(std::ceil(left));
    return static_cast<int>((replicas * view.pp() + groups_per_domain - 1) / groups_per_domain);
  };
  int best = forming(shortfall);
  int completed = 0;
  double left = shortfall;
  for (int k = 0; k < tp && left > 0.0; ++k) {
    const int n = hist[static_cast<std::size_t>(k)];
    const double gain = 1.0 - t.share[static_cast<std::size_t>(k)];
    if (n == 0 || gain <= 0.0) continue;
    const int enough = std::min(n, static_cast<int>(std::ceil(left / gain)));
    best = std::min(best, completed + enough + forming(left - enough * gain));
    completed += enough;
    left -= enough * gain;
  }
  return best;
}

}  // namespace

StepTable::StepTable(const StepModel& model)
    : step_s(static_cast<std::size_t>(model.tp() + 1), 0.0),
      pipeline_s((model.microbatches() + model.bubble_ratio()) * model.microbatch_s(model.tp())),
      microbatches(model.microbatches()),
      bubble(model.bubble_ratio()) {
  for (int k = 1; k <= model.tp(); ++k) step_s[static_cast<std::size_t>(k)] = model.step_s(k);
}

double throughput(const ReplicaView& view, const PolicyTable& table, const StepTable& steps,
                  const ThroughputOptions& options, int spare_groups) {
  if (options.fixed_global_batch) {
    return fixed_batch_throughput(view, table, steps, options.pack, spare_groups);
  }
  return elastic_throughput(view, table, steps, options.pack);
}

int spares_for_full_batch(const ReplicaView& view, const PolicyTable& table, bool pack,
                          int groups_per_domain) {
  if (!pack) return spares_unpacked(view, table, groups_per_domain);
  // Packed, a spare domain adds groups_per_domain healthy groups wherever
  // they are needed, so the pool needed is the least count that suffices.
  const int upper = (view.groups() + groups_per_domain - 1) / groups_per_domain;
  if (!takes_full_batch(view, table, true, upper * groups_per_domain)) return upper;
  int low = 0;
  int high = upper;
  while (low < high) {
    const int mid = (low + high) / 2;
    if (takes_full_batch(view, table, true, mid * groups_per_domain)) {
      high = mid;
    } else {
      low = mid + 1;
    }
  }
  return low;
}

}  // namespace ntp::sim
