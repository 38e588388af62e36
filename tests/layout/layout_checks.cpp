#include "layout_checks.h"

#include <algorithm>
#include <numeric>
#include <set>

#include "layout/shares.h"

namespace ntp::layout::testing {

namespace {

std::string str(Unit v) {
  return std::to_string(v);
}

// The units of the transfers `pick` selects, and their count with
// repetitions (equal to the set's size only when no unit appears twice).
template <typename Pick>
std::pair<IntervalSet, Unit> gather(const std::vector<SlotTransfer>& plan, Pick pick) {
  IntervalSet units;
  Unit count = 0;
  for (const SlotTransfer& t : plan) {
    if (!pick(t)) continue;
    units.add(t.units);
    count += t.units.size();
  }
  return {units, count};
}

// What slot `slot` holds outside its own part of S (all of it for an extra slot).
IntervalSet outside_own_part(const ReplicaLayout& layout, const std::vector<IntervalSet>& sync,
                             int slot) {
  const IntervalSet& held = layout.slots[static_cast<size_t>(slot)];
  const int j = layout.sync_group(slot);
  return j < 0 ? held : held.subtract(sync[static_cast<size_t>(j)]);
}

std::string transfer_violation(const ReplicaLayout& layout, const std::vector<IntervalSet>& sync) {
  for (const SlotTransfer& t : layout.pre_sync) {
    const std::string what = "pre-sync " + std::to_string(t.from) + "->" + std::to_string(t.to);
    if (!layout.is_active(t.from) || !layout.is_core(t.to) || t.from == t.to)
      return what + " is not from an active slot to another core slot";
    if (t.units.empty()) return what + " moves nothing";
    if (!(t.units.intersect(sync[static_cast<size_t>(layout.sync_group(t.to))]) == t.units))
      return what + " moves units outside the receiver's S_j";
    if (!(t.units.intersect(layout.slots[static_cast<size_t>(t.from)]) == t.units))
      return what + " moves units its sender does not hold";
  }
  for (int slot : layout.active) {
    const auto [out, count] =
        gather(layout.pre_sync, [&](const SlotTransfer& t) { return t.from == slot; });
    if (count != out.size() || !(out == outside_own_part(layout, sync, slot)))
      return "slot " + std::to_string(slot) +
             " does not send, once, exactly what it holds outside its S_j";
  }
  if (layout.post_sync.size() != layout.pre_sync.size())
    return "post-sync is not the inverse of pre-sync";
  for (const SlotTransfer& t : layout.pre_sync)
    if (std::find(layout.post_sync.begin(), layout.post_sync.end(),
                  SlotTransfer{t.to, t.from, t.units}) == layout.post_sync.end())
      return "post-sync lacks the inverse of pre-sync " + std::to_string(t.from) + "->" +
             std::to_string(t.to);
  std::set<int> senders, receivers;
  for (const SlotTransfer& t : layout.pre_sync) senders.insert(t.from), receivers.insert(t.to);
  if (layout.pre_sync.size() > std::max<size_t>(1, senders.size() + receivers.size()) - 1)
    return std::to_string(layout.pre_sync.size()) + " pre-sync transfers: more than a forest's";
  return "";
}

}  // namespace

std::string coverage_violation(const ReplicaLayout& layout, Unit units) {
  IntervalSet all;
  Unit total = 0;
  for (int slot = 0; slot < static_cast<int>(layout.slots.size()); ++slot) {
    const IntervalSet& held = layout.slots[static_cast<size_t>(slot)];
    if (!layout.is_active(slot)) {
      if (!held.empty())
        return "failed slot " + std::to_string(slot) + " holds " + held.to_string();
      continue;
    }
    if (held.empty()) return "active slot " + std::to_string(slot) + " holds nothing";
    all.add(held);
    total += held.size();
  }
  if (total != all.size())
    return "a unit is held twice: " + str(total) + " held, " + str(all.size()) + " distinct";
  if (!(all == IntervalSet::range(0, units)))
    return "units held " + all.to_string() + ", not [0," + str(units) + ")";
  return "";
}

std::string sync_violation(const ReplicaLayout& layout, const std::vector<IntervalSet>& sync) {
  const size_t K = sync.size();
  if (layout.active.size() < K ||
      !std::equal(layout.core.begin(), layout.core.end(), layout.active.begin()) ||
      layout.core.size() != K)
    return "the core slots are not the first K active slots";
  for (size_t j = 0; j < K; ++j) {
    const int core = layout.core[j];
    const IntervalSet& own = layout.slots[static_cast<size_t>(core)];
    const IntervalSet kept = own.intersect(sync[j]);
    if (!(kept == sync[j].prefix(kept.size())))
      return "core slot " + std::to_string(core) + " keeps no prefix of S_j";
    const auto [in, count] =
        gather(layout.pre_sync, [&](const SlotTransfer& t) { return t.to == core; });
    if (count != in.size() || !in.intersect(kept).empty() || !(kept.unite(in) == sync[j]))
      return "after pre-sync core slot " + std::to_string(core) + " does not hold exactly S_" +
             std::to_string(j);
  }
  return transfer_violation(layout, sync);
}

std::string share_violation(const ReplicaLayout& layout, Unit units,
                            const std::vector<double>& speeds) {
  const Unit block = layout.block;
  if (speeds.size() != layout.active.size()) return "speeds are not one per active slot";
  int unaligned = 0;
  double busiest = 0, total_speed = 0;
  bool busiest_single_block = false;
  for (size_t i = 0; i < layout.active.size(); ++i) {
    const Unit share = layout.slots[static_cast<size_t>(layout.active[i])].size();
    if (share % block != 0) {
      if (share % block != units % block)
        return "share " + str(share) + " of slot " + std::to_string(layout.active[i]) +
               " is not in blocks of " + str(block) + " and is not the remainder slot's";
      ++unaligned;
    }
    total_speed += speeds[i];
    const double time = static_cast<double>(share) / speeds[i];
    if (time > busiest) busiest = time, busiest_single_block = share <= block;
  }
  if (unaligned > (units % block != 0 ? 1 : 0))
    return std::to_string(unaligned) + " shares carry a remainder";
  const double bound =
      (static_cast<double>(units) + static_cast<double>((layout.active.size() - 1) * block)) /
      total_speed;
  if (busiest > bound * (1 + 1e-12) && !busiest_single_block)
    return "busiest units/speed " + std::to_string(busiest) + " above the ideal plus a block, " +
           std::to_string(bound);
  return "";
}

std::string partition_violation(const std::vector<IntervalSet>& sync, Unit units, Unit block) {
  Unit next = 0, smallest = units, largest = 0;
  for (size_t j = 0; j < sync.size(); ++j) {
    if (sync[j].intervals().size() != 1 || sync[j].intervals()[0].start != next)
      return "S_" + std::to_string(j) + " is not the contiguous interval from " + str(next);
    Unit size = sync[j].size();
    if (j + 1 == sync.size()) size -= units % block;
    if (size % block != 0) return "S_" + std::to_string(j) + " is not in blocks of " + str(block);
    smallest = std::min(smallest, size), largest = std::max(largest, size);
    next = sync[j].intervals()[0].end;
  }
  if (next != units) return "S ends at " + str(next);
  if (largest - smallest > block) return "S sizes differ by more than a block";
  return "";
}

std::string job_violation(const JobLayout& job, const JobConfig& config) {
  if (job.block != kind_block(config.units, config.tp, config.align))
    return "job block is not kind_block's";
  if (std::string v = partition_violation(job.sync_partition, config.units, job.block); !v.empty())
    return v;
  for (int r = 0; r < job.num_replicas(); ++r) {
    const ReplicaLayout& layout = job.replica(r);
    if (layout.dropped) continue;
    const std::string at = "replica " + std::to_string(r) + ": ";
    const std::vector<double> speeds = speeds_of(config.speeds, r, layout.active);
    for (const std::string& v :
         {coverage_violation(layout, config.units), sync_violation(layout, job.sync_partition),
          share_violation(layout, config.units, speeds)})
      if (!v.empty()) return at + v;
    const SlotShares shares = slot_shares(config.units, job.block, speeds);
    for (size_t i = 0; i < layout.active.size(); ++i)
      if (layout.slots[static_cast<size_t>(layout.active[i])].size() != shares.units[i] ||
          layout.block != shares.block)
        return at + "shares are not slot_shares'";
    const bool equal_speeds =
        std::adjacent_find(speeds.begin(), speeds.end(), std::not_equal_to<>()) == speeds.end();
    if (!equal_speeds) continue;
    for (const SlotTransfer& t : layout.pre_sync)
      if (layout.is_core(t.from)) return at + "a core slot sends at equal speeds";
    if (static_cast<int>(layout.active.size()) == job.sync_degree &&
        (!layout.pre_sync.empty() ||
         !std::equal(job.sync_partition.begin(), job.sync_partition.end(), layout.core.begin(),
                     [&](const IntervalSet& s, int slot) {
                       return s == layout.slots[static_cast<size_t>(slot)];
                     })))
      return at + "k == K at equal speeds but the layout is not S with empty plans";
  }
  return "";
}

}  // namespace ntp::layout::testing
