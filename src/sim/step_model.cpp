// Step-time model (formulas and sources: docs/sim.md, "Step-time model").
#include "sim/step_model.h"

#include "layout/replica_layout.h"

#include <algorithm>
#include <cmath>
#include <limits>

namespace ntp::sim {
namespace {

double ceil_div(double units, int k) { return std::ceil(units / k); }

// Ring all-reduce (or reduce-scatter + all-gather): each GPU sends and
// receives 2 (g - 1) / g of the buffer.
double ring_factor(double g) { return g > 1.0 ? 2.0 * (g - 1.0) / g : 0.0; }

// The busiest GPU's pre-sync traffic (elements sent or received, the larger)
// when a healthy replica of n slots reshards to degree K: the layout
// library's plan for each unit kind, summed per slot.
double busiest_reshard(const std::vector<StageUnits>& kinds, int n, int sync_tp) {
  std::vector<int> all(static_cast<std::size_t>(n));
  for (int i = 0; i < n; ++i) all[static_cast<std::size_t>(i)] = i;
  std::vector<double> sent(all.size(), 0.0);
  std::vector<double> received(all.size(), 0.0);
  for (const StageUnits& kind : kinds) {
    const layout::ReplicaLayout l = layout::replica_layout(kind.units, n, all, sync_tp);
    for (const layout::SlotTransfer& t : l.pre_sync) {
      const double elements = static_cast<double>(t.units.size()) * kind.elements;
      sent[static_cast<std::size_t>(t.from)] += elements;
      received[static_cast<std::size_t>(t.to)] += elements;
    }
  }
  return std::max(*std::max_element(sent.begin(), sent.end()),
                  *std::max_element(received.begin(), received.end()));
}

}  // namespace

std::vector<StageUnits> stage_units(const Scenario& s) {
  const double h = s.model.hidden;
  const double head_dim = h / s.model.heads;
  const double layers_per_stage = static_cast<double>(s.model.layers) / s.parallel.pp;
  return {{s.model.heads, layers_per_stage * 4.0 * h * head_dim},  // QKV rows + proj columns
          {s.ffn(), layers_per_stage * 2.0 * h},                   // fc1 row + fc2 column
          {s.model.vocab, h / s.parallel.pp}};                     // LM-head rows, spread over stages
}

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
      reshard_elems_(static_cast<std::size_t>(tp_ + 1), 0.0) {
  const std::vector<StageUnits> kinds = stage_units(s);
  for (int k = 1; k < tp_; ++k) {
    reshard_elems_[static_cast<std::size_t>(k)] = busiest_reshard(kinds, tp_, k);
  }
}

double StepModel::compute_s(int k) const {
  const double h = s_.model.hidden;
  const double sl = s_.model.seq_len;
  const double heads = s_.model.heads;
  const double ffn = s_.ffn();
  const double vocab = s_.model.vocab;
  // Forward FLOPs per token; backward is twice that (x3 in total).
  const double per_head = (8.0 * h * h + 4.0 * sl * h) / heads;  // QKV, proj, scores, AV
  const double per_neuron = 4.0 * h;                              // fc1 row + fc2 column
  const double per_row = 2.0 * h;                                 // LM-head row
  const double layer_flops = per_head * ceil_div(heads, k) + per_neuron * ceil_div(ffn, k);
  const double vocab_flops = per_row * ceil_div(vocab, k) / s_.parallel.pp;
  return 3.0 * tokens_mb_ * (layers_per_stage_ * layer_flops + vocab_flops) / flop_rate_;
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
  const double h = s_.model.hidden;
  const double head_dim = h / s_.model.heads;
  const double per_head = 4.0 * h * head_dim;  // QKV rows + proj columns
  const double per_neuron = 2.0 * h;           // fc1 row + fc2 column
  return layers_per_stage_ *
             (per_head * ceil_div(s_.model.heads, k) + per_neuron * ceil_div(s_.ffn(), k)) +
         h * ceil_div(s_.model.vocab, k) / s_.parallel.pp;
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
