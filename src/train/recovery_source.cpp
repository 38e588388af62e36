#include "train/recovery_source.h"

#include <algorithm>
#include <exception>

#include "layout/errors.h"

namespace ntp::train {
namespace {

// The units of every kind the slot at `place` holds under `plan`, in its
// stage (none where its replica does not train).
std::vector<layout::IntervalSet> slot_units(const JobPlan& plan, RankPlace place) {
  std::vector<layout::IntervalSet> out;
  if (!plan.trains(place.replica)) return out;
  for (const model::UnitKind kind : {model::UnitKind::kHead, model::UnitKind::kNeuron, model::UnitKind::kVocab}) {
    out.push_back(plan.layout(kind, place.stage).slot_view(place.replica, place.slot).units);
  }
  return out;
}

}  // namespace

bool completes_locally(const SurvivorState& s, std::int64_t newest, std::uint64_t from) {
  return s.applied == newest - 1 && s.pending == newest && s.held_epoch == from;
}

RecoverySource choose_recovery_source(const std::map<std::uint64_t, const JobPlan*>& plans,
                                      const std::vector<SurvivorState>& survivors, const JobPlan& next) {
  std::int64_t newest = -1;
  for (const SurvivorState& s : survivors) newest = std::max(newest, s.applied);
  std::vector<std::uint64_t> candidates;  // the layouts the newest state is held in, newest first
  for (const SurvivorState& s : survivors) {
    if (s.applied == newest) candidates.push_back(s.held_epoch);
  }
  std::sort(candidates.rbegin(), candidates.rend());
  candidates.erase(std::unique(candidates.begin(), candidates.end()), candidates.end());
  std::exception_ptr first_loss;
  for (std::uint64_t from : candidates) {
    RecoverySource out;
    out.epoch = from;
    for (const SurvivorState& s : survivors) {
      const bool serves = s.applied == newest &&
                          (s.held_epoch == from ||
                           slot_units(*plans.at(s.held_epoch), s.place) == slot_units(*plans.at(from), s.place));
      if (!serves && !completes_locally(s, newest, from)) out.stale.push_back(s.place);
    }
    try {
      for (int stage = 0; stage < next.pp(); ++stage) {
        std::vector<layout::SlotRef> stale;
        for (const RankPlace& p : out.stale) {
          if (p.stage == stage) stale.push_back({p.replica, p.slot});
        }
        out.stages.push_back(transition(*plans.at(from), next, stale, stage));
      }
      return out;
    } catch (const layout::UnitsLostError&) {
      if (!first_loss) first_loss = std::current_exception();
    }
  }
  std::rethrow_exception(first_loss);
}

}  // namespace ntp::train
