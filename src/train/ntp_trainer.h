#pragma once
// One rank of the multi-process NTP trainer: one process per active slot of
// every training replica. A rank computes its replica's share of the global
// batch with the units its slot holds in the replica layout (Megatron TP
// inside the replica over the TP group), runs the NTP gradient sync
// (grad_sync.h), commits the step and applies AdamW to its units.
//
// The step commit (DESIGN §5): every collective whose result decides the
// update — the TP collectives of forward and backward, the gradient sync, the
// loss sum and the gradient norm — runs before ONE commit collective, an
// all-gather over the world group of a small record per rank (its loss share,
// its part of the exact gradient norm, its timings and a vote). After it a
// rank only applies the update locally, so a rank that errs before the commit
// makes nobody apply, and `applied_step()` says exactly which updates a rank
// holds. A failure inside the commit collective can still leave ranks on both
// sides of it: recovery (elastic/recovery.h) resumes at the highest applied
// step and rolls the others forward.
//
// The trainer knows nothing of failures beyond that: the recovery protocol
// drives it through the RecoveryExecutor interface (train/recovery_executor.h).
// Everything derived from membership — the configuration, epoch, layouts,
// groups, the batch split — comes from the job plan of the epoch
// (train/job_plan.h), which adopt() replaces.
#include <atomic>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "layout/job_layout.h"
#include "layout/transition.h"
#include "model/shard.h"
#include "train/commit_record.h"
#include "train/config.h"
#include "train/dataset.h"
#include "train/job_input.h"
#include "train/job_plan.h"
#include "train/metrics.h"
#include "train/mutations.h"
#include "train/recovery_executor.h"
#include "train/slow_ranks.h"
#include "train/state_hash.h"
#include "train/state_move.h"
#include "train/step_hooks.h"  // StepPhase

namespace ntp::comm {
class Group;
class Store;
}  // namespace ntp::comm

namespace ntp::train {

struct WorkerOptions {
  int rank = 0;
  int world_size = 1;
  std::string store;  // "file:DIR" or "redis://host:port"
  // This rank's GPU for power.mode = "nvml": an NVML index or UUID.
  std::string gpu;
  // Test hook (--verify must catch it): this global rank mis-pairs two head
  // units in its sync buffer. -1 = off.
  int mispair_rank = -1;
  // Liveness oracle for group creation: true once a rank is known dead, so
  // building a group with it fails at once (comm::GroupOptions::is_dead).
  std::function<bool(int)> is_dead;
  // True once a member marked that membership epoch failed, so building one
  // of its groups gives up at once (comm::GroupOptions::abandoned).
  std::function<bool(std::uint64_t epoch)> epoch_failed;
  // Asked by the writer before each commit: does a rank outside `members`
  // ask to rejoin? The answer travels in the commit record, so every rank
  // sees the same and grows the job after the same step.
  std::function<bool(const std::vector<int>& members)> join_pending;
  // Gloo: the address this rank binds and publishes (multi-host: this host's
  // address), or a network interface, which wins if set.
  std::string gloo_host = "127.0.0.1";
  std::string gloo_iface;
};

// The step a non-finite loss or gradient norm was seen in (train.on_nan = "stop").
class NonFiniteError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Options of a group of `ranks` in `epoch`: the job's deadlines, address and
// liveness oracle; `check_inputs`: the per-call descriptor check (one extra
// all-gather per call: the world and recovery groups keep it, the per-layer
// and per-bucket ones skip it).
comm::GroupOptions group_options(const Config& config, const WorkerOptions& worker, std::uint64_t epoch,
                                 std::vector<int> ranks, std::string name, bool check_inputs = true);

class NtpTrainer final : public RecoveryExecutor {
 public:
  // Rank options.rank of the job `plan` (its first epoch), on the data and
  // model `input` read for it (train/job_input.h).
  NtpTrainer(JobPlan plan, JobInput input, const std::filesystem::path& run_dir, const WorkerOptions& options);
  ~NtpTrainer() override;
  NtpTrainer(const NtpTrainer&) = delete;
  NtpTrainer& operator=(const NtpTrainer&) = delete;

