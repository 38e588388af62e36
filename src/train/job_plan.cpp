#include "train/job_plan.h"

#include <algorithm>
#include <stdexcept>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "layout/errors.h"
#include "layout/stages.h"
#include "layout/unit_costs.h"
#include "train/model_setup.h"

namespace ntp::train {
namespace {

constexpr model::UnitKind kKinds[3] = {model::UnitKind::kHead, model::UnitKind::kNeuron, model::UnitKind::kVocab};

std::size_t kind_index(model::UnitKind kind) {
  for (std::size_t k = 0; k < 3; ++k) {
    if (kKinds[k] == kind) return k;
  }
  throw std::invalid_argument("a job plan lays out heads, FFN neurons and vocabulary rows only");
}

std::int64_t units_of(const model::GptConfig& gpt, model::UnitKind kind) {
  switch (kind) {
    case model::UnitKind::kHead:
      return gpt.head_units();
    case model::UnitKind::kNeuron:
      return gpt.ffn();
    default:
      return gpt.padded_vocab;
  }
}

// What a kind is called in an error: "heads" or Llama's "KV groups".
std::string kind_name(const model::GptConfig& gpt, model::UnitKind kind) {
  switch (kind) {
    case model::UnitKind::kHead:
      return gpt.llama() ? "KV groups" : "heads";
    case model::UnitKind::kNeuron:
      return "FFN neurons";
    default:
      return "vocabulary rows";
  }
}

// The processes of the job's first configuration: the active slots of every
// training replica, replica-major, then stage, then slot.
std::vector<RankPlace> places_of(const ParallelConfig& p) {
  std::vector<RankPlace> places;
  for (std::int64_t r = 0; r < p.dp; ++r) {
    if (!p.trains(r)) continue;
    for (std::int64_t stage = 0; stage < p.pp; ++stage) {
      for (std::int64_t slot : p.active_slots(r, stage)) {
        places.push_back({static_cast<int>(r), static_cast<int>(slot), static_cast<int>(stage)});
      }
    }
  }
  return places;
}

layout::UnitCosts costs_of(const model::GptConfig& g, std::int64_t seq_len) {
  return layout::unit_costs({.d_model = g.d_model,
                             .heads = g.heads,
                             .kv_heads = g.head_units(),
                             .ffn = g.ffn(),
                             .gated_ffn = g.llama(),
                             .vocab = g.padded_vocab,
                             .seq_len = seq_len,
                             .layers = g.layers});
}

// The blocks of each of parallel.pp stages: the split with the least
// bottleneck, a block weighing its heads and neurons, the last stage also the
// LM head (the embedding lookup costs next to nothing). From the whole model,
// not from any TP degree: a stage keeps its blocks when a slot fails, so
// recovery moves units within a stage only.
std::vector<model::StageRange> stages_of(const ParallelConfig& p, const JobShape& shape) {
  const model::GptConfig& g = shape.gpt;
  const layout::UnitCosts costs = costs_of(g, shape.seq_len);
  layout::StageSplitInput in;
  in.layers = static_cast<int>(g.layers);
  in.pp = static_cast<int>(p.pp);
  in.block_cost = static_cast<double>(g.head_units()) * costs.head + static_cast<double>(g.ffn()) * costs.neuron;
  in.head_cost = static_cast<double>(g.padded_vocab) * costs.vocab_row;
  try {
    return model::stage_ranges(layout::split_stages(in));
  } catch (const std::invalid_argument& e) {
    throw ConfigError(e.what());
  }
}

std::vector<HostPlacement> hosts_of(const std::vector<RankPlace>& places, std::int64_t dp, int nnodes) {
  if (nnodes < 1) throw std::invalid_argument(fmt::format("--nnodes {}: must be >= 1", nnodes));
  if (dp % nnodes != 0) {
    throw std::invalid_argument(fmt::format(
        "--nnodes {}: parallel.dp = {} replicas do not split evenly over {} hosts (each replica's TP group stays "
        "inside one host; data parallelism runs across hosts)",
        nnodes, dp, nnodes));
  }
  const int per_host = static_cast<int>(dp) / nnodes;
  std::vector<HostPlacement> hosts(static_cast<std::size_t>(nnodes));
  int rank = 0;
  for (int h = 0; h < nnodes; ++h) {
    HostPlacement& host = hosts[static_cast<std::size_t>(h)];
    host.node = h;
    for (int r = h * per_host; r < (h + 1) * per_host; ++r) host.replicas.push_back(r);
    host.first_rank = rank;
    while (rank < static_cast<int>(places.size()) && places[static_cast<std::size_t>(rank)].replica / per_host == h) {
      ++rank;
    }
    host.ranks = rank - host.first_rank;
    if (host.ranks == 0) {
      throw std::invalid_argument(fmt::format("--nnodes {}: node {} would hold no training rank (its replicas {} "
                                              "do not train)",
                                              nnodes, h, fmt::join(host.replicas, ",")));
    }
  }
  return hosts;
}

}  // namespace

layout::JobConfig job_config(const ParallelConfig& p, model::UnitKind kind, std::int64_t units, int stage) {
  layout::JobConfig c;
  c.units = units;
  c.align = kind == model::UnitKind::kHead ? 1 : p.align;
  c.tp = static_cast<int>(p.tp);
  c.replicas = static_cast<int>(p.dp);
  c.min_tp = static_cast<int>(p.min_tp);
  if (p.balance == Balance::kWork) c.speeds = p.speeds;
  for (std::int64_t r = 0; r < p.dp; ++r) {
    const std::vector<std::int64_t>& lost = p.failed_slots(r, stage);
    if (lost.empty()) continue;
    std::vector<int>& out = c.failed[static_cast<int>(r)];
    for (std::int64_t slot : lost) out.push_back(static_cast<int>(slot));
  }
  // A replica whose other stage fell below min_tp sits out in this one too.
  for (std::int64_t r = 0; r < p.dp; ++r) {
    if (p.trains(r) || static_cast<std::int64_t>(p.active_slots(r, stage).size()) < p.min_tp) continue;
    std::vector<int>& out = c.failed[static_cast<int>(r)];
    out.clear();
    for (int slot = 0; slot < c.tp; ++slot) out.push_back(slot);
  }
  return c;
}

std::vector<HostPlacement> JobPlan::place_hosts(const ParallelConfig& parallel, int nnodes) {
  return hosts_of(places_of(parallel), parallel.dp, nnodes);
}

JobPlan JobPlan::build(const Config& config, const JobShape& shape, int nnodes) {
  if (shape.samples < config.train.global_batch) {
    throw ConfigError(fmt::format(
        "train.global_batch: {} sequences per step, but the data holds only {} sequences of {} tokens",
        config.train.global_batch, shape.samples, shape.seq_len));
  }
  JobPlan plan;
  plan.config_ = config;
  plan.shape_ = shape;
  plan.parallel_ = config.parallel;
  plan.places_ = places_of(config.parallel);
  if (plan.places_.empty()) {
    throw ConfigError(fmt::format("parallel.min_tp: every replica has fewer than parallel.min_tp = {} active slots{}",
                                  config.parallel.min_tp, config.parallel.pp > 1 ? " in some stage" : ""));
  }
  plan.stages_ = stages_of(config.parallel, shape);
  try {
    plan.lay_out();
  } catch (const ConfigError&) {
    throw;
  } catch (const std::exception& e) {
    throw ConfigError(fmt::format("parallel.tp: {}", e.what()));
  }
  plan.hosts_ = hosts_of(plan.places_, config.parallel.dp, nnodes);
  return plan;
}

void JobPlan::lay_out() {
  layouts_.resize(stages_.size());
  for (std::size_t stage = 0; stage < stages_.size(); ++stage) {
    for (const model::UnitKind kind : kKinds) {
      const std::int64_t units = units_of(shape_.gpt, kind);
      try {
        layouts_[stage][kind_index(kind)] =
            layout::plan_job(job_config(parallel_, kind, units, static_cast<int>(stage)));
      } catch (const layout::InfeasibleError&) {
        throw;  // a later epoch in which no replica can train: the recovery planner's case
      } catch (const std::exception& e) {
        throw ConfigError(fmt::format("parallel.tp: cannot lay out the model's {} {}{}: {}", units,
                                      kind_name(shape_.gpt, kind),
                                      stages_.size() > 1 ? fmt::format(" in stage {}", stage) : "", e.what()));
      }
    }
  }
  members_.clear();
  for (std::size_t i = 0; i < places_.size(); ++i) {
    const RankPlace& p = places_[i];
    const std::vector<std::int64_t> active = parallel_.active_slots(p.replica, p.stage);
    if (trains(p.replica) && std::binary_search(active.begin(), active.end(), p.slot)) {
      members_.push_back(static_cast<int>(i));
    }
  }
}

const RankPlace& JobPlan::place(int rank) const {
  if (rank < 0 || rank >= world_size()) {
    throw std::out_of_range(fmt::format("rank {}: the job has ranks 0-{}", rank, world_size() - 1));
  }
  return places_[static_cast<std::size_t>(rank)];
}

int JobPlan::rank_of(RankPlace place) const {
  const auto it = std::find(places_.begin(), places_.end(), place);
  if (it == places_.end()) {
    throw std::logic_error(fmt::format("replica {} stage {} slot {} has no process", place.replica, place.stage,
                                       place.slot));
  }
  return static_cast<int>(it - places_.begin());
}

bool JobPlan::is_member(int rank) const { return std::binary_search(members_.begin(), members_.end(), rank); }

bool JobPlan::trains(std::int64_t replica) const { return parallel_.trains(replica); }

const layout::JobLayout& JobPlan::layout(model::UnitKind kind, int stage) const {
  if (stage < 0 || stage >= pp()) {
    throw std::out_of_range(fmt::format("stage {}: the job has stages 0-{}", stage, pp() - 1));
  }
  return layouts_[static_cast<std::size_t>(stage)][kind_index(kind)];
}

RankView JobPlan::view(int rank) const {
  RankView v;
  v.place = place(rank);
  v.trains = is_member(rank);
  if (!v.trains) return v;
  const int stage = v.place.stage;
  const auto slot_view = [&](model::UnitKind kind) {
    return layout(kind, stage).slot_view(v.place.replica, v.place.slot);
  };
  v.views = {slot_view(model::UnitKind::kHead), slot_view(model::UnitKind::kNeuron), slot_view(model::UnitKind::kVocab)};
  v.shard = {v.views.heads.units, v.views.neurons.units, v.views.vocab.units};
  v.tp_group = tp_group(v.place.replica, stage);
  for (std::int64_t slot : parallel_.active_slots(v.place.replica, stage)) v.active.push_back(static_cast<int>(slot));
  v.sync_group = v.views.heads.sync_group;
  if (v.sync_group >= 0) {
    // DP groups come from the layout's core lists, never from physical slot ids.
    for (const auto& [r, slot] : layout(model::UnitKind::kHead, stage).sync_group_members(v.sync_group)) {
      v.dp_group.push_back(rank_of({r, slot, stage}));
    }
  }
  link_stages(v);
  const layout::JobLayout& vocab = layout(model::UnitKind::kVocab, stage);
  int training = 0;
  bool no_extra_slots = true;
  for (int r = 0; r < vocab.num_replicas(); ++r) {
    if (vocab.replica(r).dropped) continue;
    ++training;
    no_extra_slots = no_extra_slots && vocab.replica(r).pre_sync.empty();
  }
  v.vocab_split_ok = training > 1 && no_extra_slots && !shape_.gpt.llama();
  return v;
}

std::vector<int> JobPlan::tp_group(int replica, int stage) const {
  std::vector<int> ranks;
  for (std::int64_t slot : parallel_.active_slots(replica, stage)) {
    ranks.push_back(rank_of({replica, static_cast<int>(slot), stage}));
  }
  return ranks;
}

void JobPlan::link_stages(RankView& v) const {
  const int stage = v.place.stage;
  v.layers = stages_[static_cast<std::size_t>(stage)];
  if (pp() > 1) {
    for (int r : members_)
      if (place(r).replica == v.place.replica) v.pipeline_group.push_back(r);
  }
  const std::vector<int> mine = tp_group(v.place.replica, stage);
  const int index = static_cast<int>(std::find(mine.begin(), mine.end(), rank_of(v.place)) - mine.begin());
  const int k = static_cast<int>(mine.size());
  if (stage > 0) {
    const std::vector<int> before = tp_group(v.place.replica, stage - 1);
    const int k_before = static_cast<int>(before.size());
    v.activation_from = before[static_cast<std::size_t>(index % k_before)];
    for (int i = index; i < k_before; i += k) v.gradient_to.push_back(before[static_cast<std::size_t>(i)]);
  }
  if (stage + 1 < pp()) {
    const std::vector<int> after = tp_group(v.place.replica, stage + 1);
    const int k_after = static_cast<int>(after.size());
    v.gradient_from = after[static_cast<std::size_t>(index % k_after)];
    for (int j = index; j < k_after; j += k) v.activation_to.push_back(after[static_cast<std::size_t>(j)]);
  }
}

SampleSchedule JobPlan::schedule() const {
  return {shape_.samples, config_.train.global_batch, config_.data.order, config_.train.seed};
}

const HostPlacement& JobPlan::host_of(int rank) const {
  for (const HostPlacement& h : hosts_) {
    if (rank >= h.first_rank && rank < h.first_rank + h.ranks) return h;
  }
  throw std::out_of_range(fmt::format("rank {}: the job has ranks 0-{}", rank, world_size() - 1));
}

tensor::ThreadSetup JobPlan::threads(int rank) const { return thread_setup(config_.model, host_of(rank).ranks); }

double JobPlan::work_of(int rank) const {
  if (!is_member(rank)) return 0;
  const RankPlace& p = place(rank);
  const model::GptConfig& g = gpt();
  const layout::UnitCosts costs = costs_of(g, shape_.seq_len);
  const auto units = [&](model::UnitKind kind) {
    return static_cast<double>(layout(kind, p.stage).units_of(p.replica, p.slot).size());
  };
  const model::StageRange& layers = stages_[static_cast<std::size_t>(p.stage)];
  // The LM head is the vocabulary's compute; the embedding lookup on the
  // first stage costs next to nothing.
  const double head = layers.has_head(g) ? units(model::UnitKind::kVocab) * costs.vocab_row : 0.0;
  return static_cast<double>(layers.layers()) *
             (units(model::UnitKind::kHead) * costs.head + units(model::UnitKind::kNeuron) * costs.neuron) +
         head;
}

JobPlan JobPlan::at(const ParallelConfig& next, std::uint64_t epoch) const {
  JobPlan plan = *this;
  plan.parallel_ = next;
  plan.epoch_ = epoch;
  plan.lay_out();
  return plan;
}

ParallelConfig JobPlan::next_parallel(const std::vector<int>& lost, const std::vector<int>& joined) const {
  ParallelConfig p = parallel_;
  const auto mark = [&](int rank, bool failed) {
    const RankPlace& at = place(rank);
    const ReplicaStage key{at.replica, at.stage};
    std::vector<std::int64_t>& slots = p.failed[key];
    slots.erase(std::remove(slots.begin(), slots.end(), at.slot), slots.end());
    if (failed) slots.insert(std::upper_bound(slots.begin(), slots.end(), at.slot), at.slot);
    if (slots.empty()) p.failed.erase(key);
  };
  for (int rank : lost) mark(rank, true);
  for (int rank : joined) mark(rank, false);
  return p;
}

JobPlan JobPlan::without(const std::vector<int>& lost) const { return at(next_parallel(lost, {}), epoch_ + 1); }

JobPlan JobPlan::with(const std::vector<int>& joined) const { return at(next_parallel({}, joined), epoch_ + 1); }

KindPlans transition(const JobPlan& from, const JobPlan& to, const std::vector<layout::SlotRef>& stale,
                     int stage) {
  const auto plan = [&](model::UnitKind kind) {
    layout::TransitionPlan p = layout::plan_transition(from.layout(kind, stage), to.layout(kind, stage), stale);
    if (!p.recoverable()) {
      const std::string where = from.pp() > 1 ? fmt::format(" of pipeline stage {}", stage) : "";
      throw layout::UnitsLostError(fmt::format("no surviving holder at the resume step has these {}{}: {}",
                                               kind_name(from.gpt(), kind), where, p.lost_summary()));
    }
    return p;
  };
  return {plan(model::UnitKind::kHead), plan(model::UnitKind::kNeuron), plan(model::UnitKind::kVocab)};
}

std::string describe_placement(const std::vector<HostPlacement>& hosts) {
  std::string text;
  for (const HostPlacement& h : hosts) {
    text += fmt::format("{}node {}: replica{} {} (ranks {}-{})", text.empty() ? "" : "; ", h.node,
                        h.replicas.size() == 1 ? "" : "s", fmt::join(h.replicas, ","), h.first_rank,
                        h.first_rank + h.ranks - 1);
  }
  return text;
}

}  // namespace ntp::train
