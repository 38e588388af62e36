#include "train/ntp_trainer.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <exception>
#include <future>
#include <memory>
#include <tuple>
#include <utility>

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
#include "train/pipeline_executor.h"
#include "train/pipeline_schedule.h"
#include "train/power_setup.h"
#include "train/run_dir.h"
#include "train/schedule.h"
#include "train/step_hooks.h"
#include "train/tied_embedding.h"
#include "train/trace.h"
#include "layout/errors.h"

namespace ntp::train {
namespace {

// The tag of the tied embedding's exchange on the pipeline group: above every
// micro-batch's tags ([0, 2m)), which the same group carries each step.
constexpr std::uint32_t kTiedTag = 1u << 30;
// The validation pass's activations: tag kEvalTag + micro-batch.
constexpr std::uint32_t kEvalTag = 1u << 29;

// The position of `rank` in `ranks` (ascending), -1 for -1: a group rank.
int index_in(const std::vector<int>& ranks, int rank) {
  if (rank < 0) return -1;
  const auto it = std::lower_bound(ranks.begin(), ranks.end(), rank);
  if (it == ranks.end() || *it != rank) {
    throw std::logic_error(fmt::format("rank {} is not in the group {}", rank, fmt::join(ranks, ",")));
  }
  return static_cast<int>(it - ranks.begin());
}

// The vocabulary rows the input tokens of `samples` name (each sample's T
// inputs).
layout::IntervalSet input_token_rows(const model::TokenData& data, const std::vector<std::int64_t>& samples,
                                     std::int64_t T) {
  std::vector<std::int32_t> inputs(static_cast<std::size_t>(T)), targets(inputs.size());
  std::vector<std::int32_t> tokens;
  for (std::int64_t id : samples) {
    data.sample(id, T, inputs.data(), targets.data());
    tokens.insert(tokens.end(), inputs.begin(), inputs.end());
  }
  std::sort(tokens.begin(), tokens.end());
  tokens.erase(std::unique(tokens.begin(), tokens.end()), tokens.end());
  layout::IntervalSet rows;
  for (std::int32_t t : tokens) rows.add(t, t + 1);  // merges neighbours; in order, each add appends
  return rows;
}

// The group ranks of `ranks` in `group` (ascending).
std::vector<int> indices_in(const std::vector<int>& group, const std::vector<int>& ranks) {
  std::vector<int> out;
  for (int r : ranks) out.push_back(index_in(group, r));
  return out;
}

}  // namespace

comm::GroupOptions group_options(const Config& c, const WorkerOptions& w, std::uint64_t epoch,
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
  // A member that failed while this epoch's groups were being created marks
  // the epoch failed and goes on to agree on the next one: those blocked here
  // waiting for it would otherwise wait out connect_timeout, and be fenced as
  // silent by the next agreement meanwhile.
  if (w.epoch_failed) o.abandoned = [failed = w.epoch_failed, epoch] { return failed(epoch); };
  // A transport failure in one group of the epoch aborts the others: the
  // rank's other thread then fails at its next call on any of them (within
  // a layer of the backward), not when it next waits for the failed group,
  // and its peers see their sockets close. Detection on the healthy
  // replica took about 0.1 s without this.
  o.on_failure = [epoch](const comm::CommError& e) {
    comm::abort_epoch_groups(epoch, std::string("another group of the epoch failed: ") + e.what());
  };
  o.hostname = w.gloo_host;
  o.interface = w.gloo_iface;
  return o;
}

// Everything of a rank that is built from the data, the model and the
// current configuration.
struct NtpTrainer::Impl {
  RunDir run;
  JobInput input;                        // the data and the model's shape
  model::TokenData& data = input.data;
  std::optional<model::TokenData>& val = input.val;
  ModelSetup& setup = input.setup;
  DataIdentity& data_identity = input.identity.train;
  SampleSchedule schedule;
  RankView layout;  // this rank's part in the adopted plan
  std::unique_ptr<RankPowerRun> power;
  std::unique_ptr<comm::Group> world;
  GroupHandle tp;                        // the model's TP collectives (compute thread)
  std::unique_ptr<comm::Group> tp_sync;  // the same ranks, for the reshard (comm thread)
  std::unique_ptr<comm::Group> dp;
  // With pipeline stages: the replica's ranks of every stage (ascending), for
  // the activations between stages, the tied embedding and model.bin.
  std::unique_ptr<comm::Group> pipe;  // over layout.pipeline_group
  std::vector<TiedRows> tied;  // the tied wte's rows this rank sums with the other end
  std::unique_ptr<tensor::Context> ctx;
  std::unique_ptr<model::Model> model;
  std::unique_ptr<model::AdamW> optimizer;
  std::unique_ptr<model::ParameterLayout> full;  // every unit of this rank's stage
  std::unique_ptr<OverlappedSync> sync;
  std::unique_ptr<CheckpointSaver> saver;
  std::vector<std::int64_t> shares;
  TraceRecorder compute;
  TraceRecorder comm_trace;
  StepClock clock;
  std::int64_t first_traced = 0;

