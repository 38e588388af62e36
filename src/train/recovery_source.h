#pragma once
// Where the survivors of a failure take the newest state from: the layout
// epoch whose holders serve, the slots that must be refreshed instead, and
// the transition plans to the next configuration. Pure (no I/O).
//
// A recovery broken off by a second failure can leave the survivors holding
// the newest applied step in different layouts: those that finished its
// state move (a trivial one, say) in the new epoch's layout, the others in
// the one before. A survivor serves under the layout of epoch `from` when it
// holds the newest step and either holds it in that layout or in one that
// gives its slot the same units (a healthy replica's slots keep theirs when
// another replica changes). The newest such epoch from which no unit is lost
// is chosen; every survivor, given the same agreement, chooses alike.
//
// With pipeline stages each stage is recovered on its own: a slot's units
// are its stage's, a lost rank's units come from the same stage of a peer
// replica, and the other stages' plans move nothing unless they too lost or
// left behind a rank.
#include <cstdint>
#include <map>
#include <vector>

#include "layout/transition.h"
#include "train/job_plan.h"

namespace ntp::train {

struct SurvivorState {
  RankPlace place;
  std::int64_t applied = -1;     // the newest step it applied
  std::int64_t pending = -1;     // a step whose commit it entered but did not apply
  std::uint64_t held_epoch = 0;  // the epoch whose layout its state is in
};

struct RecoverySource {
  std::uint64_t epoch = 0;        // the layout the state is taken from
  std::vector<RankPlace> stale;   // slots refreshed whole (they never serve)
  std::vector<KindPlans> stages;  // the transition plans of each pipeline stage
};

// Whether a survivor one step short completes that step locally under the
// layout of `from`: it entered the commit of `newest` (its synced gradients
// are final) and holds its state in that layout.
bool completes_locally(const SurvivorState& s, std::int64_t newest, std::uint64_t from);

// `plans`: the plan of every epoch a survivor at the newest step holds its
// state in; `next`: the plan to recover into. Throws layout::UnitsLostError
// (the one of the newest candidate layout) when every candidate loses units.
RecoverySource choose_recovery_source(const std::map<std::uint64_t, const JobPlan*>& plans,
                                      const std::vector<SurvivorState>& survivors, const JobPlan& next);

}  // namespace ntp::train
