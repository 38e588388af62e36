#pragma once
// What a unit of each kind costs, and how busy a replica's slots are in each
// phase of a TP step: for reports (`ntp plan`, later the simulator). Pure.
//
// Phases, and why layouts balance each kind on its own. In a TP step the
// attention block and the MLP block of every layer, and the LM head with its
// cross-entropy, each end in a TP all-reduce (forward and backward: model.cpp),
// which is a barrier. A step therefore takes the SUM over phases of each
// phase's busiest slot, not the busiest slot's summed work. Giving the slots
// that hold an extra head fewer neurons (balancing work across kinds) lowers
// nothing in the attention phase, whose busiest slot still holds the extra
// head, and raises the MLP phase's busiest slot: it cannot shorten a
// synchronous step. So shares balance each kind's units by slot speed, and
// the costs below only weigh the phases against each other in reports
// (docs/layout.md has the arithmetic for the 480B example).
#include <vector>

#include "layout/interval_set.h"
#include "layout/replica_layout.h"

namespace ntp::layout {

struct ModelShape {
  Unit d_model = 0;
  Unit heads = 0;          // query heads
  Unit kv_heads = 0;       // key/value heads; 0 = heads (no grouped-query attention)
  Unit ffn = 0;            // FFN neurons per layer
  bool gated_ffn = false;  // SwiGLU: a neuron is a gate row, an up row and a down column
  Unit vocab = 0;          // vocabulary rows of the LM head (padded)
  Unit seq_len = 0;        // tokens per sequence T
  Unit layers = 1;
};

// FLOPs per unit and token, forward + backward (three times the forward: the
// backward takes the gradient of both operands of every product).
struct UnitCosts {
  // A head unit (a KV group with its q query heads): QKV rows 2 d hd (q + 2),
  // output projection 2 d hd q, causal attention scores and values 2 q hd T
  // (a token sees T/2 keys on average).
  double head = 0;
  double neuron = 0;     // fc1 row + fc2 column, 4 d (SwiGLU: + the gate row, 6 d)
  double vocab_row = 0;  // an LM-head row, 2 d
};

// Throws std::invalid_argument naming a field that is not positive, or
// heads not a multiple of kv_heads, or d_model not of heads.
UnitCosts unit_costs(const ModelShape& shape);

// One phase of one training replica: the busiest slot's units * cost / speed
// against the ideal, the phase's units * cost / the replica's total speed.
struct PhaseLoad {
  double busiest = 0;
  double ideal = 0;
  int busiest_slot = -1;
  double ratio() const { return ideal > 0 ? busiest / ideal : 0.0; }
};

// `speeds` per active slot, in order (as slot_shares takes them); empty = 1.0
// each. Throws std::invalid_argument for a dropped replica or a wrong count.
PhaseLoad phase_load(const ReplicaLayout& layout, double unit_cost,
                     const std::vector<double>& speeds = {});

// The step of one replica: per layer the attention and the MLP phase, then
// the LM head; busiest and ideal are per token, summed over the phases.
struct StepLoad {
  PhaseLoad attention, mlp, lm_head;
  double busiest = 0;
  double ideal = 0;
  double ratio() const { return ideal > 0 ? busiest / ideal : 0.0; }
};

StepLoad step_load(const ModelShape& shape, const ReplicaLayout& heads,
                   const ReplicaLayout& neurons, const ReplicaLayout& vocab,
                   const std::vector<double>& speeds = {});

}  // namespace ntp::layout
