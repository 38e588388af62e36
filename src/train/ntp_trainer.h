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
// drives it through drop_groups(), move_state(), reconfigure() and the writer
// role. Everything derived from membership — the configuration, epoch,
// layouts, groups, the batch split — is rebuilt by reconfigure().
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
#include "train/config.h"
#include "train/dataset.h"
#include "train/metrics.h"
#include "train/mutations.h"
#include "train/state_hash.h"
#include "train/state_move.h"

namespace ntp::comm {
class Group;
class Store;
}  // namespace ntp::comm

namespace ntp::train {

struct RankPlace {
  int replica = 0;
  int slot = 0;
  bool operator==(const RankPlace&) const = default;
};

// The processes of a job: the active slots of every training replica,
// replica-major, slots ascending. Global rank i is places[i].
std::vector<RankPlace> job_places(const ParallelConfig& parallel);

// The global ranks (indices into `places`, the job's first configuration)
// of the slots that train under `p`, ascending.
std::vector<int> training_ranks(const ParallelConfig& p, const std::vector<RankPlace>& places);

// The layout library's view of the job for `units` units of `kind`: heads
// (GPT-2 heads, Llama KV groups) stay whole, neuron-like kinds (FFN neurons,
// Llama's SwiGLU neurons, vocabulary rows) are cut in blocks of
// parallel.align (layout/shares.h). Slot speeds would apply under
// parallel.balance = "work"; none are measured yet, so every slot runs at 1.0.
layout::JobConfig job_config(const ParallelConfig& parallel, model::UnitKind kind, std::int64_t units);

// Everything about the job that can be wrong before a process starts: the
// data, the model against the data, and the layouts of every unit kind (e.g.
// fewer heads than the active slots of a replica), and for a resume the
// checkpoint against the configuration and the data. Throws ConfigError
// naming the key. Reads the data (`run_dir` hosts the built-in corpus) and
// returns what it read, for the job's record (record_job_data).
JobData check_job(const Config& config, const std::filesystem::path& run_dir);

struct WorkerOptions {
  int rank = 0;
  int world_size = 1;
  // Workers on this host (LOCAL_WORLD_SIZE): they share its cores, so each
  // rank's kernel pool gets cores / ranks_on_host (model.threads = 0).
  int ranks_on_host = 1;
  std::string store;  // "file:DIR" or "redis://host:port"
  // This rank's GPU for power.mode = "nvml": an NVML index or UUID.
  std::string gpu;
  // Test hook (--verify must catch it): this global rank mis-pairs two head
  // units in its sync buffer. -1 = off.
  int mispair_rank = -1;
  // Liveness oracle for group creation: true once a rank is known dead, so
  // building a group with it fails at once (comm::GroupOptions::is_dead).
  std::function<bool(int)> is_dead;
  // Asked by the writer before each commit: does a rank outside `members`
  // ask to rejoin? The answer travels in the commit record, so every rank
  // sees the same and grows the job after the same step.
  std::function<bool(const std::vector<int>& members)> join_pending;
  // Gloo: the address this rank binds and publishes (multi-host: this host's
  // address), or a network interface, which wins if set.
  std::string gloo_host = "127.0.0.1";
  std::string gloo_iface;
};

// Where a step is when a fault point fires (fault injection, test.failures).
// kCheckpoint: in the background save after the step, before this rank's
// part is written.
enum class StepPhase { kStart, kForward, kBackward, kSync, kCommit, kOptimizer, kCheckpoint };
const char* to_string(StepPhase phase);

// The step a non-finite loss or gradient norm was seen in (train.on_nan = "stop").
class NonFiniteError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

class NtpTrainer {
 public:
  NtpTrainer(const Config& config, const std::filesystem::path& run_dir, const WorkerOptions& options);
  ~NtpTrainer();
  NtpTrainer(const NtpTrainer&) = delete;
  NtpTrainer& operator=(const NtpTrainer&) = delete;

