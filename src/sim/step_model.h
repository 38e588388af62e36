#pragma once
// Step-time model of one training step for a job whose TP groups may run at
// reduced degree k of n. Every formula and its source is in docs/sim.md
// ("Step-time model"). Pure: built once from a Scenario, then O(1) queries.
#include <vector>

#include "layout/interval_set.h"
#include "sim/scenario.h"

namespace ntp::sim {

// A kind of NTP unit a TP group splits (heads, FFN neurons, vocabulary rows)
// and the parameters (= gradient elements) one unit holds on a pipeline stage.
struct StageUnits {
  layout::Unit units;
  double elements;
  layout::Unit align = 1;  // the layout's block: parallelism.align, 1 for heads
};
// Heads, neurons and vocabulary rows of one stage of the scenario's model.
std::vector<StageUnits> stage_units(const Scenario& s);

// Where the healthy step's time goes (seconds) and what it achieves.
struct StepBreakdown {
  double microbatches = 0;      // per replica per step (m)
  double compute_s = 0;         // per microbatch per stage
  double tp_comm_s = 0;         // per microbatch per stage, before overlap
  double tp_exposed_s = 0;      // per microbatch per stage, after overlap
  double p2p_s = 0;             // pipeline sends per microbatch per stage
  double microbatch_s = 0;      // tau: compute + exposed TP + p2p
  double bubble_s = 0;          // (pp - 1) / virtual_stages * tau
  double dp_sync_s = 0;         // gradient reduce-scatter + all-gather on the NICs
  double dp_exposed_s = 0;      // the part the backward pass does not hide
  double step_s = 0;
  double flops_per_token = 0;   // model FLOPs (forward + backward), Megatron formula
  double tokens_per_s = 0;
  double mfu = 0;               // model FLOPs / (step time * GPUs * peak)
  double params = 0;            // model parameters
};

class StepModel {
 public:
  explicit StepModel(const Scenario& s);

  int tp() const { return tp_; }
  double microbatches() const { return m_; }
  double bubble_ratio() const { return b_; }  // (pp - 1) / virtual_stages
  double nvlink_Bps() const { return nvlink_Bps_; }  // achieved one-direction NVLink bytes/s per GPU
  double nic_Bps() const { return nic_Bps_; }        // achieved NIC bytes/s per GPU

  // Per microbatch, per pipeline stage, on the most loaded GPU of a TP group of
  // k: per phase (attention, MLP, LM head: each ends in a TP all-reduce) the
  // busiest GPU of the layout library's replica layout of k slots, its
  // unaligned GEMMs slowed by efficiency.unaligned_gemm; summed over phases.
  double compute_s(int k) const;
  // The same FLOPs spread evenly over k GPUs, all GEMMs aligned: the ideal.
  double ideal_compute_s(int k) const;
  // The compute of a healthy group (all tp slots) whose GPUs run at `speeds`
  // (one per slot, 1.0 = healthy): `weighted` lays the units out by speed
  // (layout::JobConfig::speeds), else in equal counts. Not O(1): a layout.
  double compute_with_speeds_s(const std::vector<double>& speeds, bool weighted) const;
  double tp_comm_s(int k) const;
  double p2p_s(int k) const;
  // tau(k, s): compute sped up by `speedup` (power boost) + exposed TP + p2p.
  double microbatch_s(int k, double speedup = 1.0) const;

  // Gradient sync of one stage when the job syncs at degree K (= min k):
  // the DP reduction on core slots plus the NVLink reshard of extra units.
  double dp_sync_s(int sync_tp) const;
  double reshard_s(int sync_tp) const;
  // Gradient elements the busiest GPU of a healthy replica sends or receives
  // in the pre-sync reshard to degree K: from the layout library's plan,
  // L(U, all n slots, K), for heads, neurons and vocabulary rows.
  double reshard_elements(int sync_tp) const;
  double dp_exposed_s(int sync_tp) const;
  // Step time when every replica runs its share at the healthy pace.
  double step_s(int sync_tp) const;

  // The compute speed-up a stage at k needs to keep the healthy pace:
  // tau(k, s) = tau(n, 1); +infinity when its communication alone is slower.
  double needed_speedup(int k) const;
  // Pace of a stage at k with boost `speedup`, relative to a healthy stage.
  double stage_speed(int k, double speedup) const;
  // A replica's share of the global batch (relative to healthy) that finishes
  // with the healthy replicas when its slowest stage runs at `speed`.
  double proportional_share(double speed) const;

  StepBreakdown healthy() const;

 private:
  double stage_params(int k) const;  // gradient elements on the most loaded core slot
  struct KindCost;
  std::vector<KindCost> kind_costs() const;

  Scenario s_;
  int tp_;
  double m_;           // microbatches per replica per step
  double b_;           // bubble in microbatch times
  double layers_per_stage_;
  double tokens_mb_;   // tokens per microbatch
  double flop_rate_;   // achieved FLOP/s per GPU
  double nvlink_Bps_;  // achieved one-direction NVLink bytes/s per GPU
  double nic_Bps_;     // achieved NIC bytes/s per GPU
  std::vector<double> reshard_elems_;  // per K = 0..tp, see reshard_elements()
  std::vector<double> compute_s_;      // per k = 0..tp, see compute_s()
  std::vector<double> sync_elems_;     // per K = 0..tp: the largest part of S(U, K), in elements
};

}  // namespace ntp::sim
