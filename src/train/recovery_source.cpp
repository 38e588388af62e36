#include "train/recovery_source.h"

#include <algorithm>
#include <exception>

#include "layout/errors.h"
#include "layout/job_layout.h"

namespace ntp::train {
namespace {

// Each epoch's layouts of the three unit kinds, planned once: a mixed-layout
// recovery compares every survivor's units in two epochs.
class EpochLayouts {
 public:
  EpochLayouts(const std::map<std::uint64_t, ParallelConfig>& configs, const model::GptConfig& gpt)
      : configs_(configs), gpt_(gpt) {}
  // The units of every kind the slot at `place` holds in epoch `epoch`
  // (none where its replica does not train).
  std::vector<layout::IntervalSet> slot_units(std::uint64_t epoch, RankPlace place) {
    const ParallelConfig& p = configs_.at(epoch);
    std::vector<layout::IntervalSet> out;
    if (!trains(p, place.replica)) return out;
    auto it = planned_.find(epoch);
    if (it == planned_.end()) {
      std::vector<layout::JobLayout> kinds;
      const std::pair<model::UnitKind, std::int64_t> units[] = {{model::UnitKind::kHead, gpt_.head_units()},
                                                                {model::UnitKind::kNeuron, gpt_.ffn()},
                                                                {model::UnitKind::kVocab, gpt_.padded_vocab}};
      for (const auto& [kind, count] : units) kinds.push_back(layout::plan_job(job_config(p, kind, count)));
      it = planned_.emplace(epoch, std::move(kinds)).first;
    }
    for (const layout::JobLayout& kind : it->second) out.push_back(kind.slot_view(place.replica, place.slot).units);
    return out;
  }

 private:
  const std::map<std::uint64_t, ParallelConfig>& configs_;
  const model::GptConfig& gpt_;
  std::map<std::uint64_t, std::vector<layout::JobLayout>> planned_;
};

}  // namespace

bool completes_locally(const SurvivorState& s, std::int64_t newest, std::uint64_t from) {
  return s.applied == newest - 1 && s.pending == newest && s.held_epoch == from;
}

RecoverySource choose_recovery_source(const std::map<std::uint64_t, ParallelConfig>& configs,
                                      const std::vector<SurvivorState>& survivors, const ParallelConfig& next,
                                      const model::GptConfig& gpt) {
  std::int64_t newest = -1;
  for (const SurvivorState& s : survivors) newest = std::max(newest, s.applied);
  std::vector<std::uint64_t> candidates;  // the layouts the newest state is held in, newest first
  for (const SurvivorState& s : survivors) {
    if (s.applied == newest) candidates.push_back(s.held_epoch);
  }
  std::sort(candidates.rbegin(), candidates.rend());
  candidates.erase(std::unique(candidates.begin(), candidates.end()), candidates.end());
  EpochLayouts layouts(configs, gpt);
  std::exception_ptr first_loss;
  for (std::uint64_t from : candidates) {
    RecoverySource out;
    out.epoch = from;
    for (const SurvivorState& s : survivors) {
      const bool serves = s.applied == newest &&
                          (s.held_epoch == from ||
                           layouts.slot_units(s.held_epoch, s.place) == layouts.slot_units(from, s.place));
      if (!serves && !completes_locally(s, newest, from)) out.stale.push_back({s.place.replica, s.place.slot});
    }
    try {
      out.plans = transition_plans(configs.at(from), next, gpt, out.stale);
      return out;
    } catch (const layout::UnitsLostError&) {
      if (!first_loss) first_loss = std::current_exception();
    }
  }
  std::rethrow_exception(first_loss);
}

}  // namespace ntp::train
