#pragma once
// Executing a transition plan (layout/transition.h) on one rank: the units it
// must send (from its slot of the old configuration) and receive (for its slot
// of the new one), for the three unit kinds, parameters and both AdamW moments
// together, in one batched exchange over a group of every surviving rank. Every
// message carries a checksum of its values, checked on arrival. Then the model
// and optimizer adopt the new shard (model::reshard); units the rank keeps
// never move.
#include <cstdint>
#include <functional>
#include <optional>
#include <utility>
#include <vector>

#include "comm/group.h"
#include "layout/transition.h"
#include "model/model.h"
#include "model/optimizer.h"

namespace ntp::train {

struct KindPlans {
  layout::TransitionPlan heads;
  layout::TransitionPlan neurons;
  layout::TransitionPlan vocab;
};

struct StateMoveStats {
  std::int64_t units_in = 0;  // units received (all kinds)
  std::int64_t bytes_in = 0;  // parameters + moments received
  std::int64_t units_out = 0;
  std::int64_t bytes_out = 0;
};

struct StateMoveRank {
  std::optional<layout::SlotRef> from;  // this rank's slot in the old configuration
  std::optional<layout::SlotRef> to;    // ... in the new one; none: the rank leaves
  // Group rank (in the exchange group) of the process of an old or new slot.
  std::function<int(layout::SlotRef)> group_rank_of;
  // Its state is outdated: every unit of the new shard arrives from a peer
  // (the plan sends them all), none is kept.
  bool stale = false;
  // The replicated tensors (parameters and both moments): the group rank a
  // stale rank receives them from, and the group ranks this rank sends its
  // own to (ranks of the same model stage: the same tensors).
  std::optional<int> replicated_from;
  std::vector<int> replicated_to;
};

// The pairs of group ranks (sender, receiver) that move_state trades
// between, each once: a sparse exchange group connects just these
// (comm::GroupOptions::links) besides its ring.
std::vector<std::pair<int, int>> move_links(const KindPlans& plans,
                                            const std::function<int(layout::SlotRef)>& group_rank_of);

// Every member of `group` calls it with the same plans. Without `rank.to`
// the rank only serves its units and the model is left as it is.
// Replicated tensors travel in the same exchange and are written before the
// shard is adopted.
StateMoveStats move_state(model::Model& model, model::AdamW& optimizer, const model::Shard& next,
                          const KindPlans& plans, const StateMoveRank& rank, comm::Group& group);

}  // namespace ntp::train
