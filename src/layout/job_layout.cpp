#include "layout/job_layout.h"

#include <algorithm>
#include <map>
#include <stdexcept>
#include <string>

#include "layout/errors.h"
#include "layout/shares.h"
#include "layout/sync_partition.h"

namespace ntp::layout {

namespace {

bool trains(const JobConfig& config, int alive) {
  return alive >= config.min_tp;
}

int alive_count(const JobConfig& config, int replica) {
  auto it = config.failed.find(replica);
  return config.tp - (it == config.failed.end() ? 0 : static_cast<int>(it->second.size()));
}

void check_ids(const JobLayout& job, int replica, int slot) {
  if (replica < 0 || replica >= job.num_replicas())
    throw std::out_of_range("replica " + std::to_string(replica) + " out of range [0, " +
                            std::to_string(job.num_replicas()) + ")");
  if (slot < 0 || slot >= job.tp)
    throw std::out_of_range("slot " + std::to_string(slot) + " out of range [0, " +
                            std::to_string(job.tp) + ")");
}

}  // namespace

std::vector<int> alive_slots(const JobConfig& config, int replica) {
  std::vector<int> alive;
  auto it = config.failed.find(replica);
  const std::vector<int> none;
  const std::vector<int>& failed = it == config.failed.end() ? none : it->second;
  for (int slot = 0; slot < config.tp; ++slot)
    if (std::find(failed.begin(), failed.end(), slot) == failed.end()) alive.push_back(slot);
  return alive;
}

void validate(const JobConfig& config) {
  require_positive(config.units, "units");
  require_positive(config.tp, "tp");
  require_positive(config.replicas, "replicas");
  require_positive(config.min_tp, "min_tp");
  require_positive(config.align, "align");
  if (config.min_tp > config.tp)
    throw std::invalid_argument("min_tp (" + std::to_string(config.min_tp) + ") exceeds tp (" +
                                std::to_string(config.tp) + ")");
  validate_failed_slots(config.failed, config.replicas, config.tp);
  validate_slot_speeds(config.speeds, config.replicas, config.tp);
  bool any_trains = false;
  for (int r = 0; r < config.replicas; ++r) {
    const int alive = alive_count(config, r);
    if (!trains(config, alive)) continue;
    any_trains = true;
    if (config.units < alive)
      throw std::invalid_argument("units (" + std::to_string(config.units) + ") smaller than the " +
                                  std::to_string(alive) + " active slots of replica " +
                                  std::to_string(r));
  }
  if (!any_trains)
    throw InfeasibleError("no replica can train: every replica has fewer than min_tp (" +
                          std::to_string(config.min_tp) + ") alive slots");
}

JobLayout plan_job(const JobConfig& config) {
  validate(config);
  std::vector<std::vector<int>> alive(static_cast<size_t>(config.replicas));
  JobLayout job;
  job.units = config.units;
  job.tp = config.tp;
  job.min_tp = config.min_tp;
  job.sync_degree = config.tp;
  for (int r = 0; r < config.replicas; ++r) {
    alive[static_cast<size_t>(r)] = alive_slots(config, r);
    const int k = static_cast<int>(alive[static_cast<size_t>(r)].size());
    if (trains(config, k)) job.sync_degree = std::min(job.sync_degree, k);
  }
  job.block = kind_block(config.units, config.tp, config.align);
  job.sync_partition = sync_partition(config.units, job.sync_degree, job.block);
  // Most replicas share their alive set and speeds (all healthy ones do):
  // compute each once.
  std::map<std::pair<std::vector<int>, std::vector<double>>, std::shared_ptr<const ReplicaLayout>>
      computed;
  job.replicas.reserve(alive.size());
  for (int r = 0; r < config.replicas; ++r) {
    const std::vector<int>& slots = alive[static_cast<size_t>(r)];
    const bool trains_r = trains(config, static_cast<int>(slots.size()));
    std::vector<double> speeds =
        trains_r ? speeds_of(config.speeds, r, slots) : std::vector<double>{};
    std::shared_ptr<const ReplicaLayout>& layout = computed[{slots, speeds}];
    if (!layout)
      layout = std::make_shared<const ReplicaLayout>(
          trains_r ? replica_layout(config.units, config.tp, slots, job.sync_partition,
                                    slot_shares(config.units, job.block, speeds))
                   : dropped_replica(config.tp, slots));
    job.replicas.push_back(layout);
  }
  return job;
}

const ReplicaLayout& JobLayout::replica(int r) const {
  if (r < 0 || r >= num_replicas())
    throw std::out_of_range("replica " + std::to_string(r) + " out of range [0, " +
                            std::to_string(num_replicas()) + ")");
  return *replicas[static_cast<size_t>(r)];
}

const IntervalSet& JobLayout::units_of(int replica, int slot) const {
  check_ids(*this, replica, slot);
  return this->replica(replica).slots[static_cast<size_t>(slot)];
}

SlotView JobLayout::slot_view(int replica, int slot) const {
  check_ids(*this, replica, slot);
  const ReplicaLayout& layout = this->replica(replica);
  SlotView view;
  view.replica = replica;
  view.slot = slot;
  view.alive = layout.is_active(slot);
  view.trains = view.alive && !layout.dropped;
  view.sync_group = layout.sync_group(slot);
  view.units = layout.slots[static_cast<size_t>(slot)];
  if (view.is_core()) view.sync_units = sync_partition[static_cast<size_t>(view.sync_group)];
  for (const SlotTransfer& t : layout.pre_sync) {
    if (t.from == slot) view.pre_sync_sends.push_back(t);
    if (t.to == slot) view.pre_sync_receives.push_back(t);
  }
  return view;
}

std::vector<std::pair<int, int>> JobLayout::sync_group_members(int j) const {
  if (j < 0 || j >= sync_degree)
    throw std::out_of_range("sync group " + std::to_string(j) + " out of range [0, " +
                            std::to_string(sync_degree) + ")");
  std::vector<std::pair<int, int>> members;
  for (int r = 0; r < num_replicas(); ++r) {
    const ReplicaLayout& layout = replica(r);
    if (!layout.dropped) members.emplace_back(r, layout.core[static_cast<size_t>(j)]);
  }
  return members;
}

}  // namespace ntp::layout
