#pragma once
// The boost-and-rebalance policy: one pure implementation shared by the trainer
// (batch policy `proportional`, power.mode), the simulator (policy `ntp-pw`) and
// `ntp power plan`. No I/O, no global state.
//
// A domain is n GPUs joined by NVLink running one TP group. When only k of them
// are active, each survivor does n/k of the work it did at TP n, so it needs a
// per-GPU speed of n/k (relative to running at TDP) to keep pace with healthy
// replicas — or whatever the caller knows it needs: the simulator's step
// model (units split unevenly: the busiest GPU of a TP-30 group holds 5 of 128
// heads, and needs 1.14x, not 32/30), or the trainer's measured step times. The failed GPUs no longer draw power: the domain budget
// n * tdp + headroom is shared by the k survivors, up to each device's maximum,
// and never beyond what reaching n/k needs. What the budget cannot cover, the
// batch shares rebalance: a replica's share is proportional to its effective
// speed speedup / need (k/n * speedup for the need n/k), so every replica's
// step takes the same time.
//
// Formulas: docs/power.md.
#include <vector>

namespace ntp::power {

// Speed of one GPU as a function of its power limit p, relative to running at
// TDP: speed(p) = (p / tdp_w)^alpha for p <= max_frac * tdp_w.
struct DevicePowerModel {
  double tdp_w = 1000.0;
  double max_frac = 1.3;  // per-device maximum limit = max_frac * tdp_w
  double alpha = 0.65;    // speed-vs-power exponent near TDP
};

// What stopped a boost short of its need: nothing (the need is met), the
// per-device maximum, or the domain's budget shared by the survivors.
enum class BoostCap { none, device_max, domain_budget };
const char* to_string(BoostCap cap) noexcept;

// What the policy decides for one domain.
struct DomainBoost {
  double limit_w = 0.0;     // per-GPU power limit of the active GPUs
  double speedup = 0.0;     // per-GPU speed it buys, relative to TDP
  double need = 0.0;        // the speed the domain needed (>= 1; 0 when it sits out)
  bool need_met = false;    // speedup == need
  BoostCap cap = BoostCap::none;  // what binds when the need is not met
};

// The policy for a domain of n GPUs with k active that needs per-GPU speed
// `need` (relative to TDP; values below 1 count as 1, NaN or a need <= 0
// means n/k, +infinity is never met) to keep pace: the limit reaching the need,
// capped by max_frac * tdp_w and by the budget (n * tdp_w + headroom_w) / k.
// k >= n -> {tdp_w, 1, 1, met}; k <= 0 -> all 0. O(1), noexcept.
DomainBoost boost_to_need(int n, int k, double need, double headroom_w,
                          const DevicePowerModel& m) noexcept;

// One kind of unit a TP group splits (attention heads, FFN neurons, vocabulary
// rows): how many there are, and the work of one in a step (any unit, the same
// for every kind).
struct UnitWork {
  long count = 0;
  double cost = 0.0;
};

// The modelled need of a domain of n GPUs with k active: the work of its
// busiest GPU over a healthy GPU's. The replica layout gives every active GPU
// floor(U/k) or ceil(U/k) units of each kind, so the busiest does
// sum(cost * ceil(count/k)) against sum(cost * ceil(count/n)) at TP n (128
// heads at TP 30 of 32: 5 against 4, where n/k counts 32/30). Work replicated on every
// GPU (norms, embeddings) and the communication are left out: the step time
// of a GPU is taken as proportional to its share of the split work.
// k >= n -> 1; k <= 0 -> 0. Throws std::invalid_argument naming `work` when a
// count or cost is negative or not finite, or when the healthy GPU does no work.
double busiest_work_need(const std::vector<UnitWork>& work, int n, int k);

// Per-GPU speed-up (relative to TDP) that the policy gives a domain of n GPUs
// with k active, when the domain budget is n * tdp_w + headroom_w:
//   min(n/k, (min(budget/k, max_frac * tdp_w) / tdp_w)^alpha).
// k == n -> exactly 1.0 (healthy domains run at TDP: headroom is kept for
// degraded domains, and a healthy domain needs no more than speed 1);
// k <= 0 -> 0.0 (the replica sits out). When the budget covers the need, the
// result is exactly n/k. Negative headroom counts as 0. Undefined model values
// (tdp_w <= 0, max_frac < 1, alpha <= 0) are the caller's to reject: see
// validate(). O(1), no allocation, noexcept.
double domain_speedup(int n, int k, double headroom_w, const DevicePowerModel& m) noexcept;

// The power limit (W) the policy sets on each active GPU of such a domain:
// tdp_w * speedup^(1/alpha), i.e. min(tdp_w * (n/k)^(1/alpha), budget/k,
// max_frac * tdp_w); k * limit never exceeds the domain budget. 0 when k <= 0;
// tdp_w when k >= n.
double domain_limit_w(int n, int k, double headroom_w, const DevicePowerModel& m) noexcept;

struct ReplicaBoost {
  int active = 0;        // k: active GPUs of the replica's domain (0 = sits out)
  double limit_w = 0.0;  // per-GPU power limit in that domain (0 when it sits out)
  double speedup = 0.0;  // modelled per-GPU speed relative to TDP
  long share = 0;        // sequences of the global batch per step
  double need = 0.0;     // the speed it needed (n/k unless given)
  BoostCap cap = BoostCap::none;  // what kept the speed-up below the need
};

struct BoostPlan {
  std::vector<ReplicaBoost> replicas;  // one per entry of `active`, same order
};

// Limits, speed-ups and `proportional` batch shares for one k per replica.
// Shares are integers summing exactly to global_batch, proportional to each
// replica's effective speed speedup / need (a replica whose need is met counts
// exactly 1.0), by largest remainder with ties going to the lower replica index.
// Throws std::invalid_argument naming the field (n, active[i], headroom_w,
// global_batch, tdp_w, max_frac, alpha) on bad input, and when global_batch > 0
// but every replica sits out.
BoostPlan plan_boost(int n, const std::vector<int>& active, double headroom_w, long global_batch,
                     const DevicePowerModel& m);
// The same with the speed each replica needs (`needs[i]`, see boost_to_need;
// empty = n/k for every replica). Throws std::invalid_argument naming `needs`
// when its size is neither 0 nor active.size().
BoostPlan plan_boost(int n, const std::vector<int>& active, const std::vector<double>& needs,
                     double headroom_w, long global_batch, const DevicePowerModel& m);

// `proportional` shares without power boost (power off): weights k/n.
// Same rounding, validation and guarantees as plan_boost.
std::vector<long> shares_without_boost(int n, const std::vector<int>& active, long global_batch);

// Largest-remainder apportionment: integers summing exactly to total,
// proportional to weights (>= 0, finite), ties to the lower index. The primitive
// behind every batch policy (`fixed` is weight 1 per participating replica).
// Throws std::invalid_argument if a weight is negative or not finite, if total
// is outside [0, 2^53], or if total > 0 and every weight is 0.
std::vector<long> apportion(const std::vector<double>& weights, long total);

// Throws std::invalid_argument naming the field unless tdp_w > 0,
// 1 <= max_frac, 0 < alpha, all finite.
void validate(const DevicePowerModel& m);

}  // namespace ntp::power
