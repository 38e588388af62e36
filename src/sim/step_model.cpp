// Step-time model (formulas and sources: docs/sim.md, "Step-time model").
#include "sim/step_model.h"

#include "layout/job_layout.h"
#include "layout/unit_costs.h"

#include <algorithm>
#include <cmath>
#include <limits>

namespace ntp::sim {
namespace {

// Ring all-reduce (or reduce-scatter + all-gather): each GPU sends and
// receives 2 (g - 1) / g of the buffer.
double ring_factor(double g) { return g > 1.0 ? 2.0 * (g - 1.0) / g : 0.0; }

// The layouts of one kind for a TP group of k of n slots (slots k..n-1
// failed), from the layout library as the trainer plans them: replica 0 is
// healthy (its pre-sync plan is the reshard to degree k), replica 1 runs at k
// (its layout is what the group computes). With k = n, one healthy replica.
layout::JobLayout kind_layouts(const StageUnits& kind, int n, int k) {
  layout::JobConfig c;
  c.units = kind.units;
  c.tp = n;
  c.replicas = k < n ? 2 : 1;
  c.align = kind.align;
  for (int slot = k; slot < n; ++slot) c.failed[1].push_back(slot);
  return layout::plan_job(c);
}

// The busiest GPU's pre-sync traffic (elements sent or received, the larger)
// when a healthy replica reshards: summed per slot over the unit kinds.
double busiest_reshard(const std::vector<StageUnits>& kinds, const std::vector<layout::JobLayout>& jobs,
                       int n) {
  std::vector<double> sent(static_cast<std::size_t>(n), 0.0);
  std::vector<double> received(sent.size(), 0.0);
  for (std::size_t i = 0; i < kinds.size(); ++i) {
    for (const layout::SlotTransfer& t : jobs[i].replica(0).pre_sync) {
      const double elements = static_cast<double>(t.units.size()) * kinds[i].elements;
      sent[static_cast<std::size_t>(t.from)] += elements;
      received[static_cast<std::size_t>(t.to)] += elements;
    }
  }
  return std::max(*std::max_element(sent.begin(), sent.end()),
                  *std::max_element(received.begin(), received.end()));
}

}  // namespace

// What a unit of one kind costs in a stage's compute: forward FLOPs per token
// (x3 with the backward), how many of its phases a stage runs (layers per
// stage; the LM head's 1/pp share), and its width in the GEMMs it feeds
// (a head is head_dim columns, a neuron or a vocabulary row one).
struct StepModel::KindCost {
  StageUnits units;
  double flops = 0;
  double phases = 0;
  layout::Unit width = 1;
};

std::vector<StepModel::KindCost> StepModel::kind_costs() const {
  const double h = s_.model.hidden;
  const std::vector<StageUnits> kinds = stage_units(s_);
  return {{kinds[0], (8.0 * h * h + 4.0 * s_.model.seq_len * h) / s_.model.heads, layers_per_stage_,
           s_.model.hidden / s_.model.heads},                          // QKV, proj, scores, AV
          {kinds[1], 4.0 * h, layers_per_stage_, 1},                   // fc1 row + fc2 column
          {kinds[2], 2.0 * h, 1.0 / s_.parallel.pp, 1}};               // LM-head row
}

std::vector<StageUnits> stage_units(const Scenario& s) {
  const double h = s.model.hidden;
  const double head_dim = h / s.model.heads;
  const double layers_per_stage = static_cast<double>(s.model.layers) / s.parallel.pp;
  return {{s.model.heads, layers_per_stage * 4.0 * h * head_dim, 1},           // QKV rows + proj columns
          {s.ffn(), layers_per_stage * 2.0 * h, s.parallel.align},             // fc1 row + fc2 column
          {s.model.vocab, h / s.parallel.pp, s.parallel.align}};               // LM-head rows, over stages
}

namespace {

// One phase of a group: the busiest GPU's FLOPs per token at aligned speed,
// a GPU whose shard is not a multiple of `gemm_align` columns wide running at
// `unaligned` of it (layout::phase_load with those speeds).
double phase_busiest(const layout::ReplicaLayout& l, double flops, layout::Unit width,
                     const EfficiencySpec& e, const std::vector<double>& speeds) {
  std::vector<double> pace(l.active.size(), 1.0);
  for (std::size_t i = 0; i < l.active.size(); ++i) {
    const layout::Unit columns = l.slots[static_cast<std::size_t>(l.active[i])].size() * width;
    pace[i] = (speeds.empty() ? 1.0 : speeds[i]) * (columns % e.gemm_align_elements == 0 ? 1.0 : e.unaligned_gemm);
  }
  return layout::phase_load(l, flops, pace).busiest;
}

}  // namespace

StepModel::StepModel(const Scenario& s)
    : s_(s),
      tp_(s.parallel.tp),
      m_(static_cast<double>(s.model.global_batch_tokens) /
         (static_cast<double>(s.model.seq_len) * s.model.micro_batch * s.dp())),
      b_(static_cast<double>(s.parallel.pp - 1) / s.parallel.virtual_stages),
      layers_per_stage_(static_cast<double>(s.model.layers) / s.parallel.pp),
      tokens_mb_(static_cast<double>(s.model.seq_len) * s.model.micro_batch),
      flop_rate_(s.cluster.peak_tflops * 1e12 * s.efficiency.gemm),
      nvlink_Bps_(s.cluster.nvlink_gbps * 1e9 / 2.0 * s.efficiency.nvlink),
      nic_Bps_(s.cluster.nic_gbps * 1e9 / 8.0 * s.efficiency.nic),
      reshard_elems_(static_cast<std::size_t>(tp_ + 1), 0.0),
      compute_s_(static_cast<std::size_t>(tp_ + 1), 0.0),
      sync_elems_(static_cast<std::size_t>(tp_ + 1), 0.0) {
  const std::vector<KindCost> costs = kind_costs();
  std::vector<StageUnits> kinds;
  for (const KindCost& c : costs) kinds.push_back(c.units);
  for (int k = 1; k <= tp_; ++k) {
    const auto i = static_cast<std::size_t>(k);
    std::vector<layout::JobLayout> jobs;
    double flops = 0.0;
    for (const KindCost& c : costs) {
      jobs.push_back(kind_layouts(c.units, tp_, k));
      const layout::JobLayout& job = jobs.back();
      flops += c.phases * phase_busiest(job.replica(job.num_replicas() - 1), c.flops, c.width, s.efficiency, {});
      layout::Unit largest = 0;
      for (const layout::IntervalSet& part : job.sync_partition) largest = std::max(largest, part.size());
      sync_elems_[i] += static_cast<double>(largest) * c.units.elements;
    }
    compute_s_[i] = 3.0 * tokens_mb_ * flops / flop_rate_;
    if (k < tp_) reshard_elems_[i] = busiest_reshard(kinds, jobs, tp_);
  }
}

double StepModel::compute_s(int k) const {
  if (k <= 0) return std::numeric_limits<double>::infinity();
  return compute_s_[static_cast<std::size_t>(std::min(k, tp_))];
}

double StepModel::ideal_compute_s(int k) const {
  double flops = 0.0;
  for (const KindCost& c : kind_costs()) flops += c.phases * static_cast<double>(c.units.units) * c.flops / k;
  return 3.0 * tokens_mb_ * flops / flop_rate_;
}

double StepModel::compute_with_speeds_s(const std::vector<double>& speeds, bool weighted) const {
  double flops = 0.0;
  for (const KindCost& c : kind_costs()) {
    layout::JobConfig config;
    config.units = c.units.units;
    config.tp = tp_;
    config.replicas = 1;
    config.align = c.units.align;
    if (weighted) config.speeds[0] = speeds;
    const layout::JobLayout job = layout::plan_job(config);
    flops += c.phases * phase_busiest(job.replica(0), c.flops, c.width, s_.efficiency, speeds);
  }
  return 3.0 * tokens_mb_ * flops / flop_rate_;
}

double StepModel::tp_comm_s(int k) const {
  // Megatron TP: two all-reduces of the [tokens, hidden] activation in the
  // forward pass of a layer and two in the backward pass.
  const double bytes = tokens_mb_ * s_.model.hidden * s_.model.act_bytes;
  return 4.0 * layers_per_stage_ * ring_factor(k) * bytes / nvlink_Bps_;
}

double StepModel::p2p_s(int k) const {
  if (s_.parallel.pp == 1) return 0.0;
  // Each GPU sends its 1/k slice of the activation forward and its gradient
  // backward, once per virtual stage.
  const double bytes = tokens_mb_ * s_.model.hidden * s_.model.act_bytes / k;
  return 2.0 * s_.parallel.virtual_stages * bytes / nic_Bps_;
}

double StepModel::microbatch_s(int k, double speedup) const {
  return compute_s(k) / speedup + (1.0 - s_.efficiency.tp_overlap) * tp_comm_s(k) + p2p_s(k);
}

double StepModel::stage_params(int k) const {
  // A core slot of degree K holds its part of the sync partition S(U, K).
  return sync_elems_[static_cast<std::size_t>(std::clamp(k, 1, tp_))];
}

double StepModel::dp_sync_s(int sync_tp) const {
  return ring_factor(s_.dp()) * stage_params(sync_tp) * s_.model.grad_bytes / nic_Bps_ +
         reshard_s(sync_tp);
}

double StepModel::reshard_elements(int sync_tp) const {
  if (sync_tp <= 0 || sync_tp >= tp_) return 0.0;
  return reshard_elems_[static_cast<std::size_t>(sync_tp)];
}

double StepModel::reshard_s(int sync_tp) const {
  // A healthy replica's extra slots send their tails to the core slots before
  // the reduction and take them back after (post_sync, the same volume); the
  // busiest GPU's NVLink sets the time. (A degraded replica at k = K has no
  // extra slot; one at K < k < n moves less than a healthy one.)
  return 2.0 * reshard_elements(sync_tp) * s_.model.grad_bytes / nvlink_Bps_;
}

double StepModel::dp_exposed_s(int sync_tp) const {
  // The sync overlaps the last microbatch's backward pass (2/3 of its time),
  // and at most the fraction dp_overlap of it is ever hidden.
  const double sync = dp_sync_s(sync_tp);
  const double window = 2.0 / 3.0 * microbatch_s(tp_);
  return std::max(sync - window, (1.0 - s_.efficiency.dp_overlap) * sync);
}

double StepModel::step_s(int sync_tp) const {
  return (m_ + b_) * microbatch_s(tp_) + dp_exposed_s(sync_tp);
}

double StepModel::needed_speedup(int k) const {
  if (k >= tp_) return 1.0;
  const double left = microbatch_s(tp_) - (microbatch_s(k) - compute_s(k));  // time left for compute
  return left > 0.0 ? compute_s(k) / left : std::numeric_limits<double>::infinity();
}

double StepModel::stage_speed(int k, double speedup) const {
  if (k <= 0) return 0.0;
  return microbatch_s(tp_) / microbatch_s(k, speedup);
}

double StepModel::proportional_share(double speed) const {
  // A replica whose slowest stage runs at `speed` finishes x microbatches in
  // (x + b) tau / speed; equal to the healthy (m + b) tau when x = (m + b) speed - b.
  const double x = (m_ + b_) * speed - b_;
  return std::clamp(x / m_, 0.0, 1.0);
}

StepBreakdown StepModel::healthy() const {
  StepBreakdown r;
  const double h = s_.model.hidden;
  const double l = s_.model.layers;
  const double sl = s_.model.seq_len;
  r.microbatches = m_;
  r.compute_s = compute_s(tp_);
  r.tp_comm_s = tp_comm_s(tp_);
  r.tp_exposed_s = (1.0 - s_.efficiency.tp_overlap) * r.tp_comm_s;
  r.p2p_s = p2p_s(tp_);
  r.microbatch_s = microbatch_s(tp_);
  r.bubble_s = b_ * r.microbatch_s;
  r.dp_sync_s = dp_sync_s(tp_);
  r.dp_exposed_s = dp_exposed_s(tp_);
  r.step_s = step_s(tp_);
  // Narayanan et al. (2021), eq. 3 without recomputation, generalised to any FFN width.
  r.flops_per_token =
      3.0 * (l * (8.0 * h * h + 4.0 * sl * h + 4.0 * h * s_.ffn()) + 2.0 * h * s_.model.vocab);
  r.tokens_per_s = static_cast<double>(s_.model.global_batch_tokens) / r.step_s;
  r.mfu = r.flops_per_token * r.tokens_per_s /
          (static_cast<double>(s_.cluster.gpus) * s_.cluster.peak_tflops * 1e12);
  r.params = l * (4.0 * h * h + 2.0 * h * s_.ffn()) + h * s_.model.vocab;
  return r;
}

}  // namespace ntp::sim
