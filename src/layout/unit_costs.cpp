#include "layout/unit_costs.h"

#include <stdexcept>
#include <string>

#include "layout/errors.h"

namespace ntp::layout {

UnitCosts unit_costs(const ModelShape& s) {
  require_positive(s.d_model, "model shape: d_model");
  require_positive(s.heads, "model shape: heads");
  require_positive(s.ffn, "model shape: ffn");
  require_positive(s.vocab, "model shape: vocab");
  require_positive(s.seq_len, "model shape: seq_len");
  require_positive(s.layers, "model shape: layers");
  const Unit kv = s.kv_heads == 0 ? s.heads : s.kv_heads;
  if (kv < 0 || s.heads % kv != 0 || s.d_model % s.heads != 0)
    throw std::invalid_argument("model shape: heads (" + std::to_string(s.heads) +
                                ") must be a multiple of kv_heads (" + std::to_string(kv) +
                                ") and divide d_model (" + std::to_string(s.d_model) + ")");
  const auto d = static_cast<double>(s.d_model);
  const double hd = d / static_cast<double>(s.heads);
  const auto q = static_cast<double>(s.heads / kv);
  const auto t = static_cast<double>(s.seq_len);
  const double head_forward = 2 * d * hd * (q + 2) + 2 * d * hd * q + 2 * q * hd * t;
  const double neuron_forward = (s.gated_ffn ? 6 : 4) * d;
  return {3 * head_forward, 3 * neuron_forward, 3 * 2 * d};
}

PhaseLoad phase_load(const ReplicaLayout& layout, double unit_cost,
                     const std::vector<double>& speeds) {
  if (layout.dropped) throw std::invalid_argument("phase_load: the replica sits out");
  if (!speeds.empty() && speeds.size() != layout.active.size())
    throw std::invalid_argument("phase_load: " + std::to_string(speeds.size()) + " speeds for " +
                                std::to_string(layout.active.size()) + " active slots");
  PhaseLoad load;
  double units = 0, speed = 0;
  for (size_t i = 0; i < layout.active.size(); ++i) {
    const double s = speeds.empty() ? 1.0 : speeds[i];
    const auto held =
        static_cast<double>(layout.slots[static_cast<size_t>(layout.active[i])].size());
    units += held;
    speed += s;
    if (held * unit_cost / s > load.busiest || load.busiest_slot < 0)
      load = {held * unit_cost / s, 0, layout.active[i]};
  }
  load.ideal = units * unit_cost / speed;
  return load;
}

StepLoad step_load(const ModelShape& shape, const ReplicaLayout& heads,
                   const ReplicaLayout& neurons, const ReplicaLayout& vocab,
                   const std::vector<double>& speeds) {
  const UnitCosts c = unit_costs(shape);
  StepLoad step{phase_load(heads, c.head, speeds), phase_load(neurons, c.neuron, speeds),
                phase_load(vocab, c.vocab_row, speeds)};
  const auto layers = static_cast<double>(shape.layers);
  step.busiest = layers * (step.attention.busiest + step.mlp.busiest) + step.lm_head.busiest;
  step.ideal = layers * (step.attention.ideal + step.mlp.ideal) + step.lm_head.ideal;
  return step;
}

}  // namespace ntp::layout
