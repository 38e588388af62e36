#pragma once
// Where the ranks of a multi-host `ntp train` run. A replica's TP group is
// one scale-up domain, so it stays inside one host; data parallelism runs
// across hosts: host h holds replicas [h·dp/M, (h+1)·dp/M) and, ranks being
// numbered replica by replica (train::job_places), a contiguous block of
// global ranks. Pure: no I/O.
#include <string>
#include <vector>

#include "train/config.h"

namespace ntp::elastic {

struct HostPlacement {
  int node = 0;
  int first_rank = 0;         // global rank of its local rank 0
  int ranks = 0;              // workers it starts
  std::vector<int> replicas;  // replicas it holds, training or not
};

// One entry per host. Throws std::invalid_argument naming --nnodes when the
// replicas do not split evenly over the hosts, or a host would hold no
// training rank.
std::vector<HostPlacement> place_hosts(const train::ParallelConfig& parallel, int nnodes);

// "node 0: replica 0 (ranks 0-3); node 1: replica 1 (ranks 4-7)".
std::string describe_placement(const std::vector<HostPlacement>& hosts);

}  // namespace ntp::elastic
