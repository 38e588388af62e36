#include "train/ntp_trainer.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <thread>
#include <tuple>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "comm/group.h"
#include "comm/heartbeat.h"
#include "comm/store.h"
#include "model/model_file.h"
#include "model/model.h"
#include "model/optimizer.h"
#include "train/dataset.h"
#include "train/checkpoint.h"
#include "train/checkpoint_saver.h"
#include "train/commit_record.h"
#include "train/evaluate.h"
#include "train/grad_norm.h"
#include "train/group_handle.h"
#include "train/lr_schedule.h"
#include "train/model_setup.h"
#include "train/overlapped_sync.h"
#include "train/power_setup.h"
#include "train/run_dir.h"
#include "train/schedule.h"
#include "train/trace.h"
#include "layout/errors.h"

namespace ntp::train {
namespace {

// Every rank holds, per unit kind, the units of its slot in that kind's layout.
struct RankLayout {
  KindViews views;
  model::Shard shard;
  std::vector<int> active;  // slots of the rank's replica, TP-group order
  // Every training replica holds exactly its sync partition of the vocabulary
  // (none at a TP degree above K) and there are several: wte's gradient may
  // be synced in two parts (OverlappedSync's split_embedding).
  bool vocab_split_ok = false;
};

RankLayout plan_rank(const ParallelConfig& p, const model::GptConfig& gpt, RankPlace me) {
  RankLayout out;
  const layout::JobLayout heads = layout::plan_job(job_config(p, model::UnitKind::kHead, gpt.head_units()));
  const layout::JobLayout neurons = layout::plan_job(job_config(p, model::UnitKind::kNeuron, gpt.ffn()));
  const layout::JobLayout vocab = layout::plan_job(job_config(p, model::UnitKind::kVocab, gpt.padded_vocab));
  out.views = {heads.slot_view(me.replica, me.slot), neurons.slot_view(me.replica, me.slot),
               vocab.slot_view(me.replica, me.slot)};
  out.shard = {out.views.heads.units, out.views.neurons.units, out.views.vocab.units};
  out.active = layout::alive_slots(job_config(p, model::UnitKind::kHead, gpt.head_units()), me.replica);
  int training = 0;
  bool no_extra_slots = true;
  for (int r = 0; r < vocab.num_replicas(); ++r) {
    if (vocab.replica(r).dropped) continue;
    ++training;
    no_extra_slots = no_extra_slots && vocab.replica(r).pre_sync.empty();
  }
  out.vocab_split_ok = training > 1 && no_extra_slots && !gpt.llama();  // a tied embedding only
  return out;
}

// Groups on the per-layer or per-bucket path skip the comm layer's per-call
// descriptor check (one extra all-gather per call); the world group keeps it.
comm::GroupOptions rank_group_options(const Config& c, const WorkerOptions& w, std::uint64_t epoch,
                                 std::vector<int> ranks, std::string name, bool check_inputs) {
  comm::GroupOptions o;
  o.epoch = epoch;
  o.ranks = std::move(ranks);
  o.global_rank = w.rank;
  o.name = std::move(name);
  o.timeout = std::chrono::milliseconds(static_cast<long>(c.deadline.collective_s * 1000));
  o.connect_timeout = std::chrono::milliseconds(static_cast<long>(c.deadline.rendezvous_s * 1000));
  o.world_size = w.world_size;
  o.check_inputs = check_inputs;
  o.is_dead = w.is_dead;
  o.hostname = w.gloo_host;
  o.interface = w.gloo_iface;
  return o;
}

// NTP_TEST_SLOW_UPDATE = "RANK:SECONDS", honoured only with
// NTP_TEST_MUTATIONS=1: that rank sleeps in every update, a straggler whose
// delay only the next step can see (the step-time test).
double slow_update_s(int rank) {
  const char* allowed = std::getenv("NTP_TEST_MUTATIONS");
  const char* spec = std::getenv("NTP_TEST_SLOW_UPDATE");
  if (allowed == nullptr || std::string(allowed) != "1" || spec == nullptr) return 0.0;
  int slow_rank = -1;
  double seconds = 0.0;
  if (std::sscanf(spec, "%d:%lf", &slow_rank, &seconds) != 2) {
    throw std::invalid_argument(fmt::format("NTP_TEST_SLOW_UPDATE = \"{}\": expected RANK:SECONDS", spec));
  }
  return slow_rank == rank ? seconds : 0.0;
}

// NTP_TEST_SLOW_COMPUTE = "SECONDS:RANK:FACTOR", honoured only with
// NTP_TEST_MUTATIONS=1: every rank's compute takes SECONDS longer per sample,
// rank RANK's FACTOR x SECONDS, each divided by the speed-up its replica's
// power plan gives it: a GPU whose speed follows its power limit as the
// device model says (the measured-need test).
double slow_compute_s_per_sample(int rank) {
  const char* allowed = std::getenv("NTP_TEST_MUTATIONS");
  const char* spec = std::getenv("NTP_TEST_SLOW_COMPUTE");
  if (allowed == nullptr || std::string(allowed) != "1" || spec == nullptr) return 0.0;
  double seconds = 0.0;
  int slow_rank = -1;
  double factor = 1.0;
  if (std::sscanf(spec, "%lf:%d:%lf", &seconds, &slow_rank, &factor) != 3) {
    throw std::invalid_argument(
        fmt::format("NTP_TEST_SLOW_COMPUTE = \"{}\": expected SECONDS:RANK:FACTOR", spec));
  }
  return slow_rank == rank ? seconds * factor : seconds;
}

}  // namespace

const char* to_string(StepPhase phase) {
  switch (phase) {
    case StepPhase::kStart:
      return "start";
    case StepPhase::kForward:
      return "forward";
    case StepPhase::kBackward:
      return "backward";
    case StepPhase::kSync:
      return "sync";
    case StepPhase::kCommit:
      return "commit";
    case StepPhase::kOptimizer:
      return "optimizer";
    case StepPhase::kCheckpoint:
      return "checkpoint";
  }
  return "?";
}

bool trains(const ParallelConfig& p, std::int64_t replica) {
  return static_cast<std::int64_t>(p.active_slots(replica).size()) >= p.min_tp;
}

KindPlans transition_plans(const ParallelConfig& from, const ParallelConfig& to,
                           const model::GptConfig& gpt, const std::vector<layout::SlotRef>& stale) {
  const auto plan = [&](model::UnitKind unit_kind, std::int64_t units, const char* kind) {
    layout::TransitionPlan p = layout::plan_transition(layout::plan_job(job_config(from, unit_kind, units)),
                                                       layout::plan_job(job_config(to, unit_kind, units)), stale);
    if (!p.recoverable()) {
      throw layout::UnitsLostError(fmt::format(
          "no surviving holder at the resume step has these {}: {}", kind,
          p.lost_summary()));
    }
    return p;
  };
  return {plan(model::UnitKind::kHead, gpt.head_units(), gpt.llama() ? "KV groups" : "heads"),
          plan(model::UnitKind::kNeuron, gpt.ffn(), "FFN neurons"),
          plan(model::UnitKind::kVocab, gpt.padded_vocab, "vocabulary rows")};
}

// Everything of a rank that is built from the data, the model and the
// current configuration.
struct NtpTrainer::Impl {
  RunDir run;
  model::TokenData data;
  std::optional<model::TokenData> val;  // data.val_path
  DataIdentity data_identity;           // data's, checked against the job's record
  ModelSetup setup;
  SampleSchedule schedule;
  RankLayout layout;
  std::unique_ptr<RankPowerRun> power;
  std::unique_ptr<comm::Group> world;
  GroupHandle tp;                        // the model's TP collectives (compute thread)
  std::unique_ptr<comm::Group> tp_sync;  // the same ranks, for the reshard (comm thread)
  std::unique_ptr<comm::Group> dp;
  std::unique_ptr<tensor::Context> ctx;
  std::unique_ptr<model::Model> model;
  std::unique_ptr<model::AdamW> optimizer;
  std::unique_ptr<model::ParameterLayout> full;
  std::unique_ptr<OverlappedSync> sync;
  std::unique_ptr<CheckpointSaver> saver;
  std::vector<std::int64_t> shares;
  TraceRecorder compute;
  TraceRecorder comm_trace;
  StepClock clock;
  std::int64_t first_traced = 0;

