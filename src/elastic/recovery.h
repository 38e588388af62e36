#pragma once
// In-job recovery, the whole protocol in one place (DESIGN §5). A worker's
// life is a short state machine:
//
//   connect ─▶ step s ─(applied)─▶ step s+1 ... ─▶ finish
//      ▲          │ CommError (a peer died, hung or was fenced)
//      │          ▼
//      │      drop groups ─▶ agree (epoch e+1) ─▶ plan ─▶ move state ─▶ prove agreement
//      │          ▲                                    │ CommError: a death during recovery
//      └──────────┴────────────────────────────────────┘ → the next epoch, within the budget
//
// Agree: the survivors register their last applied step and the epoch their
// state is laid out in (elastic/membership.h). The run resumes at one past
// the highest applied step. A survivor behind it — it missed the commit of
// the last step, or holds the layout of an older epoch because a recovery
// broke off during its move — is stale: it serves nothing and receives every
// unit it holds, and the replicated tensors, from a holder at the resume
// step (the transition plan's stale slots). No step is applied twice or
// skipped; when no holder is left for some unit, the job stops (exit 3).
// Prove agreement: every survivor's per-unit state hashes (train/state_hash.h)
// are combined per replica and compared across replicas, and every copy of
// the replicated tensors is compared: a mismatch stops the job; it is never
// a warning. Then the new writer takes over the logs and training goes on.
#include <cstdint>
#include <map>
#include <stdexcept>
#include <string>

#include "elastic/membership.h"
#include "train/job_plan.h"
#include "train/ntp_trainer.h"
#include "train/recovery_executor.h"

namespace ntp::elastic {

// The replicas disagree after a recovery, or another protocol invariant broke.
class RecoveryError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Store keys: a repaired rank asking to rejoin; the run's end (the writer).
std::string join_key(int rank);
std::string done_key();

struct RecoveryOutcome {
  bool leaving = false;      // this rank's replica no longer trains (or it was left out)
  std::int64_t resume = 0;   // the next step to run
};

class Recovery {
 public:
  // Drives `trainer`, rank options.rank of the job, through recoveries, over
  // the job's `store`.
  Recovery(train::RecoveryExecutor& trainer, const train::WorkerOptions& options, std::shared_ptr<comm::Store> store);

  // After `error` broke a step (or the start, or the finish): agree, move,
  // prove, reconnect. Retries into the next epoch when a failure interrupts
  // it, until elastic.max_recoveries is spent. Throws RecoveryError (a broken
  // invariant, the budget spent, nobody lost), layout::UnitsLostError (exit 3)
  // or std::runtime_error (a deadline).
  RecoveryOutcome recover(const std::string& error);
  // At a step boundary, when a repaired rank asked to rejoin (every member
  // calls it after the same step): the same protocol, growing the job.
  RecoveryOutcome grow();
  // At a step boundary, when the last commit showed a rank slow, or its
  // speed back (train/slow_ranks.h; every member calls it after the same
  // step): the same protocol with nobody lost, into an epoch laid out with
  // `change.speeds`. Only units whose holder changes move. Not counted
  // against elastic.max_recoveries unless a failure interrupts it.
  RecoveryOutcome relayout(const train::Relayout& change);
  // The rejoining rank's side: asks to come back, registers as a candidate in
  // each next epoch until one takes it, and is rolled forward like a rank
  // behind. `leaving` when the run ended first or did not take it back.
  RecoveryOutcome join();

  // Test hook: called once per recovery attempt after the agreement.
  void set_fault_point(std::function<void()> fn) { fault_point_ = std::move(fn); }

 private:
  // `counted`: the first attempt spends recovery budget (a retry always does).
  RecoveryOutcome run(const std::string& error, bool failure, bool counted = true);
  RecoveryOutcome attempt(const std::string& error, double start, bool failure);
  // An agreed epoch's plan, from memory or (rejoining) the store.
  const train::JobPlan& plan_of(std::uint64_t epoch);
  const train::Config& config() const { return trainer_.plan().config(); }
  // Ranks outside the membership that may rejoin (elastic.rejoin).
  std::vector<int> candidates() const;
  void prove_agreement(comm::Group& group, const std::vector<int>& survivors);

  train::RecoveryExecutor& trainer_;
  train::WorkerOptions options_;
  std::shared_ptr<comm::Store> store_;
  std::vector<int> members_;  // of the last agreed epoch
  std::uint64_t next_epoch_ = 1;
  std::int64_t recoveries_ = 0;
  // The plan of every agreed epoch: a survivor whose state is in an older
  // epoch's layout is stale against the newest one.
  std::map<std::uint64_t, train::JobPlan> plans_;
  std::function<void()> fault_point_;
};

}  // namespace ntp::elastic
