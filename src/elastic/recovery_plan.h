#pragma once
// The decision half of a recovery (elastic/recovery.h), as a pure function:
// from the agreed membership and the configurations of the epochs involved it
// decides the resume step, the next configuration, which survivors are stale,
// which complete an interrupted commit locally, where every unit comes from,
// who writes the run's logs, and whether the job must stop (units lost) or
// there was nothing to recover. No store, no groups, no trainer: Recovery
// executes what it decides, and the tests here run it on made-up agreements
// in microseconds.
//
// The rules, in order:
//   - resume at newest + 1, newest = the highest step any survivor applied:
//     a step is applied everywhere or redone, never twice, never skipped;
//   - next = the last agreed plan without the lost ranks' slots and with the
//     joined ranks' slots (JobPlan::next_parallel), laid out with the speeds
//     a relayout asked for (if any), in the agreed epoch;
//   - the state comes from the newest layout epoch whose holders at `newest`
//     leave no unit without a serving holder (train/recovery_source.h);
//     a survivor behind `newest`, or holding another epoch's layout with other
//     units, is stale: it serves nothing and receives all it holds, unless it
//     entered the commit of `newest` and completes it locally; each pipeline
//     stage is planned on its own, from the same stage of the other replicas;
//   - the writer is the first survivor that applied `newest` and trains in
//     `next` (it holds the resume step's figures), else the first member.
#include <cstdint>
#include <exception>
#include <functional>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "elastic/membership.h"
#include "train/job_plan.h"
#include "train/ntp_trainer.h"
#include "train/recovery_source.h"

namespace ntp::elastic {

// The plan of an agreed epoch (a survivor's state may be laid out in an
// older one). May throw when the epoch is unknown.
using PlanOf = std::function<const train::JobPlan&(std::uint64_t epoch)>;

struct RecoveryInput {
  Membership agreed;
  train::JobPlan last;  // the last agreed epoch's plan (its places: every rank of the job)
  PlanOf plan_of;       // every epoch a survivor holds its state in
  bool failure = true;  // a broken step (false: growing for a rejoin, or a relayout)
  // The slot speeds a relayout into the agreed epoch asked for (recovery.h);
  // none: the last plan's.
  std::optional<layout::SlotSpeeds> speeds;
};

// The agreed epoch's configuration: the last plan's without the lost ranks'
// slots, with the joined ones', and with the asked-for speeds.
train::ParallelConfig next_parallel(const RecoveryInput& in);

struct RecoveryPlan {
  std::int64_t newest = -1;  // the highest applied step; the run resumes at newest + 1
  train::CommitOutcome outcome;  // of newest's commit, as a survivor that applied it saw it
  std::optional<train::JobPlan> next;  // the agreed epoch's plan
  std::optional<train::RecoverySource> source;  // none when units are lost
  std::exception_ptr units_lost;                // layout::UnitsLostError when !source
  std::uint64_t from_epoch = 0;                 // the layout the state is taken from
  std::vector<int> completes_commit;            // ranks that apply newest locally
  std::vector<int> stale;                       // ranks refreshed whole, ascending
  // (sender, stale rank) for every stale rank that trains next: a survivor
  // of its pipeline stage that is not stale (round robin over them) sends it
  // the stage's replicated tensors; the stale rank takes the optimizer's step
  // count from `newest`.
  std::vector<std::pair<int, int>> refreshes;
  std::vector<int> members;                     // the ranks that train in `next`, ascending
  int writer = -1;                              // -1 when nobody trains
  // A failed collective that lost no rank, left none behind, asked for no
  // new speeds and changes nothing: recovering would loop; Recovery stops instead.
  bool changes_nothing = false;

  std::int64_t resume() const { return newest + 1; }
  bool is_stale(int rank) const;
};

RecoveryPlan plan_recovery(const RecoveryInput& in);

// The invariants every plan keeps, checked against its input: "" when it
// holds, else the first violation. Tests run it on every case, and on plans
// of deliberately broken planners, to show it can fail.
std::string check_recovery_plan(const RecoveryInput& in, const RecoveryPlan& plan);

}  // namespace ntp::elastic
