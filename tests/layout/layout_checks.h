#pragma once
// The properties of a replica layout (DESIGN §3), as checkers that return the
// first violation found ("" when the property holds), so that a test can show
// each one rejecting a deliberately broken layout (layout_checks_test.cpp).
// Checked with interval algebra: a 50k-unit layout costs a few intervals.
#include <string>
#include <vector>

#include "layout/job_layout.h"

namespace ntp::layout::testing {

// Every unit of [0, U) held exactly once; failed slots hold nothing; every
// active slot holds at least one unit.
std::string coverage_violation(const ReplicaLayout& layout, Unit units);

// The gradient-sync plan: core slots are the first K active ones; core slot j
// keeps a prefix of S_j; every piece a slot holds outside its own S_j goes,
// once, to the core slot that owns it, and nothing else moves; after pre-sync
// core slot j holds exactly S_j; post_sync is pre_sync reversed; at most
// senders + receivers - 1 transfers (a forest).
std::string sync_violation(const ReplicaLayout& layout, const std::vector<IntervalSet>& sync);

// The shares: each a multiple of the replica's block except at most one slot,
// which carries the U mod block units left over; the busiest slot's
// units / speed at most the ideal U / sum(speeds) plus (k - 1) blocks /
// sum(speeds) (less than one block at the mean speed), unless it holds a
// single block (a slot must hold one). `speeds` per active slot.
std::string share_violation(const ReplicaLayout& layout, Unit units,
                            const std::vector<double>& speeds);

// S(U, K): K contiguous intervals covering [0, U) in order, each a multiple
// of `block` but the last, which carries U mod block, sizes within one block.
std::string partition_violation(const std::vector<IntervalSet>& sync, Unit units, Unit block);

// All of the above for every training replica of `job` planned from
// `config`, plus: the shares are those of slot_shares, the job's block that of
// kind_block, and a replica with k == K at equal speeds is S itself with
// empty plans.
std::string job_violation(const JobLayout& job, const JobConfig& config);

}  // namespace ntp::layout::testing
