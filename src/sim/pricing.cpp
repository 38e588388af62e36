#include "sim/pricing.h"

namespace ntp::sim {

Pricing::Pricing(const Scenario& s)
    : model_(s),
      steps_(model_),
      tables_{make_policy_table(Policy::kDpDrop, s, model_),
              make_policy_table(Policy::kSpares, s, model_),
              make_policy_table(Policy::kCkptRestart, s, model_),
              make_policy_table(Policy::kNtp, s, model_),
              make_policy_table(Policy::kNtpPw, s, model_)},
      options_{s.policies.pack, s.policies.fixed_global_batch} {}

bool Pricing::uses_spares(Policy p) const {
  return p == Policy::kSpares || options_.fixed_global_batch;
}

double Pricing::value(Policy p, const ReplicaView& raw, const ReplicaView& spared) const {
  if (p == Policy::kCkptRestart) return 1.0;
  return throughput(uses_spares(p) ? spared : raw, table(p), steps_, options_);
}

}  // namespace ntp::sim
