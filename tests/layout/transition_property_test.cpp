// Property tests of transition plans between random pairs of configurations
// of the same job: new failures, repairs, both at once, K down or up, replicas
// dropping out and coming back, failures that lose units outright, and stale
// slots (survivors one step behind) that must be rolled forward.
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <set>
#include <string>

#include "layout/errors.h"
#include "layout/transition.h"
#include "random_job.h"

namespace ntp::layout {
namespace {

using testing::pick;

// The next configuration: some failed slots repaired, some new failures.
JobConfig random_next(std::mt19937_64& rng, const JobConfig& from) {
  JobConfig to = from;
  std::bernoulli_distribution repair(0.4);
  for (auto it = to.failed.begin(); it != to.failed.end();) {
    std::erase_if(it->second, [&](int) { return repair(rng); });
    it = it->second.empty() ? to.failed.erase(it) : std::next(it);
  }
  const FailedSlots fresh = testing::random_failures(rng, to.replicas, to.tp, 0.3);
  for (const auto& [r, slots] : fresh)
    for (int slot : slots) {
      std::vector<int>& list = to.failed[r];
      if (std::find(list.begin(), list.end(), slot) == list.end()) list.push_back(slot);
    }
  return to;
}

using Stale = std::set<SlotRef>;

// Some slots one step behind: now and then a whole replica, else a few slots
// of a few replicas. Any slot may be picked, also one that is dead or sits out
// in `to` (it then needs nothing).
Stale random_stale(std::mt19937_64& rng, const JobConfig& config) {
  Stale stale;
  std::bernoulli_distribution hit(0.3), whole(0.15);
  for (int r = 0; r < config.replicas; ++r) {
    if (!hit(rng)) continue;
    const int count = whole(rng) ? config.tp : pick(rng, 1, std::min(config.tp, 3));
    for (int slot : testing::random_slots(rng, config.tp, count)) stale.insert({r, slot});
  }
  return stale;
}

// Units of replica r's old layout whose holder serves: alive in the new
// configuration and not stale.
IntervalSet serving(const JobLayout& from, const JobLayout& to, const Stale& stale, int r) {
  IntervalSet units;
  for (int slot : to.replica(r).active)
    if (!stale.count({r, slot})) units.add(from.units_of(r, slot));
  return units;
}

void check_moves_are_sound(const JobLayout& from, const JobLayout& to, const Stale& stale,
                           const TransitionPlan& plan) {
  Unit intra = 0, cross = 0;
  for (const Move& m : plan.moves) {
    ASSERT_FALSE(m.units.empty());
    ASSERT_EQ(m.cross_domain, m.from.replica != m.to.replica);
    ASSERT_TRUE(to.replica(m.from.replica).is_active(m.from.slot)) << "source slot failed";
    ASSERT_FALSE(stale.count(m.from)) << "a stale slot serves";
    const IntervalSet& held = from.units_of(m.from.replica, m.from.slot);
    ASSERT_EQ(m.units.intersect(held), m.units) << "source never held them";
    ASSERT_EQ(m.units.intersect(to.units_of(m.to.replica, m.to.slot)), m.units)
        << "destination does not need them";
    if (m.cross_domain) {
      // Cross-domain only for units whose holder in the receiving replica is
      // gone or stale.
      ASSERT_TRUE(m.units.intersect(serving(from, to, stale, m.to.replica)).empty());
      cross += m.units.size();
    } else {
      intra += m.units.size();
    }
  }
  ASSERT_EQ(plan.intra_units, intra);
  ASSERT_EQ(plan.cross_units, cross);
}

void check_delivery(const JobLayout& from, const JobLayout& to, const Stale& stale,
                    const TransitionPlan& plan) {
  std::map<SlotRef, std::pair<IntervalSet, Unit>> in;  // received, count with repeats
  for (const Move& m : plan.moves) {
    auto& [units, count] = in[m.to];
    units.add(m.units);
    count += m.units.size();
  }
  std::map<int, IntervalSet> lost;
  for (const LostUnits& l : plan.lost) lost[l.replica] = l.units;
  for (int r = 0; r < to.num_replicas(); ++r) {
    for (int slot = 0; slot < to.tp; ++slot) {
      const SlotRef ref{r, slot};
      const IntervalSet& need = to.units_of(r, slot);
      const auto& [got, count] = in[ref];
      if (need.empty()) {
        ASSERT_TRUE(got.empty()) << "a slot that holds nothing receives units";
        continue;
      }
      const IntervalSet lost_here = need.intersect(lost[r]);
      ASSERT_EQ(count, got.size()) << "a unit delivered twice";
      ASSERT_TRUE(got.intersect(lost_here).empty()) << "a unit delivered and reported lost";
      if (stale.count(ref)) {
        ASSERT_EQ(got.unite(lost_here), need)
            << "a stale slot kept an outdated unit: slot " << r << ":" << slot << " needs "
            << need.to_string() << ", receives " << got.to_string();
        continue;
      }
      const IntervalSet stays = need.intersect(from.units_of(r, slot));
      ASSERT_TRUE(got.intersect(stays).empty()) << "moved a unit that stays";
      ASSERT_EQ(stays.unite(got).unite(lost_here), need);
    }
  }
}

void check_losses(const JobLayout& from, const JobLayout& to, const Stale& stale,
                  const TransitionPlan& plan) {
  for (const LostUnits& l : plan.lost) {
    ASSERT_FALSE(l.units.empty());
    ASSERT_FALSE(to.replica(l.replica).dropped);
    for (int p = 0; p < from.num_replicas(); ++p)
      ASSERT_TRUE(l.units.intersect(serving(from, to, stale, p)).empty())
          << "replica " << p << " still serves lost units";
  }
  if (!plan.recoverable()) {
    EXPECT_THROW(plan.require_recoverable(), UnitsLostError);
  }
}

// Replicas all of whose old holders serve take cross-domain refills in turn:
// their loads differ by at most one slot's share.
void check_spread(const JobLayout& from, const JobLayout& to, const Stale& stale,
                  const TransitionPlan& plan) {
  std::map<int, Unit> load;
  for (int p = 0; p < from.num_replicas(); ++p)
    if (!from.replica(p).dropped &&
        serving(from, to, stale, p) == IntervalSet::range(0, from.units))
      load[p] = 0;
  if (load.size() < 2) return;
  for (const Move& m : plan.moves)
    if (m.cross_domain && load.count(m.from.replica)) load[m.from.replica] += m.units.size();
  Unit lo = load.begin()->second, hi = lo;
  for (const auto& [p, units] : load) lo = std::min(lo, units), hi = std::max(hi, units);
  Unit slot_share = 0;  // the largest share of the new layout
  for (int r = 0; r < to.num_replicas(); ++r)
    for (int slot = 0; slot < to.tp; ++slot)
      slot_share = std::max(slot_share, to.units_of(r, slot).size());
  ASSERT_LE(hi - lo, slot_share);
}

void check_plan(const JobLayout& from, const JobLayout& to, const Stale& stale,
                const TransitionPlan& plan) {
  check_moves_are_sound(from, to, stale, plan);
  check_delivery(from, to, stale, plan);
  check_losses(from, to, stale, plan);
  check_spread(from, to, stale, plan);
}

std::string describe(const JobConfig& a, const JobConfig& b) {
  return "U=" + std::to_string(a.units) + " n=" + std::to_string(a.tp) +
         " R=" + std::to_string(a.replicas) + " failed " + format_failed_slots(a.failed) + " -> " +
         format_failed_slots(b.failed) + " min_tp=" + std::to_string(a.min_tp);
}

std::string describe(const Stale& stale) {
  std::string out = "stale";
  for (const SlotRef& s : stale)
    out += " " + std::to_string(s.replica) + ":" + std::to_string(s.slot);
  return out;
}

TEST(TransitionProperty, RandomTransitionsDeliverExactlyWhatIsNeeded) {
  std::mt19937_64 rng(99);
  int checked = 0, lossy = 0, cross = 0, k_up = 0, k_down = 0, rejoined = 0;
  for (int trial = 0; trial < 3000; ++trial) {
    const JobConfig a = testing::random_config(rng);
    const JobConfig b = random_next(rng, a);
    if (!testing::some_replica_trains(a) || !testing::some_replica_trains(b)) continue;
    SCOPED_TRACE("trial " + std::to_string(trial) + ": " + describe(a, b));
    const JobLayout from = plan_job(a), to = plan_job(b);
    const TransitionPlan plan = plan_transition(from, to);
    check_plan(from, to, {}, plan);
    if (HasFatalFailure()) return;
    ++checked;
    lossy += !plan.recoverable();
    cross += plan.cross_units > 0;
    k_up += to.sync_degree > from.sync_degree;
    k_down += to.sync_degree < from.sync_degree;
    for (int r = 0; r < a.replicas; ++r)
      rejoined += from.replica(r).dropped && !to.replica(r).dropped;
  }
  EXPECT_GT(checked, 2000);
  EXPECT_GT(lossy, 20);
  EXPECT_GT(cross, 500);
  EXPECT_GT(k_up, 200);
  EXPECT_GT(k_down, 200);
  EXPECT_GT(rejoined, 50);
}

// Stale slots on top of random transitions. Besides the checks above (no stale
// source, a stale slot receives all it holds, losses only where no serving
// slot holds the units), the counters make sure the cases that matter occur.
TEST(TransitionProperty, StaleSlotsAreRolledForwardFromServingHolders) {
  std::mt19937_64 rng(2024);
  int checked = 0, kept_refilled = 0, fed_inside = 0, whole_stale = 0, lost_to_stale = 0;
  for (int trial = 0; trial < 3000; ++trial) {
    const JobConfig a = testing::random_config(rng);
    const JobConfig b = random_next(rng, a);
    if (!testing::some_replica_trains(a) || !testing::some_replica_trains(b)) continue;
    const Stale stale = random_stale(rng, b);
    SCOPED_TRACE("trial " + std::to_string(trial) + ": " + describe(a, b) + " " + describe(stale));
    const JobLayout from = plan_job(a), to = plan_job(b);
    const TransitionPlan plan = plan_transition(from, to, {stale.begin(), stale.end()});
    check_plan(from, to, stale, plan);
    if (HasFatalFailure()) return;
    ++checked;
    for (const Move& m : plan.moves) {
      if (!stale.count(m.to)) continue;
      kept_refilled += !m.units.intersect(from.units_of(m.to.replica, m.to.slot)).empty();
      fed_inside += !m.cross_domain;
    }
    for (int r = 0; r < b.replicas; ++r) {
      const ReplicaLayout& next = to.replica(r);
      whole_stale +=
          !next.dropped && std::all_of(next.active.begin(), next.active.end(), [&](int s) {
            return stale.count({r, s}) > 0;
          });
    }
    lost_to_stale += !plan.recoverable() && plan_transition(from, to).recoverable();
  }
  EXPECT_GT(checked, 2000);
  EXPECT_GT(kept_refilled, 1000);
  EXPECT_GT(fed_inside, 500);
  EXPECT_GT(whole_stale, 200);
  EXPECT_GT(lost_to_stale, 40);
}

// Aligned, speed-weighted layouts: the same checks, and a re-layout for new
// speeds with nobody lost (a slot turned slow or fast again) moves units only
// inside replicas.
TEST(TransitionProperty, AlignedSpeedWeightedTransitionsDeliverExactly) {
  std::mt19937_64 rng(77);
  int checked = 0, relayouts = 0;
  for (int trial = 0; trial < 2000; ++trial) {
    JobConfig a = testing::random_config(rng);
    a.align = testing::random_align(rng);
    a.speeds = testing::random_speeds(rng, a.replicas, a.tp);
    const bool relayout = pick(rng, 0, 2) == 0;
    JobConfig b = relayout ? a : random_next(rng, a);
    b.speeds = testing::random_speeds(rng, b.replicas, b.tp);
    if (!testing::some_replica_trains(a) || !testing::some_replica_trains(b)) continue;
    SCOPED_TRACE("trial " + std::to_string(trial) + ": " + describe(a, b) + " align " +
                 std::to_string(a.align));
    const JobLayout from = plan_job(a), to = plan_job(b);
    const TransitionPlan plan = plan_transition(from, to);
    check_plan(from, to, {}, plan);
    if (HasFatalFailure()) return;
    ++checked;
    if (relayout) {
      ASSERT_TRUE(plan.recoverable());
      ASSERT_EQ(plan.cross_units, 0);
      relayouts += plan.intra_units > 0;
    }
  }
  EXPECT_GT(checked, 1500);
  EXPECT_GT(relayouts, 200);
}

TEST(TransitionProperty, UnchangedConfigurationMovesNothing) {
  std::mt19937_64 rng(5);
  for (int trial = 0; trial < 500; ++trial) {
    const JobConfig config = testing::random_config(rng);
    if (!testing::some_replica_trains(config)) continue;
    const JobLayout job = plan_job(config);
    const TransitionPlan plan = plan_transition(job, job);
    ASSERT_TRUE(plan.moves.empty());
    ASSERT_TRUE(plan.recoverable());
  }
}

// With the layout unchanged, only stale slots receive, and only from peers:
// inside its replica nobody else holds what a stale slot holds.
TEST(TransitionProperty, UnchangedConfigurationRefillsOnlyStaleSlots) {
  std::mt19937_64 rng(6);
  for (int trial = 0; trial < 500; ++trial) {
    const JobConfig config = testing::random_config(rng);
    if (!testing::some_replica_trains(config)) continue;
    const Stale stale = random_stale(rng, config);
    SCOPED_TRACE("trial " + std::to_string(trial) + ": " + describe(config, config) + " " +
                 describe(stale));
    const JobLayout job = plan_job(config);
    const TransitionPlan plan = plan_transition(job, job, {stale.begin(), stale.end()});
    check_plan(job, job, stale, plan);
    for (const Move& m : plan.moves) {
      ASSERT_TRUE(stale.count(m.to)) << "a slot that is up to date receives";
      ASSERT_TRUE(m.cross_domain);
    }
    if (HasFatalFailure()) return;
  }
}

}  // namespace
}  // namespace ntp::layout