  Impl(const JobPlan& plan, JobInput read, const std::filesystem::path& run_dir, const std::string& label, int rank)
      : run(RunDir::open(run_dir)),
        input(std::move(read)),
        schedule(plan.schedule()),
        compute(rank, label, unix_time_s()),
        comm_trace(rank, label, unix_time_s()),
        first_traced(plan.config().train.steps > 1 ? 1 : 0) {}
};

NtpTrainer::NtpTrainer(JobPlan plan, JobInput input, const std::filesystem::path& run_dir,
                       const WorkerOptions& options)
    : plan_(std::move(plan)), config_(plan_.config()), options_(options) {
  const Config& config = config_;
  if (options.world_size != plan_.world_size()) {
    throw std::invalid_argument(fmt::format(
        "WORLD_SIZE = {}, but the configuration has {} active slots in training replicas",
        options.world_size, plan_.world_size()));
  }
  me_ = plan_.place(options.rank);
  hooks_ = StepHooks(config.test, options.rank, options.mispair_rank);
  if (config.elastic.relayout) slow_.emplace(SlowRankOptions{config.elastic.slow_threshold, config.elastic.slow_steps});
  writer_rank_ = plan_.members().front();
  impl_ = std::make_unique<Impl>(
      plan_, std::move(input), run_dir,
      plan_.pp() > 1 ? fmt::format("rank {}: replica {} stage {} slot {}", options.rank, me_.replica, me_.stage, me_.slot)
                     : fmt::format("rank {}: replica {} slot {}", options.rank, me_.replica, me_.slot),
      options.rank);
  Impl& x = *impl_;
  check_job_data(run_dir, x.input.identity);  // a rank started (again) mid-run reads the file again
  x.power = std::make_unique<RankPowerRun>(config, x.run, PowerRank{options.rank, me_.replica, me_.slot, me_.stage,
                                                                      plan_.pp() > 1 ? plan_.stages()
                                                                                     : std::vector<model::StageRange>{}},
                                           options.gpu);
  adopt(plan_);
  store_ = comm::open_store(options_.store);
  tensor::set_huge_pages(config.model.huge_pages);
  x.ctx = std::make_unique<tensor::Context>(plan_.threads(options.rank));
  const model::StageRange& layers = plan_.stages()[static_cast<std::size_t>(me_.stage)];
  x.model = plan_.pp() > 1 ? std::make_unique<model::Model>(x.setup.gpt, x.layout.shard, *x.ctx, &x.tp, layers)
                           : std::make_unique<model::Model>(x.setup.gpt, x.layout.shard, *x.ctx, &x.tp);
  const double init_start = unix_time_s();
  init_model(config.model, static_cast<std::uint64_t>(config.train.seed), *x.model);
  const double init_s = unix_time_s() - init_start;
  x.optimizer = std::make_unique<model::AdamW>(adamw_config(config.train), x.model->layout());
  if (hooks_.mutation() == Mutation::kLnFrozen && layers.holds_layer(0)) x.optimizer->freeze_for_test("h0.ln1_w");
  x.full = std::make_unique<model::ParameterLayout>(x.setup.gpt, model::Shard::full(x.setup.gpt), layers);
  x.saver = std::make_unique<CheckpointSaver>(config_, x.run);
  if (!config.run.resume.empty()) load_checkpoint(config.run.resume);
  x.run.event("rank_ready", {{"rank", options.rank},
                             {"replica", me_.replica},
                             {"slot", me_.slot},
                             {"stage", me_.stage},
                             {"layers", model::to_string(layers)},
                             {"pid", static_cast<int>(::getpid())},
                             {"heads", x.layout.shard.heads.to_string()},
                             {"neurons", x.layout.shard.neurons.to_string()},
                             {"vocab", x.layout.shard.vocab.to_string()},
                             {"sync_group", x.layout.sync_group},
                             {"threads", x.ctx->describe()},
                             {"init_s", init_s}});
}

NtpTrainer::~NtpTrainer() = default;

void NtpTrainer::event(const std::string& name, nlohmann::json fields) const {
  fields["rank"] = options_.rank;
  impl_->run.event(name, std::move(fields));
}

void NtpTrainer::adopt(const JobPlan& next) {
  Impl& x = *impl_;
  if (&next != &plan_) plan_ = next;
  live_epoch_ = plan_.epoch();
  relayout_.reset();
  if (slow_) slow_->reset();  // measured against the old layout
  x.layout = plan_.view(options_.rank);
  if (!x.layout.trains) return;
  x.shares = x.power->configure(plan_.parallel(), config_.train.global_batch, x.setup);
}

void NtpTrainer::connect(int writer) {
  Impl& x = *impl_;
  writer_rank_ = writer;
  const std::uint64_t epoch = plan_.epoch();
  // The epoch's groups are made concurrently: each waits for its members'
  // rendezvous and connects its own mesh, so the start of an epoch (after a
  // recovery, on the critical path) costs the slowest group rather than the
  // sum of four. All futures are waited for before any error is rethrown;
  // each creation ends by its own deadline.
  const auto options = [&](std::vector<int> ranks, std::string name, bool check_inputs) {
    return group_options(config_, options_, epoch, std::move(ranks), std::move(name), check_inputs);
  };
  const auto make = [&](comm::GroupOptions o) {
    return std::async(std::launch::async, [this, o = std::move(o)]() { return comm::create_group(store_, o); });
  };
  // The groups whose size grows with the job carry only ring all-reduces and
  // all-gathers and barriers (world: the commit's all-gather, the validation
  // loss's all-reduce, the final barrier; dp: the gradient all-reduce), which
  // a sparse mesh of O(log N) connections per rank carries: a full one costs
  // N(N-1)/2 connections every epoch. TP groups use every call.
  const auto sparse = [](comm::GroupOptions o) {
    o.sparse = true;
    return o;
  };
  const std::vector<int>& replica = x.layout.tp_group;
  // With stages, each stage's TP group and each stage's sync group j are
  // groups of their own: the stage joins their names.
  const bool staged = plan_.pp() > 1;
  const std::string at = staged ? fmt::format("r{}s{}", me_.replica, me_.stage) : fmt::format("r{}", me_.replica);
  const std::string core = staged ? fmt::format("s{}core{}", me_.stage, x.layout.sync_group)
                                  : fmt::format("core{}", x.layout.sync_group);
  std::vector<std::future<std::unique_ptr<comm::Group>>> made;
  made.push_back(make(sparse(options(plan_.members(), "world", true))));
  made.push_back(make(options(replica, "tp/" + at, false)));
  made.push_back(make(options(replica, "tpsync/" + at, false)));
  if (staged) made.push_back(make(options(x.layout.pipeline_group, fmt::format("pp/r{}", me_.replica), true)));
  if (x.layout.sync_group >= 0) made.push_back(make(sparse(options(x.layout.dp_group, "dp/" + core, false))));
  std::vector<std::unique_ptr<comm::Group>> groups;
  std::exception_ptr first_error;
  for (auto& future : made) {
    try {
      groups.push_back(future.get());
    } catch (...) {
      if (!first_error) first_error = std::current_exception();
      groups.push_back(nullptr);
    }
  }
  if (first_error) std::rethrow_exception(first_error);
  x.world = std::move(groups[0]);
  x.tp.reset(std::move(groups[1]));
  x.tp_sync = std::move(groups[2]);
  std::size_t next = 3;
  if (staged) x.pipe = std::move(groups[next++]);
  if (groups.size() > next) x.dp = std::move(groups[next]);
  x.tied = tied_embedding_rows(plan_, options_.rank);
  // A stage's wte is either the embedding's or the LM head's, never both:
  // the split of its sync (the LM head's part early) needs both in one model.
  const SyncOptions sync{config_.sync.bucket_mb, config_.sync.split_embedding && x.layout.vocab_split_ok && !staged,
                         config_.sync.pipeline};
  x.sync = std::make_unique<OverlappedSync>(x.model->layout(), *x.full, x.layout.views, x.layout.active,
                                            *x.tp_sync, x.dp.get(), sync);
  x.sync->mispair_for_test(hooks_.mispairs());
  x.sync->keep_replicated_for_test(hooks_.mutation() == Mutation::kReplicatedUnsynced);
}

void NtpTrainer::drop_groups() {
  Impl& x = *impl_;
  for (comm::Group* g : {x.world.get(), x.tp.get(), x.tp_sync.get(), x.dp.get(), x.pipe.get()}) {
    if (g != nullptr) g->abort("a member failed");
  }
  x.sync.reset();  // joins the communication thread: abort ended its call
  x.pipe.reset();
  x.dp.reset();
  x.tp_sync.reset();
  x.tp.reset(nullptr);
  x.world.reset();
}

// The parts of a step (step() calls them in this order).
struct NtpTrainer::LocalWork {
  double loss_sum = 0;   // over this rank's samples (every TP rank of the replica holds it)
  double forward_s = 0;  // forward passes, this rank
  double busy_s = 0;     // forward and backward passes without the TP all-reduces
  SyncTotals sync;       // the overlapped gradient sync
};

struct NtpTrainer::Commit {
  CommitTotals totals;            // every rank's record, summed: the same on every rank
  std::optional<double> cycle_s;  // from the previous commit (StepClock)
};

StepMetrics NtpTrainer::step(std::int64_t s) {
  Impl& x = *impl_;
  if (s != applied_ + 1) {
    throw std::logic_error(fmt::format("rank {}: step {} after applied step {}", options_.rank, s, applied_));
  }
  hooks_.fault(s, StepPhase::kStart);
  const double start = unix_time_s();
  const bool traced = s >= x.first_traced && s < x.first_traced + config_.run.trace_steps;
  const auto parts = assign_samples(x.schedule.step_samples(s), x.shares);
  std::vector<std::int64_t> mine = parts[static_cast<std::size_t>(me_.replica)];
  hooks_.mutate_samples(s, me_.replica, mine);
  const LocalWork work = run_micro_batches(s, mine, traced);
  const Commit committed = commit(s, start, work);  // nothing that decides the update comes after it
  StepMetrics m = committed_metrics(s, committed);
  const double opt_s = update(s, m, committed, traced);
  after_commit(s, parts, committed, opt_s, m);
  return m;
}

NtpTrainer::LocalWork NtpTrainer::run_micro_batches(std::int64_t s, const std::vector<std::int64_t>& mine,
                                                    bool traced) {
  if (plan_.pp() > 1) return run_pipeline(s, mine, traced);
  Impl& x = *impl_;
  const std::int64_t T = x.setup.seq_len;
  x.model->zero_grad();
  x.model->set_loss_scale(1.0f / static_cast<float>(hooks_.loss_scale_samples(
                                     config_.train.global_batch, static_cast<std::int64_t>(mine.size())) *
                                 T));
  LocalWork work;
  std::vector<std::int32_t> inputs;
  std::vector<std::int32_t> targets;
  std::size_t next = 0;
  const std::vector<std::int64_t> micros =
      micro_batches(static_cast<std::int64_t>(mine.size()), config_.train.micro_batch, config_.parallel.microbatches);
  x.sync->begin(x.model->grad_buffer(), s);  // each range is read once backward reports it ready
  model::BackwardHooks drive_sync;
  drive_sync.grads_ready = [&x](std::size_t first, std::size_t last) { x.sync->grads_ready(first, last); };
  if (x.sync->splits_embedding()) {
    drive_sync.embedding_rows = [&x](const model::EmbeddingRows& rows) { x.sync->embedding_rows(rows); };
  }
  for (std::size_t k = 0; k < micros.size(); ++k) {
    const std::int64_t micro = micros[k];
    inputs.resize(static_cast<std::size_t>(micro * T));
    targets.resize(inputs.size());
    for (std::int64_t i = 0; i < micro; ++i, ++next) {
      x.data.sample(mine[next], T, inputs.data() + i * T, targets.data() + i * T);
    }
    const double t0 = unix_time_s();
    hooks_.fault(s, StepPhase::kForward);
    work.busy_s += timed_pass([&] {
      work.loss_sum += x.model->forward({inputs.data(), targets.data(), micro, T}).sum;
      hooks_.slow_compute(micro, [&] { return x.power->speedup(me_.replica); });
    });
    work.forward_s += unix_time_s() - t0;
    hooks_.fault(s, StepPhase::kBackward);
    // Only the last micro-batch's backward makes gradients final: it drives the sync.
    work.busy_s += timed_pass([&] { x.model->backward(k + 1 == micros.size() ? drive_sync : model::BackwardHooks{}); });
    if (traced) x.compute.add({"forward+backward", Track::kCompute, t0, unix_time_s() - t0, s});
  }
  hooks_.fault(s, StepPhase::kSync);
  work.sync = x.sync->finish();
  if (traced) {
    for (const TraceSpan& span : work.sync.spans) x.comm_trace.add(span);
    x.compute.add({"wait for sync", Track::kCompute, unix_time_s() - work.sync.exposed_s, work.sync.exposed_s, s});
  }
  return work;
}

// The 1F1B pipeline (docs/pipeline.md): the replica's micro-batches run
// through its stages, this rank computing its stage's part of each; the
// activations and their gradients go between stages over the pipeline group
// (run_stage). The last micro-batch's backward, the last op of every stage,
// drives the stage's gradient sync; then the tied wte's two copies add their
// parts. Micro-batch i keeps its activations in slot i mod (pp - stage):
// forwards and backwards each run in micro-batch order, and 1F1B holds at
// most pp - stage of them at once on stage `stage` (the last stage one), so
// the micro-batches in flight are consecutive and their slots distinct.
NtpTrainer::LocalWork NtpTrainer::run_pipeline(std::int64_t s, const std::vector<std::int64_t>& mine, bool traced) {
  Impl& x = *impl_;
  const std::int64_t T = x.setup.seq_len;
  const std::int64_t C = x.setup.gpt.d_model;
  const int pp = plan_.pp();
  const int stage = me_.stage;
  const bool last = stage == pp - 1;
  const int slots = pp - stage;
  x.model->zero_grad();
  x.model->set_loss_scale(1.0f / static_cast<float>(hooks_.loss_scale_samples(
                                     config_.train.global_batch, static_cast<std::int64_t>(mine.size())) *
                                 T));
  LocalWork work;
  const std::vector<std::int64_t> micros =
      micro_batches(static_cast<std::int64_t>(mine.size()), config_.train.micro_batch, config_.parallel.microbatches);
  std::vector<std::int64_t> first(micros.size(), 0);  // each micro-batch's first sample in `mine`
  for (std::size_t k = 1; k < micros.size(); ++k) first[k] = first[k - 1] + micros[k - 1];
  const int m = static_cast<int>(micros.size());
  const std::int64_t most = *std::max_element(micros.begin(), micros.end());
  x.sync->begin(x.model->grad_buffer(), s);
  model::BackwardHooks drive_sync;
  drive_sync.grads_ready = [&x](std::size_t a, std::size_t b) { x.sync->grads_ready(a, b); };
  std::vector<std::int32_t> inputs, targets;
  const auto batch_of = [&](int i) {
    const auto k = static_cast<std::size_t>(i);
    inputs.resize(static_cast<std::size_t>(micros[k] * T));
    targets.resize(inputs.size());
    for (std::int64_t j = 0; j < micros[k]; ++j) {
      x.data.sample(mine[static_cast<std::size_t>(first[k] + j)], T, inputs.data() + j * T, targets.data() + j * T);
    }
    return model::Batch{inputs.data(), targets.data(), micros[k], T};
  };
  const auto elems = [&](int i) { return static_cast<std::size_t>(micros[static_cast<std::size_t>(i)] * T * C); };
  std::vector<float> previous, stale;  // test.mutation stale_activation: the inputs it swaps
  StageWork stage_work;
  stage_work.in_elems = stage_work.out_elems = static_cast<std::size_t>(most * T * C);
  stage_work.forward = [&](int i, std::span<const float> in, std::span<float> out) {
    hooks_.fault(s, StepPhase::kForward);
    const double t0 = unix_time_s();
    x.model->select_slot(i % slots);
    const model::Batch batch = batch_of(i);
    std::span<const float> input = stage > 0 ? in.first(elems(i)) : std::span<const float>{};
    if (hooks_.mutation() == Mutation::kStaleActivation && stage > 0) {
      stale.swap(previous);
      previous.assign(input.begin(), input.end());
      if (i > 0 && stale.size() == input.size()) input = stale;
    }
    work.busy_s += timed_pass([&] {
      const model::StageForward f = x.model->forward_stage(batch, input);
      if (last) work.loss_sum += f.loss.sum;
      else std::copy(f.output.begin(), f.output.end(), out.begin());
      hooks_.slow_compute(micros[static_cast<std::size_t>(i)], [&] { return x.power->speedup(me_.replica); });
    });
    work.forward_s += unix_time_s() - t0;
    if (traced) x.compute.add({"forward", Track::kCompute, t0, unix_time_s() - t0, s});
  };
  stage_work.backward = [&](int i, std::span<const float> grad_out, std::span<float> grad_in) {
    hooks_.fault(s, StepPhase::kBackward);
    const double t0 = unix_time_s();
    x.model->select_slot(i % slots);
    work.busy_s += timed_pass([&] {
      const std::span<const float> d =
          x.model->backward_stage(last ? std::span<const float>{} : grad_out.first(elems(i)),
                                  i + 1 == m ? drive_sync : model::BackwardHooks{});
      std::copy(d.begin(), d.end(), grad_in.begin());
    });
    if (traced) x.compute.add({"backward", Track::kCompute, t0, unix_time_s() - t0, s});
  };
  const RankView& v = x.layout;
  const std::vector<int>& group = v.pipeline_group;
  const StageLinks links{x.pipe.get(), index_in(group, v.activation_from), indices_in(group, v.gradient_to),
                         index_in(group, v.gradient_from), indices_in(group, v.activation_to)};
  run_stage(one_f_one_b(pp, m), stage, links, stage_work, /*tag_base=*/0);
  hooks_.fault(s, StepPhase::kSync);
  work.sync = x.sync->finish();
  if (!x.tied.empty()) {
    const model::TensorSpec& wte = x.model->layout()["wte"];
    std::span<float> grad =
        x.model->grads().subspan(static_cast<std::size_t>(wte.offset), static_cast<std::size_t>(wte.count));
    // The mutation exchanges as usual (its peers must not wait) but adds into a copy.
    std::vector<float> unsummed;
    if (hooks_.mutation() == Mutation::kTiedUnsummed) {
      unsummed.assign(grad.begin(), grad.end());
      grad = unsummed;
    }
    // The embedding's part touches only the rows of the step's input tokens
    // (any replica's: the DP sync summed them), which both ends read alike.
    const TiedSparsity sparse{input_token_rows(x.data, x.schedule.step_samples(s), T), stage == 0};
    sum_tied_embedding(grad, wte.units, wte.unit_size, x.tied, *x.pipe,
                       [&x](int rank) { return index_in(x.layout.pipeline_group, rank); }, kTiedTag, &sparse);
  }
  if (traced) {
    for (const TraceSpan& span : work.sync.spans) x.comm_trace.add(span);
  }
  return work;
}

// Runs one forward or backward pass; returns its busy seconds (without the
// TP all-reduces), stretched F times for a rank made slow (SLOW=F).
template <class Pass>
double NtpTrainer::timed_pass(Pass&& pass) {
  const model::Model& model = *impl_->model;
  const double start = unix_time_s();
  const double reduce_start = model.tp_reduce_s();
  pass();
  const double busy = unix_time_s() - start - (model.tp_reduce_s() - reduce_start);
  hooks_.slow_pass(busy);
  return busy * std::max(1.0, hooks_.slowdown());
}

NtpTrainer::Commit NtpTrainer::commit(std::int64_t s, double start, const LocalWork& work) {
  Impl& x = *impl_;
  CommitRecord mine;
  mine.loss_sum = counts_loss() ? work.loss_sum : 0.0;
  mine.reshard_bytes = work.sync.bytes.reshard;
  mine.allreduce_bytes = work.sync.bytes.allreduce;
  mine.exposed_sync_s = work.sync.exposed_s;
  mine.elapsed_s = unix_time_s() - start;
  mine.forward_s = work.forward_s;
  mine.busy_s = work.busy_s;
  mine.norm = grad_norm_part(*x.model);
  mine.replica = me_.replica;
  mine.join_pending = is_writer() && options_.join_pending && options_.join_pending(plan_.members());
  mine.checkpoint_due = is_writer() && x.saver->time_due();
  mine.save_busy = x.saver->busy();
  mine.stop = StopRequest::signal() != 0;
  std::vector<std::int64_t> record(CommitRecord::kWords);
  mine.write(record.data());
  std::vector<std::int64_t> all(record.size() * plan_.members().size());
  pending_commit_ = s;  // this step's synced gradients are final from here on
  x.world->all_gather(comm::ConstView(record.data(), record.size()), comm::View(all.data(), all.size()));
  Commit out;
  out.totals = commit_totals(all, plan_.members().size(), plan_.parallel().dp);
  out.cycle_s = x.clock.commit(s, plan_.epoch(), unix_time_s());
  hooks_.fault(s, StepPhase::kCommit);
  return out;
}

StepMetrics NtpTrainer::committed_metrics(std::int64_t s, const Commit& committed) const {
  const Impl& x = *impl_;
  StepMetrics m;
  m.step = s;
  m.epoch = x.schedule.epoch_of(s);
  m.lr = learning_rate(config_.train, s);
  m.tokens = config_.train.global_batch * x.setup.seq_len;
  m.loss = committed.totals.loss_sum / static_cast<double>(m.tokens);
  m.grad_norm = committed.totals.grad_norm;
  if (!std::isfinite(m.loss) || !std::isfinite(m.grad_norm)) {
    // Every rank sees the same totals: all stop, or all skip the update alike.
    if (config_.train.on_nan == NanPolicy::kStop) {
      throw NonFiniteError(fmt::format("step {}: non-finite {} (loss {}, gradient norm {}); train.on_nan = "
                                       "\"stop\"",
                                       s, std::isfinite(m.loss) ? "gradient norm" : "loss", m.loss, m.grad_norm));
    }
  }
  return m;
}

double NtpTrainer::update(std::int64_t s, StepMetrics& m, const Commit& committed, bool traced) {
  Impl& x = *impl_;
  const double opt_start = unix_time_s();
  hooks_.fault(s, StepPhase::kOptimizer);
  hooks_.slow_update();
  m.skipped = !std::isfinite(m.loss) || !std::isfinite(m.grad_norm);
  apply_update(s, m.grad_norm, m.skipped);
  const double opt_s = unix_time_s() - opt_start;
  join_pending_ = committed.totals.join_pending;
  if (traced) x.compute.add({"optimizer", Track::kCompute, opt_start, opt_s, s});
  return opt_s;
}

void NtpTrainer::after_commit(std::int64_t s, const std::vector<std::vector<std::int64_t>>& parts,
                              const Commit& committed, double opt_s, StepMetrics& m) {
  Impl& x = *impl_;
  const CommitTotals& t = committed.totals;
  m.reshard_bytes = t.reshard_bytes;
  m.allreduce_bytes = t.allreduce_bytes;
  m.samples = x.shares;
  m.tp = plan_.split().active;
  m.exposed_sync_s = t.exposed_sync_s;
  m.sync_wait_max_s = t.sync_wait_max_s;
  // From the previous commit (the slowest rank's previous update and this
  // step); a first step after a start or a new epoch has no previous commit:
  // the slowest rank to this commit, then this rank's update.
  m.step_time_s = committed.cycle_s.value_or(t.elapsed_s + opt_s);
  m.power = x.power->metrics();
  m.time = unix_time_s();
  // From the commit record every rank holds: the same re-plan everywhere,
  // in force from the next step (this step's metrics keep the plan it ran with).
  if (auto shares = x.power->observe(t.replica_compute_s)) x.shares = std::move(*shares);
  if (slow_) observe_speeds(s, t);
  last_metrics_ = m;  // without val_loss
  last_parts_ = parts;
  // After the update: a death in this pass is a death before the next step.
  if (x.val && eval_due(config_.train, s)) {
    hooks_.fault(s, StepPhase::kValidation);
    const double eval_start = unix_time_s();
    m.val_loss = validation_loss();
    x.clock.off_clock(unix_time_s() - eval_start);
  }
  if (is_writer()) {
    x.run.append_schedule(s, m.epoch, parts);
    x.run.append_metrics(m);
  }
  stop_requested_ = t.stop;
  checkpoint_after(s, committed);
}

void NtpTrainer::observe_speeds(std::int64_t s, const CommitTotals& totals) {
  relayout_ = slow_->observe(plan_, totals.busy_s);
  if (!relayout_ || !is_writer()) return;
  for (const SpeedChange& c : relayout_->changes) {
    event(c.measured < c.assumed ? "rank_slow" : "rank_speed_back",
          {{"step", s}, {"slow_rank", c.rank}, {"replica", c.replica}, {"slot", c.slot}, {"speed", c.measured},
           {"assumed", c.assumed}});
  }
}

void NtpTrainer::checkpoint_after(std::int64_t s, const Commit& committed) {
  Impl& x = *impl_;
  const CommitTotals& t = committed.totals;
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
  const int writer_replica = plan_.place(writer_rank_).replica;
  SaveJob job;
  job.info = checkpoint_info(config_, x.setup.gpt, x.setup.seq_len, x.data_identity, steps_done, x.optimizer->steps(),
                             plan_.parallel(),
                             plan_.epoch());
  job.epoch = plan_.epoch();
  job.rank = options_.rank;
  job.assemble = is_writer();
  // One replica holds every unit once: its ranks write (every stage), each TP group's rank 0 also its
  // stage's replicated tensors.
  for (int r : plan_.members()) {
    if (plan_.place(r).replica == writer_replica) job.writers.push_back(r);
  }
  if (me_.replica != writer_replica && !job.assemble) return;
  const double start = unix_time_s();
  x.saver->wait();  // one save in flight
  job.wait_s = unix_time_s() - start;
  if (me_.replica == writer_replica) {
    // Runs in the save thread while the next step computes; the state changes
    // only at that step's update, which waits for it (apply_update). The last
    // save writes the state itself: nothing waits for it but the end.
    job.copy = [&layout = x.model->layout(), params = std::as_const(*x.model).params(),
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
  job.abandoned = [this, epoch = plan_.epoch(), steps_done, max_age](int rank) {
    if (live_epoch_.load() != epoch) return true;
    try {
      if (store_->try_get(part_failed_key(epoch, steps_done, rank))) return true;
      return comm::heartbeat_ages_ms(*store_, {rank}).at(0) > max_age;
    } catch (const std::exception&) {
      return false;
    }
  };
  job.part_failed = [this, epoch = plan_.epoch(), steps_done](const std::string& reason) {
    store_->set(part_failed_key(epoch, steps_done, options_.rank), comm::to_bytes(reason));
  };
  job.before_part = [this, s = steps_done - 1] { hooks_.fault(s, StepPhase::kCheckpoint); };
  if (job.assemble) job.config_toml = checkpoint_config_toml(config_, plan_.parallel());
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

// Every TP rank of the last stage holds its replica's loss; one counts it.
bool NtpTrainer::counts_loss() const { return impl_->tp.rank() == 0 && me_.stage == plan_.pp() - 1; }

double NtpTrainer::validation_loss() {
  Impl& x = *impl_;
  const std::int64_t T = x.setup.seq_len;
  const std::vector<std::int64_t> ids = eval_samples(*x.val, T, config_.train);
  const std::vector<std::int64_t> mine = eval_share(ids, x.shares, me_.replica);
  // With stages: activations travel forward over the pipeline group, as in
  // training, on tags of their own; the last stage holds the loss.
  const RankView& v = x.layout;
  StageIo io;
  if (v.activation_from >= 0) {
    io.receive = [&](int i, std::span<float> input) {
      x.pipe->exchange({comm::P2POp::recv(comm::View(input.data(), input.size()),
                                          index_in(v.pipeline_group, v.activation_from), kEvalTag + i)});
    };
  }
  if (!v.activation_to.empty()) {
    io.send = [&](int i, std::span<const float> output) {
      std::vector<comm::P2POp> ops;
      for (int dst : indices_in(v.pipeline_group, v.activation_to)) {
        ops.push_back(comm::P2POp::send(comm::ConstView(output.data(), output.size()), dst, kEvalTag + i));
      }
      x.pipe->exchange(ops);
    };
  }
  const double sum = forward_loss_sum(*x.model, *x.val, mine, T, config_.train.micro_batch,
                                      plan_.pp() > 1 ? &io : nullptr);
  double total = counts_loss() ? sum : 0.0;
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
    const double lr = learning_rate(config_.train, s) * hooks_.lr_factor();
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

void NtpTrainer::rerun_validation(std::int64_t resume) {
  // On the parameters after step resume - 1, which the pass would have seen;
  // whether or not this member's own pass ended (one that did runs once more).
  rerun_val_loss_.reset();
  if (impl_->val && resume >= 1 && eval_due(config_.train, resume - 1)) rerun_val_loss_ = validation_loss();
}

void NtpTrainer::resume_at(std::int64_t resume) {
  const std::optional<double> val_loss = std::exchange(rerun_val_loss_, std::nullopt);
  if (is_writer()) take_over_logs(resume, val_loss);
  save_resume_state(resume);
}

void NtpTrainer::take_over_logs(std::int64_t resume, std::optional<double> val_loss) {
  Impl& x = *impl_;
  const auto last_step = [&](const char* name) {
    const std::vector<nlohmann::json> rows = x.run.truncate_jsonl_from_step(name, resume);
    return rows.empty() ? std::int64_t{-1} : rows.back().at("step").get<std::int64_t>();
  };
  const std::int64_t logged_schedule = last_step("schedule.jsonl");
  const std::int64_t logged_metrics = last_step("metrics.jsonl");
  if (!last_metrics_ || last_metrics_->step != resume - 1) return;
  if (logged_schedule < resume - 1) x.run.append_schedule(resume - 1, last_metrics_->epoch, *last_parts_);
  if (logged_metrics < resume - 1) {
    StepMetrics m = *last_metrics_;
    m.val_loss = val_loss;
    x.run.append_metrics(m);
  }
}

StateHashes NtpTrainer::state_hashes() const {
  const Impl& x = *impl_;
  return hash_state(x.model->layout(), std::as_const(*x.model).params(), x.optimizer->m().span(),
                    x.optimizer->v().span());
}

StateMoveStats NtpTrainer::move_state(const StateMoveOrder& order, comm::Group& exchange) {
  Impl& x = *impl_;
  const std::vector<int>& survivors = order.survivors;
  wait_for_checkpoint_copy(applied_ + 1);  // the move rewrites the state a save may be copying
  StateMoveRank mover;
  mover.from = layout::SlotRef{me_.replica, me_.slot};
  const RankView next = order.next->view(options_.rank);
  if (next.trains) mover.to = layout::SlotRef{me_.replica, me_.slot};
  mover.stale = order.stale && hooks_.mutation() != Mutation::kSkipRollForward;
  mover.group_rank_of = exchange_rank_of(survivors, me_.stage);
  // A stale rank is rolled forward: its stage's replicated tensors and the
  // optimizer's step count of a holder at the resume step.
  for (const auto& [sender, rank] : order.refreshes) {
    if (sender == options_.rank) mover.replicated_to.push_back(index_in(survivors, rank));
    if (rank == options_.rank) mover.replicated_from = index_in(survivors, sender);
  }
  const StateMoveStats stats = train::move_state(*x.model, *x.optimizer, next.shard,
                                                 order.plans->at(static_cast<std::size_t>(me_.stage)), mover, exchange);
  if (mover.replicated_from && order.stale) {  // skip_roll_forward skips the units only
    x.optimizer->set_steps(order.resume_applied + 1);
    applied_ = order.resume_applied;
    pending_commit_ = -1;
  }
  return stats;
}

std::vector<std::pair<int, int>> NtpTrainer::exchange_links(const StateMoveOrder& order) const {
  std::vector<std::pair<int, int>> links;
  for (int stage = 0; stage < static_cast<int>(order.plans->size()); ++stage) {
    const auto stage_links =
        move_links(order.plans->at(static_cast<std::size_t>(stage)), exchange_rank_of(order.survivors, stage));
    links.insert(links.end(), stage_links.begin(), stage_links.end());
  }
  for (const auto& [sender, rank] : order.refreshes) {
    links.emplace_back(index_in(order.survivors, sender), index_in(order.survivors, rank));
  }
  std::sort(links.begin(), links.end());
  links.erase(std::unique(links.begin(), links.end()), links.end());
  return links;
}

// The exchange group's rank of the process of a slot of `stage`: its place
// in the ascending survivors.
std::function<int(layout::SlotRef)> NtpTrainer::exchange_rank_of(const std::vector<int>& survivors, int stage) const {
  return [this, &survivors, stage](layout::SlotRef slot) {
    return index_in(survivors, plan_.rank_of({slot.replica, slot.slot, stage}));
  };
}

void NtpTrainer::finish() {
  Impl& x = *impl_;
  x.saver->wait();
  if (hooks_.mutation() == Mutation::kUnitDrift) {
    for (const model::TensorSpec& spec : x.model->layout().tensors()) {
      if (spec.kind == model::UnitKind::kReplicated || spec.count == 0) continue;
      float& value = x.model->params()[static_cast<std::size_t>(spec.offset)];
      value = std::nextafter(value, 1e30f);
      break;
    }
  }
  // The writer's replica holds every unit once (a tied copy aside): sum its
  // ranks' pieces into a full buffer, over every stage.
  const model::ParameterLayout whole(x.setup.gpt, model::Shard::full(x.setup.gpt));
  std::vector<float> values(static_cast<std::size_t>(whole.size()), 0.0f);
  const RankPlace writer_place = plan_.place(writer_rank_);
  if (me_.replica == writer_place.replica) {
    model::gather_into_full(x.model->layout(), std::as_const(*x.model).params(), whole, values, x.tp.rank() == 0);
    if (x.pipe) x.pipe->all_reduce(values.data(), values.size());
    else x.tp.all_reduce(values.data(), values.size());
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
  hashes["stage"] = me_.stage;
  hashes["step"] = applied_;
  hashes["epoch"] = plan_.epoch();
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

}  // namespace ntp::train
