// Scenario helpers and the cross-field checks (see scenario.h).
#include "sim/scenario.h"

#include <cmath>
#include <stdexcept>
#include <string>

namespace ntp::sim {
namespace {

[[noreturn]] void reject(const std::string& key, const std::string& what) {
  throw std::invalid_argument(key + ": " + what);
}

std::string str(long v) { return std::to_string(v); }

}  // namespace

double RepairSpec::mean_hours() const {
  switch (kind) {
    case RepairKind::kUniform: return 0.5 * (a_hours + b);
    case RepairKind::kFixed:
    case RepairKind::kExponential:
    case RepairKind::kLognormal: return a_hours;
  }
  return a_hours;
}

double FailureSpec::mean_repair_hours() const {
  return hardware_share * hardware_repair.mean_hours() +
         (1.0 - hardware_share) * software_repair.mean_hours();
}

const char* policy_name(Policy p) {
  switch (p) {
    case Policy::kDpDrop: return "dp-drop";
    case Policy::kSpares: return "spares";
    case Policy::kCkptRestart: return "ckpt-restart";
    case Policy::kNtp: return "ntp";
    case Policy::kNtpPw: return "ntp-pw";
  }
  return "?";
}

Policy policy_from_name(const std::string& name) {
  for (int i = 0; i < kPolicyCount; ++i) {
    const auto p = static_cast<Policy>(i);
    if (name == policy_name(p)) return p;
  }
  throw std::invalid_argument("unknown policy '" + name +
                              "' (dp-drop, spares, ckpt-restart, ntp, ntp-pw)");
}

void validate(const Scenario& s) {
  const int tp = s.parallel.tp;
  const int d = s.cluster.domain_size;
  if (tp > d) reject("parallelism.tp", str(tp) + " exceeds cluster.domain_size " + str(d));
  if (d % tp != 0) {
    reject("parallelism.tp", str(tp) + " does not divide cluster.domain_size " + str(d));
  }
  if (s.cluster.gpus % d != 0) {
    reject("cluster.gpus", str(s.cluster.gpus) + " is not a multiple of domain_size " + str(d));
  }
  if (s.groups() % s.parallel.pp != 0) {
    reject("parallelism.pp", "the job's " + str(s.groups()) + " TP groups do not split into " +
                                 str(s.parallel.pp) + " stages evenly");
  }
  if (s.parallel.dp != 0 && s.parallel.dp != s.dp()) {
    reject("parallelism.dp", str(s.parallel.dp) + " != gpus / (tp * pp) = " + str(s.dp()));
  }
  if (s.model.layers % s.parallel.pp != 0) {
    reject("parallelism.pp", str(s.parallel.pp) + " does not divide model.layers " +
                                 str(s.model.layers));
  }
  if ((s.model.layers / s.parallel.pp) % s.parallel.virtual_stages != 0) {
    reject("parallelism.virtual_stages", "layers per stage (" + str(s.model.layers / s.parallel.pp) +
                                             ") is not a multiple of " +
                                             str(s.parallel.virtual_stages));
  }
  if (s.model.hidden % s.model.heads != 0) {
    reject("model.heads", str(s.model.heads) + " does not divide model.hidden");
  }
  if (tp > s.model.heads) reject("parallelism.tp", "exceeds model.heads (one head per GPU at least)");
  if (tp > s.ffn()) reject("parallelism.tp", "exceeds the FFN width (one neuron per GPU at least)");
  if (tp > s.model.vocab) reject("parallelism.tp", "exceeds model.vocab (one row per GPU at least)");
  if (s.parallel.min_tp > tp) reject("parallelism.min_tp", "exceeds parallelism.tp");
  if (s.parallel.tp_step > tp) reject("parallelism.tp_step", "exceeds parallelism.tp");
  if (s.model.global_batch_tokens % s.model.seq_len != 0) {
    reject("model.global_batch_tokens", "is not a multiple of model.seq_len");
  }
  const std::int64_t seqs = s.model.global_batch_tokens / s.model.seq_len;
  if (seqs < static_cast<std::int64_t>(s.dp()) * s.model.micro_batch) {
    reject("model.global_batch_tokens", "gives fewer microbatches than DP replicas (" +
                                            str(static_cast<long>(seqs)) + " sequences, dp " +
                                            str(s.dp()) + ")");
  }
  const int blast = s.failures.blast_radius;
  if (blast != d && (blast > tp || tp % blast != 0)) {
    reject("failures.blast_radius", str(blast) + " must divide parallelism.tp (" + str(tp) +
                                        ") or equal cluster.domain_size");
  }
  if (s.failures.distribution == FailureDist::kWeibull && !s.failures.trace.empty()) {
    reject("failures.trace", "a trace replaces the sampled distribution; drop one of them");
  }
  if (s.run.mode == Mode::kTimeline && s.run.bucket_hours > s.run.duration_days * 24.0) {
    reject("run.bucket_hours", "is longer than run.duration_days");
  }
}

}  // namespace ntp::sim
