#pragma once
// The physical cluster: job domains followed by spare domains, split into
// failure elements (aligned blocks of blast_radius GPUs, or whole domains),
// and which elements are down. Pure state; the timeline and the snapshot
// drive it.
#include <vector>

#include "sim/scenario.h"

namespace ntp::sim {

struct Topology {
  explicit Topology(const Scenario& s);

  int tp;
  int domain_size;
  int groups_per_domain;    // TP groups in one domain
  int blast;                // GPUs per failure element
  int elements_per_domain;
  int job_domains;
  int spare_domains;

  int physical_domains() const { return job_domains + spare_domains; }
  int elements() const { return physical_domains() * elements_per_domain; }
  int job_elements() const { return job_domains * elements_per_domain; }
  int domain_of(int element) const { return element / elements_per_domain; }
  // The TP groups (index inside the domain) an element spans, and the GPUs it
  // takes from each: one group when blast <= tp, every group for a whole domain.
  int first_group(int element) const;
  int group_span(int /*element*/) const { return blast > tp ? groups_per_domain : 1; }
  int gpus_per_group(int /*element*/) const { return blast > tp ? tp : blast; }
};

class Fleet {
 public:
  explicit Fleet(const Topology& topo);
  void reset();
  void fail(int element);
  void repair(int element);
  bool down(int element) const { return down_[static_cast<std::size_t>(element)] != 0; }
  int active(int domain, int group) const;  // active GPUs of a TP group
  int lowest_active(int domain) const;      // of the domain's TP groups
  int failed_gpus(int domain) const { return domain_failed_[static_cast<std::size_t>(domain)]; }
  const Topology& topology() const { return topo_; }

 private:
  void change(int element, int sign);
  Topology topo_;
  std::vector<char> down_;
  std::vector<int> group_failed_;
  std::vector<int> domain_failed_;
};

// Hot spare domains: which physical domain serves each logical job domain.
// A job domain with a TP group below `complete_below` active GPUs takes a free
// healthy spare (swap_hours later it is served by it); without one it waits in
// FIFO order. A failed domain that is repaired while unused becomes a spare.
// complete_below = tp swaps on any failed GPU; a policy whose degraded groups
// still train well keeps its spares free to form new replicas instead.
class SparePool {
 public:
  struct Swap {
    int logical;
    int spare;
  };

  explicit SparePool(const Topology& topo);
  SparePool(const Topology& topo, int complete_below);
  void reset();
  int physical(int logical) const { return physical_[static_cast<std::size_t>(logical)]; }
  int logical(int physical) const { return logical_[static_cast<std::size_t>(physical)]; }
  int free_spares() const { return static_cast<int>(pool_.size()); }

  // Call after the fleet changed at `domain`; swaps to start are appended.
  void on_failure(int domain, const Fleet& fleet, std::vector<Swap>& start);
  void on_repair(int domain, const Fleet& fleet, std::vector<Swap>& start);
  void on_swap_done(const Swap& swap, const Fleet& fleet, std::vector<Swap>& start);

 private:
  void request(int logical, const Fleet& fleet, std::vector<Swap>& start);
  void release(int domain, const Fleet& fleet, std::vector<Swap>& start);
  bool needs_spare(int logical, const Fleet& fleet) const;

  Topology topo_;
  int complete_below_;
  std::vector<int> physical_;   // logical job domain -> physical domain
  std::vector<int> logical_;    // physical domain -> logical (-1: unused)
  std::vector<char> swapping_;  // logical domain has a swap in flight
  std::vector<char> reserved_;  // physical spare being swapped in
  std::vector<int> pool_;       // free healthy spares, FIFO
  std::vector<int> waiting_;    // logical domains waiting for a spare, FIFO
  std::size_t waiting_head_ = 0;
};

}  // namespace ntp::sim
