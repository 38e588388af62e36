#include "train/power_setup.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <cstdio>
#include <stdexcept>

#include "train/schedule.h"

namespace ntp::train {

// FLOPs per unit and token (forward; the shares are what matter): a head
// unit's QKV rows and projection columns plus its query heads' attention (a
// GPT-2 head is a group of one query head), a neuron's fc1 row(s) and fc2
// column, a vocabulary row of the LM head.
std::vector<power::UnitWork> step_work(const ModelSetup& model) {
  return step_work(model, model::StageRange::whole(model.gpt));
}

std::vector<power::UnitWork> step_work(const ModelSetup& model, const model::StageRange& blocks) {
  const model::GptConfig& c = model.gpt;
  const double d = static_cast<double>(c.d_model), hd = static_cast<double>(c.head_dim());
  const double g = static_cast<double>(c.queries_per_group());
  const double layers = static_cast<double>(blocks.layers());
  const double t = static_cast<double>(model.seq_len);
  const double fc1_rows = c.llama() ? 2.0 : 1.0;
  const double vocab = blocks.has_head(c) ? 2.0 * d : 0.0;
  return {{static_cast<long>(c.head_units()), layers * (2.0 * d * hd * (2.0 * g + 2.0) + 4.0 * t * hd * g)},
          {static_cast<long>(c.ffn()), layers * 2.0 * d * (fc1_rows + 1.0)},
          {static_cast<long>(c.padded_vocab), vocab}};
}

std::vector<double> modelled_needs(int n, const std::vector<int>& active,
                                   const std::vector<power::UnitWork>& work) {
  std::vector<double> needs;
  needs.reserve(active.size());
  for (const int k : active) needs.push_back(power::busiest_work_need(work, n, k));
  return needs;
}

power::RankPowerOptions rank_power_options(const PowerConfig& config, const std::string& gpu) {
  power::RankPowerOptions options;
  options.mode = config.mode;
  options.model = {config.tdp_w, config.max_frac, config.alpha};
  options.headroom_w = config.headroom_w;
  if (!gpu.empty()) options.nvml.devices = {gpu};
  return options;
}

nlohmann::json plan_json(const power::BoostPlan& plan) {
  nlohmann::json replicas = nlohmann::json::array();
  for (std::size_t r = 0; r < plan.replicas.size(); ++r) {
    const power::ReplicaBoost& b = plan.replicas[r];
    replicas.push_back({{"replica", r},
                        {"active", b.active},
                        {"need", b.active > 0 ? b.need : 0.0},
                        {"limit_w", b.limit_w},
                        {"speedup", b.speedup},
                        {"share", b.share},
                        {"cap", power::to_string(b.cap)}});
  }
  return replicas;
}

nlohmann::json decision_json(const power::PowerDecision& d) {
  return {{"replica", d.replica}, {"active", d.active},   {"need", d.need},
          {"limit_w", d.limit_w}, {"speedup", d.speedup}, {"share", d.share},
          {"device_limit_w", d.device_limit_w}};
}

std::vector<ReplicaPower> replica_power(const power::BoostPlan& plan) {
  std::vector<ReplicaPower> out;
  for (const power::ReplicaBoost& b : plan.replicas) out.push_back({b.limit_w, b.speedup});
  return out;
}

RankPowerRun::RankPowerRun(const Config& config, const RunDir& run, PowerRank place,
                           const std::string& gpu)
    : run_(run),
      place_(place),
      power_(rank_power_options(config.power, gpu)),
      measure_(config.power.mode != power::PowerMode::off && config.power.need == NeedSource::kMeasured),
      rule_{config.power.need_smoothing, config.power.need_tolerance, 1} {}

std::vector<std::int64_t> RankPowerRun::configure(const ParallelConfig& parallel,
                                                  std::int64_t global_batch, const ModelSetup& model) {
  parallel_ = parallel;
  global_batch_ = global_batch;
  const int n = static_cast<int>(parallel.tp);
  active_ = policy_active(split_input(parallel, global_batch));
  std::vector<double> needs = modelled_needs(n, active_, step_work(model));
  stage_active_.clear();
  if (parallel.pp > 1) {
    if (place_.stages.size() != static_cast<std::size_t>(parallel.pp)) {
      throw std::logic_error(fmt::format("rank {}: the power plan needs the blocks of each of the {} stages",
                                         place_.rank, parallel.pp));
    }
    // A replica keeps pace when its neediest stage does.
    for (std::int64_t stage = 0; stage < parallel.pp; ++stage) {
      std::vector<int> active;
      for (std::int64_t r = 0; r < parallel.dp; ++r) {
        active.push_back(parallel.trains(r) ? static_cast<int>(parallel.active_slots(r, stage).size()) : 0);
      }
      const std::vector<double> stage_needs =
          modelled_needs(n, active, step_work(model, place_.stages[static_cast<std::size_t>(stage)]));
      if (stage == 0) needs = stage_needs;
      for (std::size_t r = 0; r < needs.size(); ++r) needs[r] = std::max(needs[r], stage_needs[r]);
      if (stage == place_.stage) {
        stage_active_ = active;
        stage_needs_ = stage_needs;
      }
    }
  }
  track_ = power::start_tracking(needs);
  return plan_and_apply(needs, "configuration");
}

std::optional<std::vector<std::int64_t>> RankPowerRun::observe(const std::vector<double>& compute_s) {
  if (!measure_) return std::nullopt;
  std::vector<power::ReplicaStepTime> step;
  for (std::size_t r = 0; r < active_.size(); ++r) {
    step.push_back({active_[r], static_cast<long>(shares_.at(r)), compute_s.at(r), plan_.replicas.at(r).speedup});
  }
  const std::vector<double> observed = power::observed_needs(static_cast<int>(parallel_.tp), step);
  if (!power::track_need(track_, observed, rule_)) return std::nullopt;
  return plan_and_apply(track_.planned, "measured");
}

std::vector<std::int64_t> RankPowerRun::plan_and_apply(const std::vector<double>& needs, const char* cause) {
  BatchSplitInput split = split_input(parallel_, global_batch_);
  const int n = static_cast<int>(parallel_.tp);
  plan_ = power_.plan(n, active_, global_batch_, needs);
  domain_plan_ = stage_active_.empty() ? plan_ : power_.plan(n, stage_active_, global_batch_, stage_needs_);
  const power::PowerDecision decision = power_.apply(domain_plan_, n, place_.replica);
  for (const power::ReplicaBoost& replica : plan_.replicas) split.planned.push_back(replica.share);
  if (power_.mode() != power::PowerMode::off) {
    if (place_.rank == 0) {
      run_.event("power_plan", {{"mode", power::to_string(power_.mode())},
                                {"cause", cause},
                                {"tp", n},
                                {"replicas", plan_json(plan_)}});
    }
    nlohmann::json applied = decision_json(decision);
    applied["rank"] = place_.rank;
    applied["slot"] = place_.slot;
    applied["stage"] = place_.stage;
    applied["share"] = plan_.replicas.at(static_cast<std::size_t>(place_.replica)).share;  // the replica's, not the stage plan's
    applied["cause"] = cause;
    run_.event("power_applied", applied);
  }
  shares_ = batch_shares(parallel_.batch_policy, split);
  return shares_;
}

double RankPowerRun::speedup(int replica) const {
  if (power_.mode() == power::PowerMode::off) return 1.0;
  return domain_plan_.replicas.at(static_cast<std::size_t>(replica)).speedup;
}

std::vector<ReplicaPower> RankPowerRun::metrics() const {
  if (power_.mode() == power::PowerMode::off) return {};
  return replica_power(plan_);
}

void RankPowerRun::restore(const char* cause) noexcept {
  if (power_.mode() == power::PowerMode::off) return;
  try {
    power_.restore();
    const power::PowerController& device = *power_.controller();
    run_.event("power_restored", {{"rank", place_.rank},
                                  {"replica", place_.replica},
                                  {"slot", place_.slot},
                                  {"stage", place_.stage},
                                  {"cause", cause},
                                  {"device_limit_w", device.get_limit_w(0)},
                                  {"default_limit_w", device.default_limit_w(0)}});
  } catch (const std::exception& e) {
    spdlog::error("ntp train: rank {}: restoring the power limit ({}): {}", place_.rank, cause, e.what());
  }
}

}  // namespace ntp::train
