#pragma once
// The layout of one unit kind (attention heads, FFN neurons, vocabulary rows)
// across a whole job: R replicas of `tp` slots each, some slots failed.
//
//   JobConfig config{.units = 50304, .tp = 8, .replicas = 4,
//                    .failed = {{0, {2, 5}}}, .min_tp = 4};
//   JobLayout job = plan_job(config);
//   SlotView me = job.slot_view(replica, slot);  // what this rank holds and sends
//
// A replica with fewer than min_tp alive slots sits out (dropped). The sync
// degree K is the minimum of k_r over the replicas that train; each of those
// runs at its own k_r with the layout L(U, A_r, K) of replica_layout.h.
// Shares (shares.h) are cut in blocks of `align` units (the trainer asks 1
// for heads, parallel.align for neuron-like kinds) and follow slot `speeds`.
#include <memory>
#include <utility>
#include <vector>

#include "layout/failed_slots.h"
#include "layout/interval_set.h"
#include "layout/replica_layout.h"
#include "layout/slot_speeds.h"

namespace ntp::layout {

struct JobConfig {
  Unit units = 0;        // U: units of this kind, [0, U)
  int tp = 0;            // n: base TP degree, slots 0..n-1 of every domain
  int replicas = 0;      // R: DP replicas
  FailedSlots failed{};  // failed slots per replica
  int min_tp = 1;        // a replica with fewer alive slots sits out
  Unit align = 1;        // shares in blocks of up to this many units (1: floor/ceil split)
  SlotSpeeds speeds{};   // slot speeds per replica; none listed = all 1.0 (equal unit counts)
};

// Throws std::invalid_argument naming the field: units/tp/replicas/min_tp/align
// < 1, min_tp > tp, a failed replica or slot out of range or listed twice,
// speeds that are not one finite positive number per slot, units smaller than
// the active slots of a training replica.
// Throws InfeasibleError when no replica has min_tp alive slots.
void validate(const JobConfig& config);

// Everything one rank needs for the gradient sync of this unit kind.
// Post-sync is the inverse of pre-sync: a slot receives back exactly what it
// sent and sends back exactly what it received.
struct SlotView {
  int replica = 0;
  int slot = 0;
  bool alive = false;      // not failed
  bool trains = false;     // alive and its replica is not dropped
  int sync_group = -1;     // j when this is core slot j, else -1
  IntervalSet units;       // the units it computes, stored unit-major
  IntervalSet sync_units;  // S_j for core slot j, empty otherwise
  // Pre-sync: a slot sends gradients of the pieces it holds outside its own
  // S_j to their core slots (an extra slot sends all it holds; a core slot
  // sends only when its share exceeds |S_j|, which needs unequal speeds); a
  // core slot receives the rest of its S_j. A core slot's sync buffer is S_j
  // in unit-major order: its own units, then each receive in increasing unit
  // order.
  std::vector<SlotTransfer> pre_sync_sends;
  std::vector<SlotTransfer> pre_sync_receives;
  bool is_core() const { return sync_group >= 0; }
};

struct JobLayout {
  Unit units = 0;
  int tp = 0;
  int min_tp = 1;
  int sync_degree = 0;                      // K
  Unit block = 1;                           // the kind's effective block (kind_block)
  std::vector<IntervalSet> sync_partition;  // S(U, K) in blocks of `block`
  // R entries. Replicas with the same alive slots and speeds share one
  // layout, so a job of 512 healthy replicas stores one.
  std::vector<std::shared_ptr<const ReplicaLayout>> replicas;

  int num_replicas() const { return static_cast<int>(replicas.size()); }
  const ReplicaLayout& replica(int r) const;                 // bounds-checked
  const IntervalSet& units_of(int replica, int slot) const;  // empty if failed/dropped
  SlotView slot_view(int replica, int slot) const;
  // The core slots that form DP sync group j, one per training replica:
  // {replica, slot} pairs in replica order.
  std::vector<std::pair<int, int>> sync_group_members(int j) const;
};

// Validates `config` (see validate) and computes every replica's layout and
// gradient-sync plan. Replicas with the same alive slots and speeds share one
// computation.
JobLayout plan_job(const JobConfig& config);

// The alive slots of `replica`: 0..tp-1 without its failed ones, ascending.
std::vector<int> alive_slots(const JobConfig& config, int replica);

}  // namespace ntp::layout
