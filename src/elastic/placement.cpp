#include "elastic/placement.h"

#include <stdexcept>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "train/ntp_trainer.h"

namespace ntp::elastic {

std::vector<HostPlacement> place_hosts(const train::ParallelConfig& parallel, int nnodes) {
  if (nnodes < 1) throw std::invalid_argument(fmt::format("--nnodes {}: must be >= 1", nnodes));
  if (parallel.dp % nnodes != 0) {
    throw std::invalid_argument(fmt::format(
        "--nnodes {}: parallel.dp = {} replicas do not split evenly over {} hosts (each replica's TP group stays "
        "inside one host; data parallelism runs across hosts)",
        nnodes, parallel.dp, nnodes));
  }
  const int per_host = static_cast<int>(parallel.dp) / nnodes;
  std::vector<HostPlacement> hosts(static_cast<std::size_t>(nnodes));
  for (int h = 0; h < nnodes; ++h) {
    hosts[static_cast<std::size_t>(h)].node = h;
    for (int r = h * per_host; r < (h + 1) * per_host; ++r) hosts[static_cast<std::size_t>(h)].replicas.push_back(r);
  }
  const std::vector<train::RankPlace> places = train::job_places(parallel);
  int rank = 0;
  for (HostPlacement& host : hosts) {
    host.first_rank = rank;
    while (rank < static_cast<int>(places.size()) && places[static_cast<std::size_t>(rank)].replica / per_host == host.node) {
      ++rank;
    }
    host.ranks = rank - host.first_rank;
    if (host.ranks == 0) {
      throw std::invalid_argument(fmt::format("--nnodes {}: node {} would hold no training rank (its replicas {} "
                                              "do not train)",
                                              nnodes, host.node, fmt::join(host.replicas, ",")));
    }
  }
  return hosts;
}

std::string describe_placement(const std::vector<HostPlacement>& hosts) {
  std::string text;
  for (const HostPlacement& h : hosts) {
    text += fmt::format("{}node {}: replica{} {} (ranks {}-{})", text.empty() ? "" : "; ", h.node,
                        h.replicas.size() == 1 ? "" : "s", fmt::join(h.replicas, ","), h.first_rank,
                        h.first_rank + h.ranks - 1);
  }
  return text;
}

}  // namespace ntp::elastic
