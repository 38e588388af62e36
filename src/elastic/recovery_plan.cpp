#include "elastic/recovery_plan.h"

#include <algorithm>
#include <map>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "layout/errors.h"

namespace ntp::elastic {
namespace {

train::RankPlace place_of(const RecoveryInput& in, int rank) { return in.last.place(rank); }

std::vector<train::SurvivorState> survivor_states(const RecoveryInput& in) {
  std::vector<train::SurvivorState> states;
  for (const Survivor& s : in.agreed.survivors) {
    states.push_back({place_of(in, s.rank), s.applied, s.pending, s.held_epoch});
  }
  return states;
}

// The layouts the newest state is held in: only survivors at `newest` serve.
std::map<std::uint64_t, const train::JobPlan*> held_plans(const RecoveryInput& in, std::int64_t newest) {
  std::map<std::uint64_t, const train::JobPlan*> held;
  for (const Survivor& s : in.agreed.survivors) {
    if (s.applied == newest) held.emplace(s.held_epoch, &in.plan_of(s.held_epoch));
  }
  return held;
}

bool contains(const std::vector<int>& sorted, int rank) {
  return std::binary_search(sorted.begin(), sorted.end(), rank);
}

}  // namespace

bool RecoveryPlan::is_stale(int rank) const { return contains(stale, rank); }

train::ParallelConfig next_parallel(const RecoveryInput& in) {
  train::ParallelConfig next = in.last.next_parallel(in.agreed.lost, in.agreed.joined);
  if (in.speeds) next.speeds = *in.speeds;
  return next;
}

RecoveryPlan plan_recovery(const RecoveryInput& in) {
  RecoveryPlan plan;
  const std::vector<Survivor>& survivors = in.agreed.survivors;
  for (const Survivor& s : survivors) plan.newest = std::max(plan.newest, s.applied);
  for (const Survivor& s : survivors) {
    if (s.applied != plan.newest) continue;
    plan.outcome = {s.grad_norm, s.skipped};
    break;
  }
  plan.next = in.last.at(next_parallel(in), in.agreed.epoch);
  const std::vector<train::SurvivorState> states = survivor_states(in);
  const std::map<std::uint64_t, const train::JobPlan*> held = held_plans(in, plan.newest);
  try {
    plan.source = train::choose_recovery_source(held, states, *plan.next);
  } catch (const layout::UnitsLostError&) {
    plan.units_lost = std::current_exception();
  }
  plan.from_epoch = plan.source ? plan.source->epoch : held.rbegin()->first;
  // A failure inside the commit collective can leave ranks just short of a
  // step others applied: their synced gradients are final (the collective
  // only completes once every rank entered it), so they apply it with the
  // outcome the others saw and no state moves for them.
  for (std::size_t i = 0; i < states.size(); ++i) {
    if (train::completes_locally(states[i], plan.newest, plan.from_epoch)) {
      plan.completes_commit.push_back(survivors[i].rank);
    }
  }
  const std::vector<train::RankPlace> stale_places = plan.source ? plan.source->stale : std::vector<train::RankPlace>{};
  std::map<int, std::vector<int>> fresh;  // stage -> its survivors that are not stale
  for (const Survivor& s : survivors) {
    const train::RankPlace place = place_of(in, s.rank);
    if (std::find(stale_places.begin(), stale_places.end(), place) != stale_places.end()) {
      plan.stale.push_back(s.rank);
    } else {
      fresh[place.stage].push_back(s.rank);
    }
  }
  plan.members = plan.next->members();
  // Round robin over the stage's fresh ranks: a rejoining replica's stale
  // ranks do not all wait on one sender.
  std::map<int, std::size_t> sent;  // stage -> refreshes assigned so far
  for (int rank : plan.stale) {
    const int stage = place_of(in, rank).stage;
    const auto senders = fresh.find(stage);
    if (senders == fresh.end() || !contains(plan.members, rank)) continue;
    plan.refreshes.emplace_back(senders->second[sent[stage]++ % senders->second.size()], rank);
  }
  // Growing for a rank that was lost while it asked changes nothing either,
  // but is no error: the members go on in a new epoch.
  plan.changes_nothing = in.failure && in.agreed.lost.empty() && plan.stale.empty() &&
                         in.agreed.joined.empty() && plan.completes_commit.empty() &&
                         plan.next->parallel().speeds == in.last.parallel().speeds;
  if (!plan.members.empty()) plan.writer = plan.members.front();
  for (const Survivor& s : survivors) {
    if (s.applied == plan.newest && contains(plan.members, s.rank)) {
      plan.writer = s.rank;
      break;
    }
  }
  return plan;
}

namespace {

std::vector<const layout::TransitionPlan*> kind_plans(const train::KindPlans& plans) {
  return {&plans.heads, &plans.neurons, &plans.vocab};
}

// Why `rank`, behind the newest step, is neither stale nor completing it; "" when it is one of the two.
std::string behind_rule(const RecoveryPlan& plan, const Survivor& s) {
  const bool completes = contains(plan.completes_commit, s.rank);
  const bool stale = plan.is_stale(s.rank);
  if (completes && stale) return fmt::format("rank {} both completes the commit of step {} and is stale", s.rank, plan.newest);
  if (s.applied < plan.newest && !completes && !stale) {
    return fmt::format("rank {} applied step {} < {} but is neither stale nor completing the commit", s.rank,
                       s.applied, plan.newest);
  }
  if (completes && !(s.applied == plan.newest - 1 && s.pending == plan.newest && s.held_epoch == plan.from_epoch)) {
    return fmt::format("rank {} completes step {} locally without having entered its commit in epoch {}'s layout",
                       s.rank, plan.newest, plan.from_epoch);
  }
  return "";
}

std::string check_sources(const RecoveryInput& in, const RecoveryPlan& plan) {
  if (!plan.source) return plan.units_lost ? "" : "no source and no lost units";
  std::vector<train::RankPlace> serving;
  for (const Survivor& s : in.agreed.survivors) {
    // A rank that completes the commit locally holds the newest step too.
    const bool holds = s.applied == plan.newest || contains(plan.completes_commit, s.rank);
    if (plan.is_stale(s.rank) || !holds) continue;
    serving.push_back(place_of(in, s.rank));
  }
  if (plan.source->stages.size() != static_cast<std::size_t>(in.last.pp())) {
    return fmt::format("the source plans {} stages of the job's {}", plan.source->stages.size(), in.last.pp());
  }
  for (std::size_t stage = 0; stage < plan.source->stages.size(); ++stage) {
    for (const layout::TransitionPlan* kind : kind_plans(plan.source->stages[stage])) {
      if (!kind->recoverable()) return "a source plan loses units: " + kind->lost_summary();
      for (const layout::Move& m : kind->moves) {
        const train::RankPlace from{m.from.replica, m.from.slot, static_cast<int>(stage)};
        if (std::find(serving.begin(), serving.end(), from) == serving.end()) {
          return fmt::format("units {} of stage {} come from replica {} slot {}, which does not hold step {} (stale, "
                             "behind or lost)",
                             m.units.to_string(), stage, m.from.replica, m.from.slot, plan.newest);
        }
      }
    }
  }
  return "";
}

// Every stale rank that trains next is refreshed once, by a rank of its own
// stage that is not stale; "" when that holds.
std::string check_refreshes(const RecoveryInput& in, const RecoveryPlan& plan) {
  std::vector<int> refreshed;
  for (const auto& [sender, rank] : plan.refreshes) {
    if (plan.is_stale(sender)) return fmt::format("rank {} is stale but serves the replicated tensors", sender);
    const auto survivor = std::find_if(in.agreed.survivors.begin(), in.agreed.survivors.end(),
                                       [sender = sender](const Survivor& s) { return s.rank == sender; });
    if (survivor == in.agreed.survivors.end() ||
        (survivor->applied != plan.newest && !contains(plan.completes_commit, sender))) {
      return fmt::format("rank {} refreshes rank {} but does not hold step {} (lost or behind)", sender, rank,
                         plan.newest);
    }
    if (!plan.is_stale(rank)) return fmt::format("rank {} is refreshed but not stale", rank);
    if (place_of(in, sender).stage != place_of(in, rank).stage) {
      return fmt::format("rank {} of stage {} is refreshed by rank {} of stage {}", rank, place_of(in, rank).stage,
                         sender, place_of(in, sender).stage);
    }
    refreshed.push_back(rank);
  }
  std::sort(refreshed.begin(), refreshed.end());
  if (std::adjacent_find(refreshed.begin(), refreshed.end()) != refreshed.end()) return "a stale rank is refreshed twice";
  for (int rank : plan.stale) {
    if (contains(plan.members, rank) && !contains(refreshed, rank)) {
      return fmt::format("stale rank {} trains next but nobody refreshes it", rank);
    }
  }
  return "";
}

}  // namespace

std::string check_recovery_plan(const RecoveryInput& in, const RecoveryPlan& plan) {
  std::int64_t newest = -1;
  for (const Survivor& s : in.agreed.survivors) newest = std::max(newest, s.applied);
  if (plan.newest != newest) {
    return fmt::format("resumes at step {}, but a survivor applied step {}: resume at {}", plan.resume(), newest,
                       newest + 1);
  }
  const train::ParallelConfig next = next_parallel(in);
  if (!plan.next || !(plan.next->parallel() == next) || plan.next->epoch() != in.agreed.epoch) {
    return "the next plan is not the last one without the lost and with the joined slots, at the asked-for "
           "speeds, in the agreed epoch";
  }
  if (plan.members != in.last.at(next, in.agreed.epoch).members()) return "the members are not the ranks that train next";
  // Without a source the job stops (units lost): nobody is refilled.
  for (const Survivor& s : in.agreed.survivors) {
    if (!plan.source) break;
    if (const std::string why = behind_rule(plan, s); !why.empty()) return why;
  }
  if (plan.source) {
    std::vector<int> stale;
    for (const train::RankPlace& place : plan.source->stale) {
      for (const Survivor& s : in.agreed.survivors) {
        if (place_of(in, s.rank) == place) stale.push_back(s.rank);
      }
    }
    std::sort(stale.begin(), stale.end());
    if (stale != plan.stale) return fmt::format("stale ranks {} differ from the source plan's {}", plan.stale, stale);
  }
  if (const std::string why = check_sources(in, plan); !why.empty()) return why;
  if (const std::string why = check_refreshes(in, plan); !why.empty()) return why;
  if (!plan.members.empty() && !contains(plan.members, plan.writer)) {
    return fmt::format("writer {} does not train next", plan.writer);
  }
  for (const Survivor& s : in.agreed.survivors) {
    if (s.applied != newest || !contains(plan.members, s.rank)) continue;
    const auto writer = std::find_if(in.agreed.survivors.begin(), in.agreed.survivors.end(),
                                     [&](const Survivor& w) { return w.rank == plan.writer; });
    if (writer == in.agreed.survivors.end() || writer->applied != newest) {
      return fmt::format("writer {} does not hold step {}'s figures, rank {} does", plan.writer, newest, s.rank);
    }
    break;
  }
  return "";
}

}  // namespace ntp::elastic
