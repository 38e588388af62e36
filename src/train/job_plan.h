#pragma once
// The job plan: everything about a job that follows from its configuration,
// its model's shape and its data, for one membership epoch. Built by one
// function (JobPlan::build) and never changed: the launcher's preflight,
// every rank, the recovery planner, checkpoints, the one-process trainer and
// verify read it, and nothing else computes places, layouts, groups, batch
// shares or the sample schedule.
//
//   Config + JobShape (model shape, T, samples) + nnodes
//     └─ JobPlan::build ─▶ plan (epoch 0)
//          stages: the blocks of each pipeline stage, fixed for the job
//          places: global rank -> (replica, stage, slot), fixed for the job
//          members: the ranks that train in this epoch (the min_tp rule)
//          layouts of every unit kind, each rank's view, TP/DP group members
//          batch split input, sample schedule, hosts, threads per rank
//     plan.without(lost) / plan.with(joined) ─▶ the next epoch's plan
//     transition(from, to, stale) ─▶ which holder sends which unit
//
// Global ranks are the active slots of every training replica of the job's
// first configuration, replica-major, then stage, then slot; a later epoch
// keeps them (a rank that leaves keeps its number and may rejoin under it).
// Every stage of a replica is its own TP group with its own failed slots and
// layouts; the data-parallel groups join the same stage of every replica.
// Pure: no I/O.
#include <array>
#include <cstdint>
#include <vector>

#include "layout/job_layout.h"
#include "layout/transition.h"
#include "model/config.h"
#include "model/shard.h"
#include "model/stage.h"
#include "tensor/context.h"
#include "train/config.h"
#include "train/grad_sync.h"
#include "train/schedule.h"
#include "train/state_move.h"

namespace ntp::train {

// A rank's place: its replica, its slot in the TP group of its pipeline
// stage, and that stage (0 with parallel.pp = 1).
struct RankPlace {
  int replica = 0;
  int slot = 0;
  int stage = 0;
  bool operator==(const RankPlace&) const = default;
};

// What the model and the data give the plan.
struct JobShape {
  model::GptConfig gpt;
  std::int64_t seq_len = 0;  // T of every sample
  std::int64_t samples = 0;  // training sequences in the data (samples_in)
};

// One host of a multi-host job. A replica's TP group is one scale-up domain,
// so it stays inside one host; data parallelism runs across hosts: host h
// holds replicas [h·dp/M, (h+1)·dp/M) and, ranks being numbered replica by
// replica, a contiguous block of global ranks.
struct HostPlacement {
  int node = 0;
  int first_rank = 0;         // global rank of its local rank 0
  int ranks = 0;              // workers it starts
  std::vector<int> replicas;  // replicas it holds, training or not
};

// One rank's part in an epoch.
struct RankView {
  RankPlace place;
  bool trains = false;        // its replica keeps parallel.min_tp slots
  KindViews views;            // its units and sync role per unit kind
  model::Shard shard;         // the units it computes
  std::vector<int> active;    // its replica's active slots, TP-group order
  std::vector<int> tp_group;  // their global ranks
  int sync_group = -1;        // j when it is core slot j of the head layout
  std::vector<int> dp_group;  // the global ranks of sync group j (empty when j < 0)
  // Every training replica holds exactly its sync partition of the
  // vocabulary and there are several: wte's gradient may be synced in two
  // parts (OverlappedSync's split_embedding; a tied embedding only).
  bool vocab_split_ok = false;
  // --- the pipeline (docs/pipeline.md, "Stages in the job plan")
  model::StageRange layers;  // the blocks its stage holds
  // With parallel.pp > 1: its replica's training ranks of every stage,
  // ascending (the pipeline group: activations, the tied embedding). Empty
  // with one stage.
  std::vector<int> pipeline_group;
  // Its point-to-point peers in the neighbouring stages of its replica (-1
  // or empty at the ends, and with parallel.pp = 1). Every rank of a TP group
  // holds the whole residual stream, so the rank at TP-group index j of stage
  // s + 1 takes each activation from index j mod k_s of stage s, and index i
  // of stage s takes the gradient of its output from index i mod k_{s+1} of
  // stage s + 1 (k: a stage's active slots). With equal degrees these pair
  // index j with index j; otherwise a rank may send one copy to several.
  int activation_from = -1;
  std::vector<int> activation_to;
  int gradient_from = -1;
  std::vector<int> gradient_to;
};

class JobPlan {
 public:
  // Throws ConfigError naming the key: train.global_batch larger than the
  // data's sequences, a unit kind the layouts cannot cut (parallel.tp), no
  // replica with parallel.min_tp slots in every stage, more stages than
  // blocks (parallel.pp); std::invalid_argument naming --nnodes when the
  // replicas do not split evenly over the hosts.
  static JobPlan build(const Config& config, const JobShape& shape, int nnodes = 1);