  // --- identity
  int rank() const { return options_.rank; }
  RankPlace place() const { return me_; }
  std::uint64_t epoch() const { return plan_.epoch(); }
  std::uint64_t live_epoch() const { return live_epoch_.load(); }  // epoch(), from any thread
  std::shared_ptr<comm::Store> store() const { return store_; }
  const Config& config() const { return plan_.config(); }
  const WorkerOptions& options() const { return options_; }

  // --- the step
  // The last step whose update this rank applied; -1 before the first.
  std::int64_t applied_step() const { return applied_; }
  // Computes, syncs, commits and applies step s (s must be applied_step() + 1).
  // Throws comm::CommError when a collective before the commit point fails:
  // nothing was applied then. With train.on_nan = "stop", throws
  // NonFiniteError naming the step (on every rank alike).
  StepMetrics step(std::int64_t s);
  // Whether the last committed step carried a rejoin request (see WorkerOptions).
  bool join_pending() const { return join_pending_; }
  // With elastic.relayout: the speeds the job should be laid out with after
  // the last committed step, when a rank was found slow or its speed back
  // (the same on every rank: slow_ranks.h); recovery's relayout() applies it.
  const std::optional<Relayout>& relayout_due() const { return relayout_; }
  // test.failures SLOW=F: from now on this rank's passes take F times as long.
  void set_slowdown(double factor) { hooks_.set_slowdown(factor); }
  // Whether the last committed step carried a stop request (SIGINT/SIGTERM/SIGHUP
  // on some rank): its checkpoint is being saved; the job should end.
  bool stop_requested() const { return stop_requested_; }
  // Blocks until this rank's checkpoint save in flight ended.
  void wait_for_checkpoint();
  // Called at every phase of every step (fault injection).
  void set_fault_point(std::function<void(std::int64_t, StepPhase)> fn) { hooks_.set_fault_point(std::move(fn)); }
  // The writer appends metrics.jsonl and schedule.jsonl after each applied
  // step and writes model.bin; the recovery protocol moves the role (connect).
  bool is_writer() const { return writer_rank_ == options_.rank; }

  // --- what recovery asks (train/recovery_executor.h)
  const JobPlan& plan() const override { return plan_; }
  CommitState commit_state() const override { return {applied_, pending_commit_, last_commit_}; }
  StateHashes state_hashes() const override;
  void drop_groups() override;
  void complete_commit(std::int64_t s, const CommitOutcome& outcome) override;
  std::vector<std::pair<int, int>> exchange_links(const StateMoveOrder& order) const override;
  StateMoveStats move_state(const StateMoveOrder& order, comm::Group& exchange) override;
  void adopt(const JobPlan& next) override;
  void connect(int writer) override;
  void rerun_validation(std::int64_t resume) override;
  void resume_at(std::int64_t resume) override;
  void event(const std::string& name, nlohmann::json fields) const override;

  // --- the end of a run
  // model.bin (by the writer), this rank's hash file hashes/rank-<r>.json,
  // the trace fragments; then a barrier of the members.
  void finish();
  // Puts the GPU's original limit back and logs it; `cause`: "exit" or "error".
  void restore_power(const char* cause) noexcept;