  // --- identity and membership
  int rank() const { return options_.rank; }
  RankPlace place() const { return me_; }
  const std::vector<RankPlace>& places() const { return places_; }  // of the first configuration
  const ParallelConfig& parallel() const { return parallel_; }
  std::uint64_t epoch() const { return epoch_; }
  const std::vector<int>& members() const { return members_; }  // training in this epoch, ascending
  int global_rank_of(layout::SlotRef slot) const;
  // The ranks that train in configuration `p` (a subset of the first one's).
  std::vector<int> training_ranks(const ParallelConfig& p) const;
  std::shared_ptr<comm::Store> store() const { return store_; }
  const Config& config() const { return config_; }
  // Options of a group of `ranks` in `epoch`: the job's deadlines, address
  // and liveness oracle, with the per-call descriptor check.
  comm::GroupOptions group_options(std::uint64_t epoch, std::vector<int> ranks, std::string name) const;
  // Appends an event to events.jsonl with this rank's number.
  void event(const std::string& name, nlohmann::json fields) const;

  // --- the step
  // The last step whose update this rank applied; -1 before the first.
  std::int64_t applied_step() const { return applied_; }
  // Computes, syncs, commits and applies step s (s must be applied_step() + 1).
  // Throws comm::CommError when a collective before the commit point fails:
  // nothing was applied then. With train.on_nan = "stop", throws
  // NonFiniteError naming the step (on every rank alike).
  StepMetrics step(std::int64_t s);
  // The step whose commit collective this rank entered but did not see
  // complete (its synced gradients are final and unapplied); -1 when none.
  std::int64_t pending_commit() const { return pending_commit_; }
  // What the commit of the last applied step decided (the same on every rank
  // that saw it complete).
  struct CommitOutcome {
    double grad_norm = 0;
    bool skipped = false;
  };
  const CommitOutcome& last_commit() const { return last_commit_; }
  // Completes the pending commit of step s with the outcome another rank saw:
  // a failure inside the commit collective left this rank just short of it,
  // with everything the update needs in hand (recovery, instead of moving
  // state to it).
  void complete_commit(std::int64_t s, const CommitOutcome& outcome);
  // The metrics of the last applied step (to log it if its writer died).
  const std::optional<StepMetrics>& last_metrics() const { return last_metrics_; }
  // Whether the last committed step carried a rejoin request (see WorkerOptions).
  bool join_pending() const { return join_pending_; }
  // Whether the last committed step carried a stop request (SIGINT/SIGTERM/SIGHUP
  // on some rank): its checkpoint is being saved; the job should end.
  bool stop_requested() const { return stop_requested_; }
  // Blocks until this rank's checkpoint save in flight ended.
  void wait_for_checkpoint();
  // After a recovery that resumes at `resume` (steps applied): the save of
  // that state begun before the failure may have lost a writer, and when it
  // is the final state or a train.checkpoint_every boundary no later save
  // holds it, so the survivors save it again in the new layout. Every rank
  // decides alike, from the step and the config; if the first save completed,
  // the second is discarded (complete_checkpoint).
  void save_resume_state(std::int64_t resume);
  // Called at every phase of every step (fault injection).
  void set_fault_point(std::function<void(std::int64_t, StepPhase)> fn) { fault_point_ = std::move(fn); }

  // --- roles
  // The writer appends metrics.jsonl and schedule.jsonl after each applied
  // step and writes model.bin; the recovery protocol moves the role.
  bool is_writer() const { return writer_rank_ == options_.rank; }
  int writer_rank() const { return writer_rank_; }
  void set_writer(int global_rank) { writer_rank_ = global_rank; }
  // As the new writer after a recovery that resumes at `resume`: drops rows of
  // steps >= resume (a writer that applied them died and they are redone) and
  // appends the rows of step resume - 1 if its writer died before logging it.
  void take_over_logs(std::int64_t resume);