  // The hosts of the job's first configuration before its data is read (the
  // launcher's first check, before anything runs): what build() gives hosts().
  // Throws std::invalid_argument naming --nnodes.
  static std::vector<HostPlacement> place_hosts(const ParallelConfig& parallel, int nnodes);

  std::uint64_t epoch() const { return epoch_; }
  // The job's keys; parallel() is this epoch's configuration (config().parallel
  // the first one's).
  const Config& config() const { return config_; }
  const ParallelConfig& parallel() const { return parallel_; }
  const JobShape& shape() const { return shape_; }
  const model::GptConfig& gpt() const { return shape_.gpt; }
  int pp() const { return static_cast<int>(stages_.size()); }
  // The blocks of every stage, in order (layout::split_stages over the
  // model's unit costs: the LM head weighs on the last stage).
  const std::vector<model::StageRange>& stages() const { return stages_; }

  // --- ranks
  const std::vector<RankPlace>& places() const { return places_; }  // global rank -> place
  int world_size() const { return static_cast<int>(places_.size()); }
  const RankPlace& place(int rank) const;  // throws std::out_of_range naming the rank
  int rank_of(RankPlace place) const;      // throws std::logic_error: no such process
  const std::vector<int>& members() const { return members_; }  // training now, ascending
  bool is_member(int rank) const;
  // The min_tp rule, the one copy: a replica trains while every stage keeps
  // parallel.min_tp active slots.
  bool trains(std::int64_t replica) const;

  // --- layouts and groups
  // The layout of `kind` over the TP groups of stage `stage` of every
  // replica (a replica that does not train has no active slot in it).
  const layout::JobLayout& layout(model::UnitKind kind, int stage = 0) const;
  RankView view(int rank) const;
  // The global ranks of the TP group of `stage` of `replica`: its active
  // slots, ascending.
  std::vector<int> tp_group(int replica, int stage = 0) const;

  // The compute of `rank`'s units in this epoch, FLOPs per token of a step
  // (layout/unit_costs.h): what its speed is measured against. 0 when it
  // does not train.
  double work_of(int rank) const;

  // --- the batch
  BatchSplitInput split() const { return split_input(parallel_, config_.train.global_batch); }
  SampleSchedule schedule() const;

  // --- hosts
  const std::vector<HostPlacement>& hosts() const { return hosts_; }
  const HostPlacement& host_of(int rank) const;
  // Kernel threads of `rank`: model.threads, or its host's cores shared by
  // the host's ranks.
  tensor::ThreadSetup threads(int rank) const;

  // --- the next epoch
  // This job under configuration `next` in epoch `epoch` (the same places,
  // shape and hosts). Throws ConfigError when no replica trains under it.
  JobPlan at(const ParallelConfig& next, std::uint64_t epoch) const;
  // The next epoch without the slots of `lost` ranks / with those of `joined` back.
  JobPlan without(const std::vector<int>& lost) const;
  JobPlan with(const std::vector<int>& joined) const;
  // `parallel()` without `lost` and with `joined` (no plan built: a planner
  // may ask for a configuration in which nobody trains).
  ParallelConfig next_parallel(const std::vector<int>& lost, const std::vector<int>& joined) const;

 private:
  JobPlan() = default;
  void lay_out();  // the layouts and members of parallel_
  void link_stages(RankView& v) const;  // v's stage and pipeline peers

  Config config_;
  JobShape shape_;
  ParallelConfig parallel_;
  std::uint64_t epoch_ = 0;
  std::vector<RankPlace> places_;
  std::vector<int> members_;
  std::vector<model::StageRange> stages_;
  std::vector<std::array<layout::JobLayout, 3>> layouts_;  // per stage: heads, neurons, vocab
  std::vector<HostPlacement> hosts_;
};

// The layout library's view of the job for `units` units of `kind`: heads
// (GPT-2 heads, Llama KV groups) stay whole, neuron-like kinds (FFN neurons,
// Llama's SwiGLU neurons, vocabulary rows) are cut in blocks of
// parallel.align (layout/shares.h); under parallel.balance = "work" each
// slot's share follows its speed (parallel.speeds).
// With parallel.pp > 1, the TP groups of stage `stage`; a replica that does
// not train (some stage below parallel.min_tp) has every slot failed there.
layout::JobConfig job_config(const ParallelConfig& parallel, model::UnitKind kind, std::int64_t units,
                             int stage = 0);

// The transition plans of the three unit kinds of stage `stage` from `from`
// to `to`; `stale` slots never serve and receive all they hold
// (layout/transition.h). Throws layout::UnitsLostError when no valid holder
// is left for some units.
KindPlans transition(const JobPlan& from, const JobPlan& to, const std::vector<layout::SlotRef>& stale,
                     int stage = 0);

// "node 0: replica 0 (ranks 0-3); node 1: replica 1 (ranks 4-7)".
std::string describe_placement(const std::vector<HostPlacement>& hosts);

}  // namespace ntp::train
