#include "sim/fleet.h"

#include <algorithm>

namespace ntp::sim {

Topology::Topology(const Scenario& s)
    : tp(s.parallel.tp),
      domain_size(s.cluster.domain_size),
      groups_per_domain(s.groups_per_domain()),
      blast(s.failures.blast_radius),
      elements_per_domain(s.cluster.domain_size / s.failures.blast_radius),
      job_domains(s.domains()),
      spare_domains(s.spares.domains) {}

int Topology::first_group(int element) const {
  if (blast > tp) return 0;
  return (element % elements_per_domain) * blast / tp;
}

Fleet::Fleet(const Topology& topo)
    : topo_(topo),
      down_(static_cast<std::size_t>(topo.elements()), 0),
      group_failed_(static_cast<std::size_t>(topo.physical_domains() * topo.groups_per_domain), 0),
      domain_failed_(static_cast<std::size_t>(topo.physical_domains()), 0) {}

void Fleet::reset() {
  std::fill(down_.begin(), down_.end(), 0);
  std::fill(group_failed_.begin(), group_failed_.end(), 0);
  std::fill(domain_failed_.begin(), domain_failed_.end(), 0);
}

void Fleet::change(int element, int sign) {
  const int domain = topo_.domain_of(element);
  const int per_group = topo_.gpus_per_group(element);
  const int first = domain * topo_.groups_per_domain + topo_.first_group(element);
  for (int g = first; g < first + topo_.group_span(element); ++g) {
    group_failed_[static_cast<std::size_t>(g)] += sign * per_group;
  }
  domain_failed_[static_cast<std::size_t>(domain)] += sign * topo_.blast;
  down_[static_cast<std::size_t>(element)] = sign > 0 ? 1 : 0;
}

void Fleet::fail(int element) {
  if (!down(element)) change(element, +1);
}

void Fleet::repair(int element) {
  if (down(element)) change(element, -1);
}

int Fleet::active(int domain, int group) const {
  return topo_.tp -
         group_failed_[static_cast<std::size_t>(domain * topo_.groups_per_domain + group)];
}

int Fleet::lowest_active(int domain) const {
  int low = topo_.tp;
  for (int g = 0; g < topo_.groups_per_domain; ++g) low = std::min(low, active(domain, g));
  return low;
}

SparePool::SparePool(const Topology& topo) : SparePool(topo, topo.tp) {}

SparePool::SparePool(const Topology& topo, int complete_below)
    : topo_(topo), complete_below_(complete_below) {
  reset();
}

void SparePool::reset() {
  const auto job = static_cast<std::size_t>(topo_.job_domains);
  const auto all = static_cast<std::size_t>(topo_.physical_domains());
  physical_.resize(job);
  logical_.assign(all, -1);
  for (std::size_t i = 0; i < job; ++i) {
    physical_[i] = static_cast<int>(i);
    logical_[i] = static_cast<int>(i);
  }
  swapping_.assign(job, 0);
  reserved_.assign(all, 0);
  pool_.clear();
  for (std::size_t i = job; i < all; ++i) pool_.push_back(static_cast<int>(i));
  waiting_.clear();
  waiting_head_ = 0;
}

bool SparePool::needs_spare(int logical, const Fleet& fleet) const {
  return !swapping_[static_cast<std::size_t>(logical)] &&
         fleet.failed_gpus(physical(logical)) > 0 &&
         fleet.lowest_active(physical(logical)) < complete_below_;
}

void SparePool::request(int logical, const Fleet& fleet, std::vector<Swap>& start) {
  if (!needs_spare(logical, fleet)) return;
  if (pool_.empty()) {
    waiting_.push_back(logical);
    return;
  }
  const int spare = pool_.front();
  pool_.erase(pool_.begin());
  reserved_[static_cast<std::size_t>(spare)] = 1;
  swapping_[static_cast<std::size_t>(logical)] = 1;
  start.push_back({logical, spare});
}

void SparePool::release(int domain, const Fleet& fleet, std::vector<Swap>& start) {
  if (logical(domain) >= 0 || reserved_[static_cast<std::size_t>(domain)] ||
      fleet.failed_gpus(domain) > 0) {
    return;
  }
  while (waiting_head_ < waiting_.size()) {
    const int logical_domain = waiting_[waiting_head_++];
    if (!needs_spare(logical_domain, fleet)) continue;  // repaired while it waited
    reserved_[static_cast<std::size_t>(domain)] = 1;
    swapping_[static_cast<std::size_t>(logical_domain)] = 1;
    start.push_back({logical_domain, domain});
    return;
  }
  pool_.push_back(domain);
}

void SparePool::on_failure(int domain, const Fleet& fleet, std::vector<Swap>& start) {
  const int l = logical(domain);
  if (l >= 0) {
    request(l, fleet, start);
    return;
  }
  auto it = std::find(pool_.begin(), pool_.end(), domain);  // a free spare broke
  if (it != pool_.end()) pool_.erase(it);
}

void SparePool::on_repair(int domain, const Fleet& fleet, std::vector<Swap>& start) {
  release(domain, fleet, start);
}

void SparePool::on_swap_done(const Swap& swap, const Fleet& fleet, std::vector<Swap>& start) {
  const int old = physical(swap.logical);
  physical_[static_cast<std::size_t>(swap.logical)] = swap.spare;
  logical_[static_cast<std::size_t>(swap.spare)] = swap.logical;
  logical_[static_cast<std::size_t>(old)] = -1;
  reserved_[static_cast<std::size_t>(swap.spare)] = 0;
  swapping_[static_cast<std::size_t>(swap.logical)] = 0;
  request(swap.logical, fleet, start);  // the spare broke during the swap
  release(old, fleet, start);           // repaired during the swap
}

}  // namespace ntp::sim
