#include "train/ntp_trainer.h"

#include <signal.h>

#include <algorithm>
#include <chrono>
#include <memory>
#include <optional>
#include <thread>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "comm/group.h"
#include "comm/store.h"
#include "model/llmc_checkpoint.h"
#include "model/model.h"
#include "model/optimizer.h"
#include "train/dataset.h"
#include "train/group_handle.h"
#include "train/membership.h"
#include "train/state_move.h"
#include "train/overlapped_sync.h"
#include "train/power_setup.h"
#include "train/lr_schedule.h"
#include "train/model_setup.h"
#include "train/run_dir.h"
#include "train/schedule.h"
#include "train/trace.h"

namespace ntp::train {
namespace {

using Groups = std::vector<std::unique_ptr<comm::Group>>;

bool trains(const ParallelConfig& p, std::int64_t replica) {
  return static_cast<std::int64_t>(p.active_slots(replica).size()) >= p.min_tp;
}

int global_rank_of(const std::vector<RankPlace>& places, int replica, int slot) {
  const auto it = std::find(places.begin(), places.end(), RankPlace{replica, slot});
  if (it == places.end()) {
    throw std::logic_error(fmt::format("replica {} slot {} has no process", replica, slot));
  }
  return static_cast<int>(it - places.begin());
}

// Every rank holds, per unit kind, the units of its slot in that kind's layout.
struct RankLayout {
  KindViews views;
  model::Shard shard;
  std::vector<int> active;  // slots of the rank's replica, TP-group order
};

RankLayout plan_rank(const ParallelConfig& p, const model::GptConfig& gpt, RankPlace me) {
  RankLayout out;
  const layout::JobLayout heads = layout::plan_job(job_config(p, gpt.heads));
  const layout::JobLayout neurons = layout::plan_job(job_config(p, gpt.ffn()));
  const layout::JobLayout vocab = layout::plan_job(job_config(p, gpt.padded_vocab));
  out.views = {heads.slot_view(me.replica, me.slot), neurons.slot_view(me.replica, me.slot),
               vocab.slot_view(me.replica, me.slot)};
  out.shard = {out.views.heads.units, out.views.neurons.units, out.views.vocab.units};
  out.active = layout::alive_slots(job_config(p, gpt.heads), me.replica);
  return out;
}

// `hot`: a group on the per-layer or per-bucket path. Its calls skip the
// comm layer's per-call descriptor check (one extra all-gather per call); the
// world group keeps it.
comm::GroupOptions group_options(const Config& c, const WorkerOptions& w, std::uint64_t epoch,
                                 std::vector<int> ranks, std::string name, bool hot = true) {
  comm::GroupOptions o;
  o.epoch = epoch;
  o.ranks = std::move(ranks);
  o.global_rank = w.rank;
  o.name = std::move(name);
  o.timeout = std::chrono::milliseconds(static_cast<long>(c.deadline.collective_s * 1000));
  o.connect_timeout = std::chrono::milliseconds(static_cast<long>(c.deadline.rendezvous_s * 1000));
  o.world_size = w.world_size;
  o.check_inputs = !hot;
  return o;
}

// One rank's state for the whole run. Everything derived from membership —
// parallel_, epoch_, members_, layout_, the groups, sync_, shares_ — is
// rebuilt by recover() between steps.
class Worker {
 public:
  Worker(const Config& config, const std::filesystem::path& run_dir, const WorkerOptions& options);
  void run();
  // Puts the GPU's original limit back and logs it; `cause`: "exit" or "error".
  void restore_power(const char* cause) noexcept { power_->restore(cause); }

 private:
  void connect();
  void start_sync();
  // Closes every group of the failed epoch (peers blocked on them fail fast).
  void drop_groups();
  // After a CommError in step `s`: agree on the survivors, move state, rebuild.
  void recover(std::int64_t s, const comm::CommError& error);
  std::vector<int> training_ranks(const ParallelConfig& p) const;
  bool is_writer() const { return options_.rank == members_.front(); }
  StepMetrics step(std::int64_t s, const SampleSchedule& schedule, TraceRecorder& compute,
                   TraceRecorder& comm, bool traced);
  void write_final_model();