  // --- reconfiguration (driven by elastic/recovery)
  // Aborts every group of the failed epoch (peers blocked on them fail fast)
  // and releases them.
  void drop_groups();
  // Per-unit hashes of the parameters and both moments this rank holds.
  StateHashes state_hashes() const;
  // Executes the transition to `next`: sends the units this rank serves,
  // receives the units its slot holds in `next` (all of them when `stale`),
  // parameters and moments, over `exchange` (every survivor). `resume_from`
  // (when given) is the rank that sends the replicated tensors and the
  // applied step to a stale rank. Returns the bytes moved.
  StateMoveStats move_state(const ParallelConfig& next, const KindPlans& plans, comm::Group& exchange,
                            const std::vector<int>& survivors, bool stale,
                            std::optional<int> replicated_source, std::int64_t resume_applied);
  // The model's shape (what the layouts split).
  const model::GptConfig& gpt() const;
  // Adopts `next` as the configuration of epoch `epoch` (its layout, the
  // batch split); call right after move_state() laid the state out for it.
  void adopt(const ParallelConfig& next, std::uint64_t epoch);
  // True when this rank's replica trains in the current configuration.
  bool trains_now() const;
  // Builds the groups of the current epoch and the gradient sync. Throws
  // comm::CommError when a member is gone.
  void connect();

  // --- the end of a run
  // model.bin (by the writer), this rank's hash file hashes/rank-<r>.json,
  // the trace fragments; then a barrier of the members.
  void finish();
  // Puts the GPU's original limit back and logs it; `cause`: "exit" or "error".
  void restore_power(const char* cause) noexcept;

 private:
  struct Impl;
  // test.mutation's sample faults at step 1 (train/mutations.h).
  void mutate_samples(std::int64_t s, std::vector<std::int64_t>& mine) const;
  // The local update of step s, once its commit is known.
  void apply_update(std::int64_t s, double grad_norm, bool skipped);
  // Copies this rank's part of the checkpoint after `steps_done` steps and
  // writes it in the background (train/checkpoint_saver.h).
  void save_checkpoint(std::int64_t steps_done, bool last);  // last: a view of the state, no copy
  // Blocks until a save in flight copied the state (before step s changes
  // it); logs checkpoint_copy_waited when that stalled training.
  void wait_for_checkpoint_copy(std::int64_t s);
  // Loads the units this rank holds from a checkpoint (run.resume).
  void load_checkpoint(const std::filesystem::path& dir);
  double validation_loss();  // every rank of the job takes part (evaluate.h)

  const Config& config_;
  WorkerOptions options_;
  std::vector<RankPlace> places_;
  RankPlace me_;
  ParallelConfig parallel_;
  std::uint64_t epoch_ = 0;
  std::atomic<std::uint64_t> live_epoch_{0};  // epoch_, for the checkpoint thread
  std::vector<int> members_;
  std::int64_t applied_ = -1;
  std::int64_t pending_commit_ = -1;
  CommitOutcome last_commit_;
  bool join_pending_ = false;
  bool stop_requested_ = false;
  int writer_rank_ = 0;
  std::optional<StepMetrics> last_metrics_;
  std::optional<std::vector<std::vector<std::int64_t>>> last_parts_;
  std::function<void(std::int64_t, StepPhase)> fault_point_;
  Mutation mutation_ = Mutation::kNone;  // test.mutation, when this rank carries it
  std::shared_ptr<comm::Store> store_;
  std::unique_ptr<Impl> impl_;
};

// True when the replica trains in configuration `p` (at least min_tp slots).
bool trains(const ParallelConfig& p, std::int64_t replica);

// The transition plans of the three unit kinds from `from` to `to`; `stale`
// slots never serve and receive all they hold (layout/transition.h). Throws
// layout::UnitsLostError when no valid holder is left for some units.
KindPlans transition_plans(const ParallelConfig& from, const ParallelConfig& to,
                           const model::GptConfig& gpt, const std::vector<layout::SlotRef>& stale);

}  // namespace ntp::train
