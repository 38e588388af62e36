#pragma once
// What the recovery protocol (elastic/recovery.h) asks of a rank's trainer:
// two reads and eight effects. The protocol decides (elastic/recovery_plan.h,
// pure) and drives; the trainer only carries out, so a protocol change never
// reaches into the trainer's internals, and the protocol can be run against
// another executor (a test double, a GPU trainer).
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "train/job_plan.h"
#include "train/state_hash.h"
#include "train/state_move.h"

namespace ntp::comm {
class Group;
}

namespace ntp::train {

// What the commit of a step decided (the same on every rank that saw it complete).
struct CommitOutcome {
  double grad_norm = 0;
  bool skipped = false;
};

// Where a rank's step stands, for its membership record.
struct CommitState {
  std::int64_t applied = -1;  // the last step whose update it applied
  // The step whose commit collective it entered but did not see complete
  // (its synced gradients are final and unapplied); -1 when none.
  std::int64_t pending = -1;
  CommitOutcome last;  // of `applied`'s commit
};

// One rank's part of a state move to the plan `next` (transition.h): it
// serves what it holds and receives what its slot holds next (all of it when
// `stale`) over a group of every survivor.
struct StateMoveOrder {
  const JobPlan* next = nullptr;
  const std::vector<KindPlans>* plans = nullptr;  // of each pipeline stage
  std::vector<int> survivors;  // the exchange group's ranks, ascending
  bool stale = false;
  // (sender, stale rank), global ranks: the sender, of the stale rank's
  // stage, sends it the stage's replicated tensors; the stale rank takes the
  // optimizer's step count from resume_applied.
  std::vector<std::pair<int, int>> refreshes;
  std::int64_t resume_applied = -1;  // the newest applied step
};

class RecoveryExecutor {
 public:
  virtual ~RecoveryExecutor() = default;

  // The plan of the epoch this rank's state is laid out in.
  virtual const JobPlan& plan() const = 0;
  virtual CommitState commit_state() const = 0;
  // Per-unit hashes of the parameters and both moments this rank holds.
  virtual StateHashes state_hashes() const = 0;

  // Aborts every group of the failed epoch (peers blocked on them fail fast)
  // and releases them.
  virtual void drop_groups() = 0;
  // Completes the pending commit of step s with the outcome another rank saw:
  // a failure inside the commit collective left this rank just short of it,
  // with everything the update needs in hand.
  virtual void complete_commit(std::int64_t s, const CommitOutcome& outcome) = 0;
  // The pairs of exchange-group ranks that move_state(order) trades between
  // (train/state_move.h move_links); the same on every survivor.
  virtual std::vector<std::pair<int, int>> exchange_links(const StateMoveOrder& order) const = 0;
  // Carries out this rank's part of the state move; returns what moved.
  virtual StateMoveStats move_state(const StateMoveOrder& order, comm::Group& exchange) = 0;
  // Adopts `next` (its layout, the batch split); right after move_state().
  virtual void adopt(const JobPlan& next) = 0;
  // Builds the groups of the adopted plan and the gradient sync; `writer`
  // writes the run's logs from now on. Throws comm::CommError when a member
  // is gone.
  virtual void connect(int writer) = 0;
  // The validation pass due after step resume - 1 (train.eval_every), if
  // any, run again by every member of the new epoch: a failure may have cut
  // it short, and the members cannot all know whether the writer logged its
  // loss, so they all run it, whatever brought them here (a failure, a
  // rejoin, a relayout). Throws comm::CommError when a member is gone.
  virtual void rerun_validation(std::int64_t resume) = 0;
  // Training goes on at step `resume`: the writer drops the rows of redone
  // steps and logs the last applied one (with rerun_validation's loss) if it
  // was not logged; a save of the resume state that may have lost a writer
  // is made again.
  virtual void resume_at(std::int64_t resume) = 0;
  // Appends an event to events.jsonl with this rank's number.
  virtual void event(const std::string& name, nlohmann::json fields) const = 0;
};

}  // namespace ntp::train
