#pragma once
// The transition plan between two configurations of the same job (a failure,
// a repair, several of each, K going down or up): which units each slot that
// trains in the new configuration must receive, and from where.
//
// A slot *serves* (may be a source) when it is alive in the new configuration
// and not stale. Stale slots are survivors one step behind the others: a
// failure inside the step's commit collective left them without the last
// update, and recovery resumes at the highest applied step (DESIGN.md §5). A
// stale slot never serves, and it receives every unit it holds in the new
// configuration, even units it held before: its own copy is outdated.
//
// For every unit a new holder needs:
//   1. the same slot held it and serves: nothing moves;
//   2. else a serving slot of the same replica held it: intra-domain move;
//   3. else a serving slot of a peer replica held it: cross-domain move. Every
//      replica that trained in the old configuration holds identical values
//      (the DP invariant, once stale copies are excluded), so any of them may
//      serve; the peer is the least loaded one (units already sent
//      cross-domain) that holds the whole piece, ties to the lowest replica id,
//      so that refills spread evenly.
// A replica that sits out in the new configuration can still serve (its alive,
// non-stale slots). A replica dropped in the new configuration needs nothing
// (nor does a stale slot that is dead or sits out there). A replica that was
// dropped in the old configuration and trains in the new one is fed entirely
// cross-domain, and so is one whose slots are all stale.
// Units that no serving slot of any replica holds are reported as lost: in-job
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

// Units that replica `replica` needs and no serving slot anywhere holds.
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

// The same with `stale` slots: slots alive in `to` whose state is outdated:
// they never serve, and they receive every unit they hold in `to` (even units
// they held before). A stale slot dead or sitting out in `to` needs nothing;
// listing one twice is harmless. A slot out of the job's range throws
// std::invalid_argument naming it.
TransitionPlan plan_transition(const JobLayout& from, const JobLayout& to,
                               const std::vector<SlotRef>& stale);

}  // namespace ntp::layout