 private:
  struct Impl;
  std::function<int(layout::SlotRef)> exchange_rank_of(const std::vector<int>& survivors, int stage) const;
  bool counts_loss() const;  // this rank's loss sum is its replica's share of the step's
  // The parts of step(), in order (defined in ntp_trainer.cpp).
  struct LocalWork;    // this rank's loss share, forward time and sync totals
  struct Commit;       // what the commit collective gathered
  // Forward and backward over this rank's samples `mine`, micro-batch by
  // micro-batch; the last backward drives the overlapped gradient sync, which
  // this waits for.
  LocalWork run_micro_batches(std::int64_t s, const std::vector<std::int64_t>& mine, bool traced);
  // The same with pipeline stages: 1F1B over the replica's stages.
  LocalWork run_pipeline(std::int64_t s, const std::vector<std::int64_t>& mine, bool traced);
  template <class Pass>
  double timed_pass(Pass&& pass);
  // The commit point: one all-gather of every rank's record (pending_commit_
  // is s from just before it).
  Commit commit(std::int64_t s, double start, const LocalWork& work);
  // The step's metrics from the commit; applies train.on_nan = "stop".
  StepMetrics committed_metrics(std::int64_t s, const Commit& commit) const;
  // The local update (skipped on a non-finite loss or norm); returns its seconds.
  double update(std::int64_t s, StepMetrics& m, const Commit& commit, bool traced);
  // What follows an applied update: the rest of the metrics, the power
  // re-plan, validation, the writer's logs, the checkpoint trigger.
  // The slow-rank measure of the committed step (elastic.relayout): sets relayout_.
  void observe_speeds(std::int64_t s, const CommitTotals& totals);
  void after_commit(std::int64_t s, const std::vector<std::vector<std::int64_t>>& parts, const Commit& commit,
                    double opt_s, StepMetrics& m);
  // Saves the checkpoint after step s when it is due, or skips it on every
  // rank alike while a previous save is busy.
  void checkpoint_after(std::int64_t s, const Commit& commit);
  // The local update of step s, once its commit is known.
  void apply_update(std::int64_t s, double grad_norm, bool skipped);
  // Copies this rank's part of the checkpoint after `steps_done` steps and
  // writes it in the background (train/checkpoint_saver.h).
  void save_checkpoint(std::int64_t steps_done, bool last);  // last: a view of the state, no copy
  // Blocks until a save in flight copied the state (before step s changes
  // it); logs checkpoint_copy_waited when that stalled training.
  void wait_for_checkpoint_copy(std::int64_t s);
  // As the new writer after a recovery that resumes at `resume`: drops rows of
  // steps >= resume (a writer that applied them died and they are redone) and
  // appends the rows of step resume - 1 if they were not logged (their writer
  // died, or the failure cut the step's validation pass short), with
  // `val_loss`, the pass run again.
  void take_over_logs(std::int64_t resume, std::optional<double> val_loss);
  // After a recovery that resumes at `resume` (steps applied): the save of
  // that state begun before the failure may have lost a writer, and when it
  // is the final state or a train.checkpoint_every boundary no later save
  // holds it, so the survivors save it again in the new layout. Every rank
  // decides alike, from the step and the config; if the first save completed,
  // the second is discarded (complete_checkpoint).
  void save_resume_state(std::int64_t resume);
  // Loads the units this rank holds from a checkpoint (run.resume).
  void load_checkpoint(const std::filesystem::path& dir);
  double validation_loss();  // every rank of the job takes part (evaluate.h)

  JobPlan plan_;  // of the epoch the state is laid out in
  const Config& config_;  // plan_.config(): the job's keys, the same in every epoch
  WorkerOptions options_;
  RankPlace me_;
  std::atomic<std::uint64_t> live_epoch_{0};  // plan_.epoch(), for the checkpoint thread
  std::int64_t applied_ = -1;
  std::int64_t pending_commit_ = -1;
  CommitOutcome last_commit_;
  bool join_pending_ = false;
  std::optional<SlowRanks> slow_;  // with elastic.relayout
  std::optional<Relayout> relayout_;
  bool stop_requested_ = false;
  int writer_rank_ = 0;
  std::optional<StepMetrics> last_metrics_;
  std::optional<double> rerun_val_loss_;  // rerun_validation's, for the row resume_at logs
  std::optional<std::vector<std::vector<std::int64_t>>> last_parts_;
  StepHooks hooks_;  // fault points, test.mutation, slow ranks
  std::shared_ptr<comm::Store> store_;
  std::unique_ptr<Impl> impl_;
};

}  // namespace ntp::train