  const Config& config_;
  RunDir run_;
  WorkerOptions options_;
  std::vector<RankPlace> places_;  // of the first configuration: global rank -> place
  RankPlace me_;
  ParallelConfig parallel_;        // the current configuration
  std::uint64_t epoch_ = 0;
  std::vector<int> members_;       // global ranks training in this epoch, ascending
  bool leaving_ = false;           // this rank's replica no longer trains
  model::TokenData data_;
  ModelSetup setup_;
  RankLayout layout_;
  std::unique_ptr<RankPowerRun> power_;
  std::shared_ptr<comm::Store> store_;
  std::unique_ptr<comm::Group> world_;
  GroupHandle tp_;                        // the model's TP collectives (compute thread)
  std::unique_ptr<comm::Group> tp_sync_;  // the same ranks, for the reshard (comm thread)
  std::unique_ptr<comm::Group> dp_;
  std::unique_ptr<tensor::Context> ctx_;
  std::unique_ptr<model::Model> model_;
  std::unique_ptr<model::AdamW> optimizer_;
  std::unique_ptr<model::ParameterLayout> full_;
  std::unique_ptr<OverlappedSync> sync_;
  std::vector<std::int64_t> shares_;
  double run_start_ = unix_time_s();
};

Worker::Worker(const Config& config, const std::filesystem::path& run_dir,
               const WorkerOptions& options)
    : config_(config),
      run_(RunDir::open(run_dir)),
      options_(options),
      places_(job_places(config.parallel)),
      parallel_(config.parallel),
      data_(open_dataset(config.data, run_dir)),
      setup_(resolve_model(config.model, data_.max_token())) {
  if (options.world_size != static_cast<int>(places_.size())) {
    throw std::invalid_argument(fmt::format(
        "WORLD_SIZE = {}, but the configuration has {} active slots in training replicas",
        options.world_size, places_.size()));
  }
  me_ = places_.at(static_cast<std::size_t>(options.rank));
  members_ = training_ranks(parallel_);
  layout_ = plan_rank(parallel_, setup_.gpt, me_);
  power_ = std::make_unique<RankPowerRun>(
      config, run_, PowerRank{options.rank, me_.replica, me_.slot}, options.gpu);
  shares_ = power_->configure(parallel_, config.train.global_batch);
  store_ = comm::open_store(options_.store);
  connect();
  const int local = static_cast<int>(places_.size());
  ctx_ = std::make_unique<tensor::Context>(thread_setup(config.model, local));
  model_ = std::make_unique<model::Model>(setup_.gpt, layout_.shard, *ctx_, &tp_);
  if (setup_.init_params.empty()) {
    model_->init(static_cast<std::uint64_t>(config.train.seed));
  } else {
    const model::ParameterLayout full(setup_.gpt, model::Shard::full(setup_.gpt));
    model::scatter_from_full(full, setup_.init_params, model_->layout(), model_->params());
  }
  optimizer_ = std::make_unique<model::AdamW>(adamw_config(config.train), model_->layout());
  full_ = std::make_unique<model::ParameterLayout>(setup_.gpt, model::Shard::full(setup_.gpt));
  start_sync();
  run_.event("rank_ready", {{"rank", options.rank},
                            {"replica", me_.replica},
                            {"slot", me_.slot},
                            {"heads", layout_.shard.heads.to_string()},
                            {"neurons", layout_.shard.neurons.to_string()},
                            {"vocab", layout_.shard.vocab.to_string()},
                            {"sync_group", layout_.views.heads.sync_group}});
}

std::vector<int> Worker::training_ranks(const ParallelConfig& p) const {
  std::vector<int> ranks;
  for (const RankPlace& place : job_places(p)) {
    ranks.push_back(global_rank_of(places_, place.replica, place.slot));
  }
  std::sort(ranks.begin(), ranks.end());
  return ranks;
}

void Worker::connect() {
  world_ = comm::create_group(store_, group_options(config_, options_, epoch_, members_, "world", false));
  std::vector<int> replica;
  for (int slot : layout_.active) replica.push_back(global_rank_of(places_, me_.replica, slot));
  tp_.reset(comm::create_group(store_, group_options(config_, options_, epoch_, replica,
                                                     fmt::format("tp/r{}", me_.replica))));
  tp_sync_ = comm::create_group(store_, group_options(config_, options_, epoch_, replica,
                                                      fmt::format("tpsync/r{}", me_.replica)));
  const int j = layout_.views.heads.sync_group;
  if (j >= 0) {
    // DP groups come from the layout's core lists, never from physical slot ids.
    const layout::JobLayout heads = layout::plan_job(job_config(parallel_, setup_.gpt.heads));
    std::vector<int> members;
    for (const auto& [r, slot] : heads.sync_group_members(j)) {
      members.push_back(global_rank_of(places_, r, slot));
    }
    dp_ = comm::create_group(store_, group_options(config_, options_, epoch_, members,
                                                   fmt::format("dp/core{}", j)));
  }
}

void Worker::start_sync() {
  sync_ = std::make_unique<OverlappedSync>(model_->layout(), *full_, layout_.views, layout_.active,
                                           *tp_sync_, dp_.get(), config_.sync.bucket_mb);
  sync_->mispair_for_test(options_.mispair_rank == options_.rank);
}

void Worker::drop_groups() {
  for (comm::Group* g : {world_.get(), tp_.get(), tp_sync_.get(), dp_.get()}) {
    if (g != nullptr) g->abort("a member failed");
  }
  sync_.reset();  // joins the communication thread: its call ends by error or deadline
  dp_.reset();
  tp_sync_.reset();
  tp_.reset(nullptr);
  world_.reset();
}

KindPlans transition_plans(const ParallelConfig& from, const ParallelConfig& to,
                           const model::GptConfig& gpt) {
  const auto plan = [&](std::int64_t units) {
    layout::TransitionPlan p = layout::plan_transition(layout::plan_job(job_config(from, units)),
                                                       layout::plan_job(job_config(to, units)));
    p.require_recoverable();
    return p;
  };
  return {plan(gpt.heads), plan(gpt.ffn()), plan(gpt.padded_vocab)};
}

void Worker::recover(std::int64_t s, const comm::CommError& error) {
  const double start = unix_time_s();
  run_.event("failure_detected", {{"rank", options_.rank}, {"step", s}, {"epoch", epoch_},
                                  {"error", error.what()}});
  drop_groups();
  MembershipOptions mo;
  mo.rank = options_.rank;
  mo.members = members_;
  mo.epoch = epoch_ + 1;
  mo.settle = std::chrono::milliseconds(static_cast<long>(config_.elastic.settle_s * 1000));
  mo.silence = std::chrono::milliseconds(static_cast<long>(config_.deadline.heartbeat_s * 1000));
  mo.deadline = std::chrono::milliseconds(static_cast<long>(config_.deadline.rendezvous_s * 1000));
  const Membership membership = agree_membership(*store_, mo);
  ParallelConfig next = parallel_;
  for (int lost : membership.lost) {
    const RankPlace place = places_.at(static_cast<std::size_t>(lost));
    std::vector<std::int64_t>& failed = next.failed[place.replica];
    failed.push_back(place.slot);
    std::sort(failed.begin(), failed.end());
  }
  run_.event("membership_agreed", {{"rank", options_.rank}, {"epoch", membership.epoch},
                                   {"survivors", membership.survivors}, {"lost", membership.lost},
                                   {"wait_s", unix_time_s() - start}});

  const double move_start = unix_time_s();
  const KindPlans plans = transition_plans(parallel_, next, setup_.gpt);
  const bool stays = trains(next, me_.replica);
  StateMoveRank mover;
  mover.from = layout::SlotRef{me_.replica, me_.slot};
  if (stays) mover.to = layout::SlotRef{me_.replica, me_.slot};
  const std::vector<int>& survivors = membership.survivors;
  mover.group_rank_of = [&](layout::SlotRef slot) {
    const int global = global_rank_of(places_, slot.replica, slot.slot);
    return static_cast<int>(std::lower_bound(survivors.begin(), survivors.end(), global) -
                            survivors.begin());
  };
  const RankLayout next_layout = plan_rank(next, setup_.gpt, me_);
  const auto exchange = comm::create_group(
      store_, group_options(config_, options_, membership.epoch, survivors, "recover", false));
  const StateMoveStats moved =
      move_state(*model_, *optimizer_, next_layout.shard, plans, mover, *exchange);
  run_.event("state_moved", {{"rank", options_.rank}, {"epoch", membership.epoch},
                             {"units_in", moved.units_in}, {"bytes_in", moved.bytes_in},
                             {"units_out", moved.units_out}, {"bytes_out", moved.bytes_out},
                             {"seconds", unix_time_s() - move_start}});
  exchange->barrier();  // every survivor holds its new state before anyone leaves

  parallel_ = next;
  epoch_ = membership.epoch;
  members_ = training_ranks(parallel_);
  if (!stays) {
    leaving_ = true;
    run_.event("rank_left", {{"rank", options_.rank}, {"epoch", epoch_},
                             {"reason", "replica below parallel.min_tp"}});
    return;
  }
  layout_ = next_layout;
  shares_ = power_->configure(parallel_, config_.train.global_batch);
  connect();
  start_sync();
  run_.event("step_resumed", {{"rank", options_.rank}, {"step", s}, {"epoch", epoch_},
                              {"tp", split_input(parallel_, config_.train.global_batch).active},
                              {"samples", shares_}, {"recovery_s", unix_time_s() - start}});
}

StepMetrics Worker::step(std::int64_t s, const SampleSchedule& schedule, TraceRecorder& compute,
                         TraceRecorder& comm_trace, bool traced) {
  const double start = unix_time_s();
  const std::int64_t T = setup_.seq_len;
  const auto parts = assign_samples(schedule.step_samples(s), shares_);
  const std::vector<std::int64_t>& mine = parts[static_cast<std::size_t>(me_.replica)];
  model_->zero_grad();
  model_->set_loss_scale(1.0f / static_cast<float>(config_.train.global_batch * T));
  double loss_sum = 0;
  std::vector<std::int32_t> inputs;
  std::vector<std::int32_t> targets;
  std::size_t next = 0;
  const std::vector<std::int64_t> micros =
      micro_batches(static_cast<std::int64_t>(mine.size()), config_.train.micro_batch);
  sync_->begin(model_->grads(), s);
  model::BackwardHooks hooks;
  hooks.grads_ready = [this](std::size_t first, std::size_t last) { sync_->grads_ready(first, last); };
  for (std::size_t k = 0; k < micros.size(); ++k) {
    const std::int64_t micro = micros[k];
    inputs.resize(static_cast<std::size_t>(micro * T));
    targets.resize(inputs.size());
    for (std::int64_t i = 0; i < micro; ++i, ++next) {
      data_.sample(mine[next], T, inputs.data() + i * T, targets.data() + i * T);
    }
    const double t0 = unix_time_s();
    loss_sum += model_->forward({inputs.data(), targets.data(), micro, T}).sum;
    // Only the last micro-batch's backward makes gradients final: it drives the sync.
    model_->backward(k + 1 == micros.size() ? hooks : model::BackwardHooks{});
    if (traced) compute.add({"forward+backward", Track::kCompute, t0, unix_time_s() - t0, s});
  }
  const SyncTotals totals = sync_->finish();
  const SyncBytes bytes = totals.bytes;
  const double sync_s = totals.exposed_s;
  if (traced) {
    for (const TraceSpan& span : totals.spans) comm_trace.add(span);
    compute.add({"wait for sync", Track::kCompute, unix_time_s() - sync_s, sync_s, s});
  }

  // The commit point: job-wide figures (the loss once per replica, bytes from
  // every rank) through the world group, before anyone applies the optimizer.
  // A rank that erred makes these fail everywhere, and nobody updates.
  std::vector<double> sums = {tp_.rank() == 0 ? loss_sum : 0.0, static_cast<double>(bytes.reshard),
                              static_cast<double>(bytes.allreduce)};
  world_->all_reduce(sums.data(), sums.size());
  std::vector<double> maxima = {sync_s, unix_time_s() - start};
  world_->all_reduce(maxima.data(), maxima.size(), comm::ReduceOp::kMax);
  if (is_writer()) run_.append_schedule(s, schedule.epoch_of(s), parts);

  const double opt_start = unix_time_s();
  StepMetrics m;
  m.step = s;
  m.epoch = schedule.epoch_of(s);
  m.lr = learning_rate(config_.train, s);
  comm::Group& tp = tp_;
  const model::StepStats stats = optimizer_->step(*model_, static_cast<float>(m.lr), [&tp](double x) {
    tp.all_reduce(&x, 1);
    return x;
  });
  const double opt_s = unix_time_s() - opt_start;
  if (traced) compute.add({"optimizer", Track::kCompute, opt_start, opt_s, s});
  m.tokens = config_.train.global_batch * T;
  m.loss = sums[0] / static_cast<double>(m.tokens);
  m.reshard_bytes = static_cast<std::int64_t>(sums[1]);
  m.allreduce_bytes = static_cast<std::int64_t>(sums[2]);
  m.grad_norm = stats.grad_norm;
  m.samples = shares_;
  m.tp = split_input(parallel_, config_.train.global_batch).active;
  m.exposed_sync_s = maxima[0];
  m.step_time_s = maxima[1] + opt_s;  // the slowest rank to the commit, then the update
  m.power = power_->metrics();
  return m;
}

void Worker::write_final_model() {
  // The writer's replica holds every unit once: sum its ranks' pieces into a full buffer.
  const model::ParameterLayout full(setup_.gpt, model::Shard::full(setup_.gpt));
  std::vector<float> values(static_cast<std::size_t>(full.size()), 0.0f);
  if (me_.replica == places_.at(static_cast<std::size_t>(members_.front())).replica) {
    model::gather_into_full(model_->layout(), model_->params(), full, values, tp_.rank() == 0);
    tp_.all_reduce(values.data(), values.size());
  }
  if (is_writer()) {
    model::write_llmc_checkpoint(run_.file("model.bin").string(), setup_.gpt, values);
  }
}

void Worker::run() {
  const SampleSchedule schedule(samples_in(data_.size(), setup_.seq_len),
                                config_.train.global_batch, config_.data.order, config_.train.seed);
  const std::string label = fmt::format("rank {}: replica {} slot {}", options_.rank, me_.replica, me_.slot);
  TraceRecorder compute(options_.rank, label, run_start_);
  TraceRecorder comm_trace(options_.rank, label, run_start_);
  const std::int64_t first_traced = config_.train.steps > 1 ? 1 : 0;
  for (std::int64_t s = 0; s < config_.train.steps; ++s) {
    const bool traced = s >= first_traced && s < first_traced + config_.run.trace_steps;
    if (s == config_.test.kill_at_step && options_.rank == config_.test.kill_rank) {
      run_.event("failure_injected", {{"rank", options_.rank}, {"step", s}});
      ::raise(SIGKILL);
    }
    std::optional<StepMetrics> m;
    while (!m) {
      try {
        m = step(s, schedule, compute, comm_trace, traced);
      } catch (const comm::CommError& e) {
        if (!config_.elastic.recover) throw;
        recover(s, e);  // then the same step again, with the same samples
        if (leaving_) {
          restore_power("exit");
          return;
        }
      }
    }
    if (is_writer()) run_.append_metrics(*m);
  }
  write_final_model();
  if (config_.run.trace_steps > 0) {
    compute.append(comm_trace);
    compute.write(run_.path() / "trace" / fmt::format("rank-{}.json", options_.rank));
  }
  world_->barrier();
  if (is_writer() && config_.run.trace_steps > 0) {
    merge_traces(run_.path() / "trace", run_.file("trace.json"));
  }
  restore_power("exit");
}

}  // namespace

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

layout::JobConfig job_config(const ParallelConfig& p, std::int64_t units) {
  layout::JobConfig c;
  c.units = units;
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

void check_job(const Config& config, const std::filesystem::path& run_dir) {
  const model::TokenData data = open_dataset(config.data, run_dir);
  const ModelSetup setup = resolve_model(config.model, data.max_token());
  const std::int64_t samples = samples_in(data.size(), setup.seq_len);
  if (samples < config.train.global_batch) {
    throw ConfigError(fmt::format(
        "train.global_batch: {} sequences per step, but the data holds only {} sequences of {} tokens",
        config.train.global_batch, samples, setup.seq_len));
  }
  const std::pair<const char*, std::int64_t> kinds[] = {
      {"heads", setup.gpt.heads}, {"FFN neurons", setup.gpt.ffn()}, {"vocabulary rows", setup.gpt.padded_vocab}};
  for (const auto& [kind, units] : kinds) {
    try {
      layout::plan_job(job_config(config.parallel, units));
    } catch (const std::exception& e) {
      throw ConfigError(fmt::format("parallel.tp: cannot lay out the model's {} {}: {}", units, kind,
                                    e.what()));
    }
  }
}

void run_ntp_worker(const Config& config, const std::filesystem::path& run_dir,
                    const WorkerOptions& options) {
  Worker worker(config, run_dir, options);
  try {
    worker.run();
  } catch (...) {
    worker.restore_power("error");
    throw;
  }
}

}  // namespace ntp::train