  Impl(const Config& config, const std::filesystem::path& run_dir, const std::string& label, int rank)
      : run(RunDir::open(run_dir)),
        data(open_dataset(config.data, run_dir)),
        val(open_val_dataset(config.data)),
        data_identity(identity_of(data, config.data.path)),
        setup(resolve_model(config.model, data.max_token())),
        schedule(samples_in(data.size(), setup.seq_len), config.train.global_batch, config.data.order,
                 config.train.seed),
        compute(rank, label, unix_time_s()),
        comm_trace(rank, label, unix_time_s()),
        first_traced(config.train.steps > 1 ? 1 : 0) {}
};

NtpTrainer::NtpTrainer(const Config& config, const std::filesystem::path& run_dir,
                       const WorkerOptions& options)
    : config_(config), options_(options), places_(job_places(config.parallel)), parallel_(config.parallel) {
  if (options.world_size != static_cast<int>(places_.size())) {
    throw std::invalid_argument(fmt::format(
        "WORLD_SIZE = {}, but the configuration has {} active slots in training replicas",
        options.world_size, places_.size()));
  }
  me_ = places_.at(static_cast<std::size_t>(options.rank));
  if (config.test.mutation_rank < 0 || config.test.mutation_rank == options.rank) {
    mutation_ = parse_mutation(config.test.mutation);
  }
  members_ = training_ranks(parallel_);
  writer_rank_ = members_.front();
  impl_ = std::make_unique<Impl>(
      config, run_dir, fmt::format("rank {}: replica {} slot {}", options.rank, me_.replica, me_.slot),
      options.rank);
  Impl& x = *impl_;
  JobData read{x.data_identity, std::nullopt};
  if (x.val) read.val = identity_of(*x.val, config.data.val_path);
  check_job_data(run_dir, read);  // a rank started (again) mid-run reads the file again
  x.power = std::make_unique<RankPowerRun>(config, x.run, PowerRank{options.rank, me_.replica, me_.slot},
                                           options.gpu);
  adopt(parallel_, epoch_);
  store_ = comm::open_store(options_.store);
  tensor::set_huge_pages(config.model.huge_pages);
  x.ctx = std::make_unique<tensor::Context>(thread_setup(config.model, options.ranks_on_host));
  x.model = std::make_unique<model::Model>(x.setup.gpt, x.layout.shard, *x.ctx, &x.tp);
  const double init_start = unix_time_s();
  init_model(config.model, static_cast<std::uint64_t>(config.train.seed), *x.model);
  const double init_s = unix_time_s() - init_start;
  x.optimizer = std::make_unique<model::AdamW>(adamw_config(config.train), x.model->layout());
  if (mutation_ == Mutation::kLnFrozen) x.optimizer->freeze_for_test("h0.ln1_w");
  x.full = std::make_unique<model::ParameterLayout>(x.setup.gpt, model::Shard::full(x.setup.gpt));
  x.saver = std::make_unique<CheckpointSaver>(config_, x.run);
  if (!config.run.resume.empty()) load_checkpoint(config.run.resume);
  x.run.event("rank_ready", {{"rank", options.rank},
                             {"replica", me_.replica},
                             {"slot", me_.slot},
                             {"pid", static_cast<int>(::getpid())},
                             {"heads", x.layout.shard.heads.to_string()},
                             {"neurons", x.layout.shard.neurons.to_string()},
                             {"vocab", x.layout.shard.vocab.to_string()},
                             {"sync_group", x.layout.views.heads.sync_group},
                             {"threads", x.ctx->describe()},
                             {"init_s", init_s}});
}

NtpTrainer::~NtpTrainer() = default;

void NtpTrainer::event(const std::string& name, nlohmann::json fields) const {
  fields["rank"] = options_.rank;
  impl_->run.event(name, std::move(fields));
}

int NtpTrainer::global_rank_of(layout::SlotRef slot) const {
  const auto it = std::find(places_.begin(), places_.end(), RankPlace{slot.replica, slot.slot});
  if (it == places_.end()) {
    throw std::logic_error(fmt::format("replica {} slot {} has no process", slot.replica, slot.slot));
  }
  return static_cast<int>(it - places_.begin());
}

std::vector<int> NtpTrainer::training_ranks(const ParallelConfig& p) const {
  return train::training_ranks(p, places_);
}

comm::GroupOptions NtpTrainer::group_options(std::uint64_t epoch, std::vector<int> ranks, std::string name) const {
  return rank_group_options(config_, options_, epoch, std::move(ranks), std::move(name), true);
}

const model::GptConfig& NtpTrainer::gpt() const { return impl_->setup.gpt; }

void NtpTrainer::adopt(const ParallelConfig& next, std::uint64_t epoch) {
  Impl& x = *impl_;
  parallel_ = next;
  epoch_ = epoch;
  live_epoch_ = epoch;
  members_ = training_ranks(parallel_);
  if (!trains_now()) return;
  x.layout = plan_rank(parallel_, x.setup.gpt, me_);
  x.shares = x.power->configure(parallel_, config_.train.global_batch, x.setup);
}

bool NtpTrainer::trains_now() const { return trains(parallel_, me_.replica); }

void NtpTrainer::connect() {
  Impl& x = *impl_;
  x.world = comm::create_group(store_, rank_group_options(config_, options_, epoch_, members_, "world", true));
  std::vector<int> replica;
  for (int slot : x.layout.active) replica.push_back(global_rank_of({me_.replica, slot}));
  x.tp.reset(comm::create_group(
      store_, rank_group_options(config_, options_, epoch_, replica, fmt::format("tp/r{}", me_.replica), false)));
  x.tp_sync = comm::create_group(
      store_, rank_group_options(config_, options_, epoch_, replica, fmt::format("tpsync/r{}", me_.replica), false));
  const int j = x.layout.views.heads.sync_group;
  if (j >= 0) {
    // DP groups come from the layout's core lists, never from physical slot ids.
    const layout::JobLayout heads =
        layout::plan_job(job_config(parallel_, model::UnitKind::kHead, x.setup.gpt.head_units()));
    std::vector<int> members;
    for (const auto& [r, slot] : heads.sync_group_members(j)) members.push_back(global_rank_of({r, slot}));
    x.dp = comm::create_group(
        store_, rank_group_options(config_, options_, epoch_, members, fmt::format("dp/core{}", j), false));
  }
  const SyncOptions sync{config_.sync.bucket_mb, config_.sync.split_embedding && x.layout.vocab_split_ok,
                         config_.sync.pipeline};
  x.sync = std::make_unique<OverlappedSync>(x.model->layout(), *x.full, x.layout.views, x.layout.active,
                                            *x.tp_sync, x.dp.get(), sync);
  x.sync->mispair_for_test(options_.mispair_rank == options_.rank);
  x.sync->keep_replicated_for_test(mutation_ == Mutation::kReplicatedUnsynced);
}

void NtpTrainer::drop_groups() {
  Impl& x = *impl_;
  for (comm::Group* g : {x.world.get(), x.tp.get(), x.tp_sync.get(), x.dp.get()}) {
    if (g != nullptr) g->abort("a member failed");
  }
  x.sync.reset();  // joins the communication thread: abort ended its call
  x.dp.reset();
  x.tp_sync.reset();
  x.tp.reset(nullptr);
  x.world.reset();
}

StepMetrics NtpTrainer::step(std::int64_t s) {
  Impl& x = *impl_;
  if (s != applied_ + 1) {
    throw std::logic_error(fmt::format("rank {}: step {} after applied step {}", options_.rank, s, applied_));
  }
  const auto fault = [&](StepPhase phase) {
    if (fault_point_) fault_point_(s, phase);
  };
  fault(StepPhase::kStart);
  const double start = unix_time_s();
  const bool traced = s >= x.first_traced && s < x.first_traced + config_.run.trace_steps;
  const std::int64_t T = x.setup.seq_len;
  const auto parts = assign_samples(x.schedule.step_samples(s), x.shares);
  std::vector<std::int64_t> mine = parts[static_cast<std::size_t>(me_.replica)];
  mutate_samples(s, mine);
  x.model->zero_grad();
  x.model->set_loss_scale(1.0f / static_cast<float>(
                                     (mutation_ == Mutation::kLocalLossScale ? static_cast<std::int64_t>(mine.size())
                                                                             : config_.train.global_batch) *
                                     T));
  double loss_sum = 0;
  double forward_s = 0;
  std::vector<std::int32_t> inputs;
  std::vector<std::int32_t> targets;
  std::size_t next = 0;
  const std::vector<std::int64_t> micros =
      micro_batches(static_cast<std::int64_t>(mine.size()), config_.train.micro_batch);
  x.sync->begin(x.model->grad_buffer(), s);  // each range is read once backward reports it ready
  model::BackwardHooks hooks;
  hooks.grads_ready = [&x](std::size_t first, std::size_t last) { x.sync->grads_ready(first, last); };
  if (x.sync->splits_embedding()) {
    hooks.embedding_rows = [&x](const model::EmbeddingRows& rows) { x.sync->embedding_rows(rows); };
  }
  for (std::size_t k = 0; k < micros.size(); ++k) {
    const std::int64_t micro = micros[k];
    inputs.resize(static_cast<std::size_t>(micro * T));
    targets.resize(inputs.size());
    for (std::int64_t i = 0; i < micro; ++i, ++next) {
      x.data.sample(mine[next], T, inputs.data() + i * T, targets.data() + i * T);
    }
    const double t0 = unix_time_s();
    fault(StepPhase::kForward);
    loss_sum += x.model->forward({inputs.data(), targets.data(), micro, T}).sum;
    if (const double slow_s = slow_compute_s_per_sample(options_.rank); slow_s > 0) {
      std::this_thread::sleep_for(std::chrono::duration<double>(micro * slow_s / x.power->speedup(me_.replica)));
    }
    forward_s += unix_time_s() - t0;
    fault(StepPhase::kBackward);
    // Only the last micro-batch's backward makes gradients final: it drives the sync.
    x.model->backward(k + 1 == micros.size() ? hooks : model::BackwardHooks{});
    if (traced) x.compute.add({"forward+backward", Track::kCompute, t0, unix_time_s() - t0, s});
  }
  fault(StepPhase::kSync);
  const SyncTotals totals = x.sync->finish();
  if (traced) {
    for (const TraceSpan& span : totals.spans) x.comm_trace.add(span);
    x.compute.add({"wait for sync", Track::kCompute, unix_time_s() - totals.exposed_s, totals.exposed_s, s});
  }

  // The commit point: one all-gather of every rank's record. Nothing that
  // decides the update comes after it.
  CommitRecord mine_rec;
  mine_rec.loss_sum = x.tp.rank() == 0 ? loss_sum : 0.0;
  mine_rec.reshard_bytes = totals.bytes.reshard;
  mine_rec.allreduce_bytes = totals.bytes.allreduce;
  mine_rec.exposed_sync_s = totals.exposed_s;
  mine_rec.elapsed_s = unix_time_s() - start;
  mine_rec.forward_s = forward_s;
  mine_rec.norm = grad_norm_part(*x.model);
  mine_rec.replica = me_.replica;
  mine_rec.join_pending = is_writer() && options_.join_pending && options_.join_pending(members_);
  mine_rec.checkpoint_due = is_writer() && x.saver->time_due();
  mine_rec.save_busy = x.saver->busy();
  mine_rec.stop = StopRequest::signal() != 0;
  std::vector<std::int64_t> record(CommitRecord::kWords);
  mine_rec.write(record.data());
  std::vector<std::int64_t> all(record.size() * members_.size());
  pending_commit_ = s;  // this step's synced gradients are final from here on
  x.world->all_gather(comm::ConstView(record.data(), record.size()), comm::View(all.data(), all.size()));
  const CommitTotals t = commit_totals(all, members_.size(), parallel_.dp);
  const std::optional<double> cycle_s = x.clock.commit(s, epoch_, unix_time_s());
  fault(StepPhase::kCommit);

  StepMetrics m;
  m.step = s;
  m.epoch = x.schedule.epoch_of(s);
  m.lr = learning_rate(config_.train, s);
  m.tokens = config_.train.global_batch * T;
  m.loss = t.loss_sum / static_cast<double>(m.tokens);
  m.grad_norm = t.grad_norm;
  if (!std::isfinite(m.loss) || !std::isfinite(m.grad_norm)) {
    // Every rank sees the same totals: all stop, or all skip the update alike.
    if (config_.train.on_nan == NanPolicy::kStop) {
      throw NonFiniteError(fmt::format("step {}: non-finite {} (loss {}, gradient norm {}); train.on_nan = "
                                       "\"stop\"",
                                       s, std::isfinite(m.loss) ? "gradient norm" : "loss", m.loss, m.grad_norm));
    }
  }
  const double opt_start = unix_time_s();
  fault(StepPhase::kOptimizer);
  if (const double slow_s = slow_update_s(options_.rank); slow_s > 0) {
    std::this_thread::sleep_for(std::chrono::duration<double>(slow_s));
  }
  m.skipped = !std::isfinite(m.loss) || !std::isfinite(m.grad_norm);
  apply_update(s, m.grad_norm, m.skipped);
  const double opt_s = unix_time_s() - opt_start;
  join_pending_ = t.join_pending;
  if (traced) x.compute.add({"optimizer", Track::kCompute, opt_start, opt_s, s});
  m.reshard_bytes = t.reshard_bytes;
  m.allreduce_bytes = t.allreduce_bytes;
  m.samples = x.shares;
  m.tp = split_input(parallel_, config_.train.global_batch).active;
  m.exposed_sync_s = t.exposed_sync_s;
  m.sync_wait_max_s = t.sync_wait_max_s;
  // From the previous commit (the slowest rank's previous update and this
  // step); a first step after a start or a new epoch has no previous commit:
  // the slowest rank to this commit, then this rank's update.
  m.step_time_s = cycle_s.value_or(t.elapsed_s + opt_s);
  m.power = x.power->metrics();
  m.time = unix_time_s();
  // From the commit record every rank holds: the same re-plan everywhere,
  // in force from the next step (this step's metrics keep the plan it ran with).
  if (auto shares = x.power->observe(t.replica_compute_s)) x.shares = std::move(*shares);
  last_metrics_ = m;
  last_parts_ = parts;
  // After the update: a death in this pass is a death before the next step.
  if (x.val && eval_due(config_.train, s)) {
    const double eval_start = unix_time_s();
    m.val_loss = validation_loss();
    x.clock.off_clock(unix_time_s() - eval_start);
  }
  if (is_writer()) {
    x.run.append_schedule(s, m.epoch, parts);
    x.run.append_metrics(m);
  }
  stop_requested_ = t.stop;
  const bool last = t.stop || s + 1 == config_.train.steps;
  if (!last && (t.checkpoint_due || x.saver->step_due(s + 1)) && t.save_busy) {
    // A rank of the writer's replica is still writing the previous save:
    // every rank skips this one alike (the vote is in the commit record).
    if (is_writer()) x.saver->skip(s + 1, options_.rank);
  } else if (last || t.checkpoint_due || x.saver->step_due(s + 1)) {
    const double save_start = unix_time_s();
    save_checkpoint(s + 1, last);
    x.clock.off_clock(unix_time_s() - save_start);
  }
  return m;
}

namespace {

// Set by a writer whose part of the checkpoint after `steps_done` steps, in
// layout epoch `epoch`, could not be written.
std::string part_failed_key(std::uint64_t epoch, std::int64_t steps_done, int rank) {
  return fmt::format("ntp/checkpoint/e{}/s{}/part_failed/{}", epoch, steps_done, rank);
}

}  // namespace

void NtpTrainer::save_checkpoint(std::int64_t steps_done, bool last) {
  Impl& x = *impl_;
  const int writer_replica = places_.at(static_cast<std::size_t>(writer_rank_)).replica;
  SaveJob job;
  job.info = checkpoint_info(config_, x.setup.gpt, x.setup.seq_len, x.data_identity, steps_done, x.optimizer->steps(),
                             parallel_,
                             epoch_);
  job.epoch = epoch_;
  job.rank = options_.rank;
  job.assemble = is_writer();
  // One replica holds every unit once: its ranks write, TP rank 0 also the replicated tensors.
  for (int r : members_) {
    if (places_.at(static_cast<std::size_t>(r)).replica == writer_replica) job.writers.push_back(r);
  }
  if (me_.replica != writer_replica && !job.assemble) return;
  const double start = unix_time_s();
  x.saver->wait();  // one save in flight
  job.wait_s = unix_time_s() - start;
  if (me_.replica == writer_replica) {
    // Runs in the save thread while the next step computes; the state changes
    // only at that step's update, which waits for it (apply_update). The last
    // save writes the state itself: nothing waits for it but the end.
    job.copy = [&layout = x.model->layout(), params = std::span<const float>(x.model->params()),
                m = std::span<const float>(x.optimizer->m().span()),
                v = std::span<const float>(x.optimizer->v().span()),
                replicated = x.tp.rank() == 0, last](std::vector<float> reuse) {
      if (last) return part_view(layout, params, m, v, replicated);
      return snapshot_part(layout, params, m, v, replicated, std::move(reuse));
    };
  }
  // A writer lost during the save: the survivors reconfigure, and the parts
  // of this epoch's save will never all exist. Its heartbeat tells it too, and
  // sooner where no recovery follows (a save for SIGINT: the others are done
  // with their steps, so no collective fails): without it the writer waited
  // for the lost part until deadline.checkpoint_s or the launcher's grace.
  // Only a beat that is there and old counts: a key missing for a moment (a
  // store that restarted empty) or a store that does not answer is no
  // verdict on the writer, and the wait goes on (deadline.checkpoint_s).
  // A writer whose part failed (a full disk) says so in the store.
  const auto max_age = static_cast<std::int64_t>(config_.deadline.heartbeat_s * 1000);
  job.abandoned = [this, epoch = epoch_, steps_done, max_age](int rank) {
    if (live_epoch_.load() != epoch) return true;
    try {
      if (store_->try_get(part_failed_key(epoch, steps_done, rank))) return true;
      return comm::heartbeat_ages_ms(*store_, {rank}).at(0) > max_age;
    } catch (const std::exception&) {
      return false;
    }
  };
  job.part_failed = [this, epoch = epoch_, steps_done](const std::string& reason) {
    store_->set(part_failed_key(epoch, steps_done, options_.rank), comm::to_bytes(reason));
  };
  job.before_part = [this, s = steps_done - 1] {
    if (fault_point_) fault_point_(s, StepPhase::kCheckpoint);
  };
  if (job.assemble) job.config_toml = checkpoint_config_toml(config_, parallel_);
  x.saver->save(std::move(job));
}

void NtpTrainer::wait_for_checkpoint() { impl_->saver->wait(); }

void NtpTrainer::save_resume_state(std::int64_t resume) {
  if (resume <= 0 || resume > config_.train.steps) return;  // nothing applied yet, or past the run
  if (resume == config_.train.steps || impl_->saver->step_due(resume)) save_checkpoint(resume, resume == config_.train.steps);
}

void NtpTrainer::load_checkpoint(const std::filesystem::path& dir) {
  Impl& x = *impl_;
  const double start = unix_time_s();
  const Checkpoint checkpoint = Checkpoint::open(dir);
  checkpoint.check_model(x.setup.gpt);
  checkpoint.load(x.model->layout(), x.model->params(), x.optimizer->m().span(), x.optimizer->v().span());
  x.optimizer->set_steps(checkpoint.info().optimizer_steps);
  applied_ = checkpoint.info().step - 1;
  event("checkpoint_loaded", {{"path", dir.string()}, {"step", checkpoint.info().step},
                              {"seconds", unix_time_s() - start}});
}

double NtpTrainer::validation_loss() {
  Impl& x = *impl_;
  const std::int64_t T = x.setup.seq_len;
  const std::vector<std::int64_t> ids = eval_samples(*x.val, T, config_.train);
  const std::vector<std::int64_t> mine = eval_share(ids, x.shares, me_.replica);
  const double sum = forward_loss_sum(*x.model, *x.val, mine, T, config_.train.micro_batch);
  double total = x.tp.rank() == 0 ? sum : 0.0;  // every TP rank holds its replica's sum
  x.world->all_reduce(&total, 1);
  return total / static_cast<double>(static_cast<std::int64_t>(ids.size()) * T);
}

void NtpTrainer::wait_for_checkpoint_copy(std::int64_t s) {
  const double blocked = impl_->saver->wait_for_copy();
  if (blocked > 1e-3) event("checkpoint_copy_waited", {{"step", s}, {"seconds", blocked}});
}

void NtpTrainer::apply_update(std::int64_t s, double grad_norm, bool skipped) {
  Impl& x = *impl_;
  wait_for_checkpoint_copy(s);
  if (!skipped) {
    const double lr = learning_rate(config_.train, s) * (mutation_ == Mutation::kUpdateScaled ? 1.01 : 1.0);
    x.optimizer->step_with_norm(*x.model, static_cast<float>(lr), grad_norm);
  }
  applied_ = s;
  pending_commit_ = -1;
  last_commit_ = {grad_norm, skipped};
}

void NtpTrainer::complete_commit(std::int64_t s, const CommitOutcome& outcome) {
  if (pending_commit_ != s || applied_ != s - 1) {
    throw std::logic_error(fmt::format("rank {}: cannot complete the commit of step {} (applied {}, pending {})",
                                       options_.rank, s, applied_, pending_commit_));
  }
  apply_update(s, outcome.grad_norm, outcome.skipped);
}

void NtpTrainer::take_over_logs(std::int64_t resume) {
  Impl& x = *impl_;
  const auto last_step = [&](const char* name) {
    const std::vector<nlohmann::json> rows = x.run.truncate_jsonl_from_step(name, resume);
    return rows.empty() ? std::int64_t{-1} : rows.back().at("step").get<std::int64_t>();
  };
  const std::int64_t logged_schedule = last_step("schedule.jsonl");
  const std::int64_t logged_metrics = last_step("metrics.jsonl");
  if (!last_metrics_ || last_metrics_->step != resume - 1) return;
  if (logged_schedule < resume - 1) x.run.append_schedule(resume - 1, last_metrics_->epoch, *last_parts_);
  if (logged_metrics < resume - 1) x.run.append_metrics(*last_metrics_);
}

StateHashes NtpTrainer::state_hashes() const {
  const Impl& x = *impl_;
  return hash_state(x.model->layout(), x.model->params(), x.optimizer->m().span(), x.optimizer->v().span());
}

StateMoveStats NtpTrainer::move_state(const ParallelConfig& next, const KindPlans& plans,
                                      comm::Group& exchange, const std::vector<int>& survivors,
                                      bool stale, std::optional<int> replicated_source,
                                      std::int64_t resume_applied) {
  Impl& x = *impl_;
  wait_for_checkpoint_copy(applied_ + 1);  // the move rewrites the state a save may be copying
  if (replicated_source) {
    // Replicated tensors and the optimizer's step count of a holder at the
    // resume step, for the ranks rolled forward (every survivor takes part).
    std::vector<float> values;
    const std::span<const float> states[3] = {x.model->params(), x.optimizer->m().span(),
                                              x.optimizer->v().span()};
    for (const std::span<const float>& state : states) {
      for (const model::TensorSpec& spec : x.model->layout().tensors()) {
        if (spec.kind != model::UnitKind::kReplicated) continue;
        values.insert(values.end(), state.begin() + spec.offset, state.begin() + spec.offset + spec.count);
      }
    }
    const int root = static_cast<int>(std::lower_bound(survivors.begin(), survivors.end(), *replicated_source) -
                                      survivors.begin());
    exchange.broadcast(comm::View(values.data(), values.size()), root);
    if (stale) {
      std::size_t at = 0;
      const std::span<float> targets[3] = {x.model->params(), x.optimizer->m().span(), x.optimizer->v().span()};
      for (const std::span<float>& state : targets) {
        for (const model::TensorSpec& spec : x.model->layout().tensors()) {
          if (spec.kind != model::UnitKind::kReplicated) continue;
          std::copy_n(values.begin() + static_cast<std::ptrdiff_t>(at), spec.count, state.begin() + spec.offset);
          at += static_cast<std::size_t>(spec.count);
        }
      }
      x.optimizer->set_steps(resume_applied + 1);
      applied_ = resume_applied;
      pending_commit_ = -1;
    }
  }
  StateMoveRank mover;
  mover.from = layout::SlotRef{me_.replica, me_.slot};
  if (trains(next, me_.replica)) mover.to = layout::SlotRef{me_.replica, me_.slot};
  mover.stale = stale && mutation_ != Mutation::kSkipRollForward;
  mover.group_rank_of = [&](layout::SlotRef slot) {
    const int global = global_rank_of(slot);
    return static_cast<int>(std::lower_bound(survivors.begin(), survivors.end(), global) - survivors.begin());
  };
  const RankLayout next_layout = plan_rank(next, x.setup.gpt, me_);
  return train::move_state(*x.model, *x.optimizer, next_layout.shard, plans, mover, exchange);
}

void NtpTrainer::mutate_samples(std::int64_t s, std::vector<std::int64_t>& mine) const {
  if (s != 1 || me_.replica != 0 || mine.size() < 2) return;
  if (mutation_ == Mutation::kSampleTwice) mine[1] = mine[0];
  if (mutation_ == Mutation::kSampleSkipped) mine.pop_back();
}

void NtpTrainer::finish() {
  Impl& x = *impl_;
  x.saver->wait();
  if (mutation_ == Mutation::kUnitDrift) {
    for (const model::TensorSpec& spec : x.model->layout().tensors()) {
      if (spec.kind == model::UnitKind::kReplicated || spec.count == 0) continue;
      float& value = x.model->params()[static_cast<std::size_t>(spec.offset)];
      value = std::nextafter(value, 1e30f);
      break;
    }
  }
  // The writer's replica holds every unit once: sum its ranks' pieces into a full buffer.
  std::vector<float> values(static_cast<std::size_t>(x.full->size()), 0.0f);
  const RankPlace writer_place = places_.at(static_cast<std::size_t>(writer_rank_));
  if (me_.replica == writer_place.replica) {
    model::gather_into_full(x.model->layout(), x.model->params(), *x.full, values, x.tp.rank() == 0);
    x.tp.all_reduce(values.data(), values.size());
  }
  if (is_writer()) {
    // A writer lost while it wrote model.bin left its temporary file (the
    // model's size): gone once the file is whole.
    model::write_model_file(x.run.file("model.bin").string(), x.setup.gpt, values);
    for (const auto& entry : std::filesystem::directory_iterator(x.run.path())) {
      if (entry.path().filename().string().starts_with("model.bin.tmp.")) std::filesystem::remove(entry.path());
    }
  }
  nlohmann::json hashes = state_hashes().to_json();
  hashes["rank"] = options_.rank;
  hashes["replica"] = me_.replica;
  hashes["slot"] = me_.slot;
  hashes["step"] = applied_;
  hashes["epoch"] = epoch_;
  std::filesystem::create_directories(x.run.path() / "hashes");
  write_file_atomic(x.run.path() / "hashes" / fmt::format("rank-{}.json", options_.rank), hashes.dump() + "\n");
  if (config_.run.trace_steps > 0) {
    x.compute.append(x.comm_trace);
    x.compute.write(x.run.path() / "trace" / fmt::format("rank-{}.json", options_.rank));
  }
  x.world->barrier();
  if (is_writer() && config_.run.trace_steps > 0) {
    merge_traces(x.run.path() / "trace", x.run.file("trace.json"));
  }
}

void NtpTrainer::restore_power(const char* cause) noexcept {
  if (impl_ && impl_->power) impl_->power->restore(cause);
}

std::vector<RankPlace> job_places(const ParallelConfig& p) {
  std::vector<RankPlace> places;
  for (std::int64_t r = 0; r < p.dp; ++r) {
    if (!trains(p, r)) continue;
    for (std::int64_t slot : p.active_slots(r)) {
      places.push_back({static_cast<int>(r), static_cast<int>(slot)});
    }
  }
  return places;
}

std::vector<int> training_ranks(const ParallelConfig& p, const std::vector<RankPlace>& places) {
  std::vector<int> ranks;
  for (const RankPlace& place : job_places(p)) {
    const auto it = std::find(places.begin(), places.end(), place);
    if (it == places.end()) {
      throw std::logic_error(fmt::format("replica {} slot {} has no process", place.replica, place.slot));
    }
    ranks.push_back(static_cast<int>(it - places.begin()));
  }
  std::sort(ranks.begin(), ranks.end());
  return ranks;
}

layout::JobConfig job_config(const ParallelConfig& p, model::UnitKind kind, std::int64_t units) {
  layout::JobConfig c;
  c.units = units;
  c.align = kind == model::UnitKind::kHead ? 1 : p.align;
  c.tp = static_cast<int>(p.tp);
  c.replicas = static_cast<int>(p.dp);
  c.min_tp = static_cast<int>(p.min_tp);
  for (const auto& [replica, slots] : p.failed) {
    if (slots.empty()) continue;
    std::vector<int>& out = c.failed[static_cast<int>(replica)];
    for (std::int64_t slot : slots) out.push_back(static_cast<int>(slot));
  }
  return c;
}

namespace {

// The checkpoint of run.resume fits the configured model and schedule.
void check_resume(const Config& config, const ModelSetup& setup, const DataIdentity& data) {
  const Checkpoint checkpoint = Checkpoint::open(config.run.resume);
  checkpoint.check_model(setup.gpt);
  const CheckpointInfo& info = checkpoint.info();
  const auto differs = [&](const char* key, const std::string& saved, const std::string& now) {
    if (saved != now) {
      throw CheckpointError(fmt::format("{}: saved with {} = {}, the run has {}", checkpoint.dir().string(), key,
                                        saved, now));
    }
  };
  differs("seq_len", std::to_string(info.seq_len), std::to_string(setup.seq_len));
  differs("train.seed", std::to_string(info.seed), std::to_string(config.train.seed));
  differs("data.order", info.order, to_string(config.data.order));
  differs("train.global_batch", std::to_string(info.global_batch), std::to_string(config.train.global_batch));
  // The schedule's position is a step over these tokens (data.path cannot
  // change on a resume; its contents can).
  if (info.data && !info.data->same_tokens(data)) {
    throw CheckpointError(fmt::format(
        "{}: saved over {} ({}), but data.path now holds {}: the file changed since, and the run would go on over "
        "other samples; put back the data the run trained on",
        checkpoint.dir().string(), info.data->file(), info.data->describe(), data.describe()));
  }
  if (info.step > config.train.steps) {
    throw CheckpointError(fmt::format("{}: holds {} steps, more than train.steps = {}", checkpoint.dir().string(),
                                      info.step, config.train.steps));
  }
}

}  // namespace

JobData check_job(const Config& config, const std::filesystem::path& run_dir) {
  const model::TokenData data = open_dataset(config.data, run_dir);
  const ModelSetup setup = resolve_model(config.model, data.max_token());
  const std::optional<model::TokenData> val = open_val_dataset(config.data);
  if (val) check_val_data(*val, setup.seq_len, setup.gpt.vocab);
  const JobData read = job_data_of(config.data, data, val);
  const std::int64_t samples = samples_in(data.size(), setup.seq_len);
  if (samples < config.train.global_batch) {
    throw ConfigError(fmt::format(
        "train.global_batch: {} sequences per step, but the data holds only {} sequences of {} tokens",
        config.train.global_batch, samples, setup.seq_len));
  }
  if (!config.run.resume.empty()) check_resume(config, setup, read.train);
  const std::tuple<const char*, model::UnitKind, std::int64_t> kinds[] = {
      {setup.gpt.llama() ? "KV groups" : "heads", model::UnitKind::kHead, setup.gpt.head_units()},
      {"FFN neurons", model::UnitKind::kNeuron, setup.gpt.ffn()},
      {"vocabulary rows", model::UnitKind::kVocab, setup.gpt.padded_vocab}};
  for (const auto& [kind, unit_kind, units] : kinds) {
    try {
      layout::plan_job(job_config(config.parallel, unit_kind, units));
    } catch (const std::exception& e) {
      throw ConfigError(fmt::format("parallel.tp: cannot lay out the model's {} {}: {}", units, kind,
                                    e.what()));
    }
  }
  return read;
}

}  // namespace ntp::train
