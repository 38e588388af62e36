#pragma once
// The transition plan between two configurations of the same job (a failure,
// a repair, several of each, K going down or up): which units each slot that
// trains in the new configuration must receive, and from where.
//
// For every unit a new holder needs:
//   1. the same slot held it and stays alive: nothing moves;
//   2. else a surviving slot of the same replica held it: intra-domain move;
//   3. else a peer replica's surviving slot held it: cross-domain move. Every
//      replica that trained in the old configuration holds identical values
//      (the DP invariant), so any of them may serve; the peer is the least
//      loaded one (units already sent cross-domain) that holds the whole
//      piece, ties to the lowest replica id, so that refills spread evenly.
// "Surviving" means alive in the new configuration; a replica that sits out in
// the new configuration can still serve as a source. A replica dropped in the
// new configuration needs nothing; one that was dropped in the old
// configuration and trains in the new one is fed entirely cross-domain.
// Units that no surviving slot of any replica holds are reported as lost: in-job
// recovery is then impossible (see TransitionPlan::require_recoverable).
#include <compare>
#include <string>
#include <vector>

#include "layout/interval_set.h"
#include "layout/job_layout.h"

namespace ntp::layout {

struct SlotRef {
  int replica = 0;
  int slot = 0;
  auto operator<=>(const SlotRef&) const = default;
};

struct Move {
  SlotRef from;
  SlotRef to;
  IntervalSet units;
  bool cross_domain = false;  // between replicas (scale-up domains)
  bool operator==(const Move&) const = default;
};

// Units that replica `replica` needs and no surviving slot anywhere holds.
struct LostUnits {
  int replica = 0;
  IntervalSet units;
};

struct TransitionPlan {
  std::vector<Move> moves;      // ordered by (to, from); one move per (from, to) pair
  Unit intra_units = 0;         // units moved inside a replica
  Unit cross_units = 0;         // units moved between replicas
  std::vector<LostUnits> lost;  // ascending replica; empty when recoverable

  bool recoverable() const { return lost.empty(); }
  // "replica 0 would lose 700 units [0,700); ..." (empty when recoverable).
  std::string lost_summary() const;
  // Throws UnitsLostError with lost_summary() when units would be lost.
  void require_recoverable() const;
  // The moves a slot takes part in, in plan order.
  std::vector<Move> receives_of(SlotRef slot) const;
  std::vector<Move> sends_of(SlotRef slot) const;
};

// Plans the move from layout `from` to layout `to` of the same job (same
// units, tp and replica count, else std::invalid_argument). Never throws for
// lost units: they are reported in TransitionPlan::lost.
TransitionPlan plan_transition(const JobLayout& from, const JobLayout& to);

}  // namespace ntp::layout
