#include "sim/pricing.h"

#include <algorithm>

namespace ntp::sim {

Pricing::Pricing(const Scenario& s)
    : model_(s),
      pause_(reconfig_pause(s, model_)),
      steps_(model_),
      tables_{make_policy_table(Policy::kDpDrop, s, model_),
              make_policy_table(Policy::kSpares, s, model_),
              make_policy_table(Policy::kCkptRestart, s, model_),
              make_policy_table(Policy::kNtp, s, model_),
              make_policy_table(Policy::kNtpPw, s, model_)},
      failslow_(s, model_),
      options_{s.policies.pack, s.policies.fixed_global_batch},
      groups_per_domain_(s.groups_per_domain()),
      forming_gain_(std::min(1.0, static_cast<double>(s.groups_per_domain()) / s.parallel.pp)) {}

bool Pricing::uses_spares(Policy p) const {
  return p == Policy::kSpares || options_.fixed_global_batch;
}

double Pricing::value(Policy p, const ReplicaView& raw, const ReplicaView& spared,
                      int free_spare_domains) const {
  if (p == Policy::kCkptRestart) return 1.0;
  const int spare_groups = options_.fixed_global_batch ? free_spare_domains * groups_per_domain_ : 0;
  return throughput(uses_spares(p) ? spared : raw, table(p), steps_, options_, spare_groups);
}

int Pricing::spares_needed(Policy p, const ReplicaView& raw) const {
  if (p == Policy::kCkptRestart) return 0;
  return spares_for_full_batch(raw, table(p), options_.pack, groups_per_domain_);
}

}  // namespace ntp::sim

namespace ntp::sim {

int Pricing::complete_below(Policy p) const {
  const PolicyTable& t = table(p);
  const int tp = static_cast<int>(t.share.size()) - 1;
  if (!options_.fixed_global_batch) return tp;
  int k = tp;
  while (k > 0 && 1.0 - t.share[static_cast<std::size_t>(k - 1)] < forming_gain_) --k;
  return k;
}

}  // namespace ntp::sim
