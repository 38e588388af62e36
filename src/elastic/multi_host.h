#pragma once
// The hosts of a job on a shared store (one `ntp train` per host): which
// ranks this host runs, and node 0's start of the job. Internal to
// `ntp train` (train_job.cpp, worker_launch.cpp); validate(NodeOptions) and
// run_train_node are in train_job.h.
#include <cstdio>
#include <map>
#include <optional>
#include <stdexcept>
#include <vector>

#include <nlohmann/json.hpp>

#include "comm/store.h"
#include "elastic/launcher.h"
#include "elastic/train_job.h"
#include "train/config.h"
#include "train/job_plan.h"
#include "train/run_dir.h"

namespace ntp::elastic {

// The ranks this host runs, and how they meet those of the other hosts.
struct Host {
  NodeOptions node;
  train::HostPlacement place;
  int world = 0;
  std::vector<train::HostPlacement> all;  // every host's, by node rank
  // The other hosts' ranks, by node rank.
  std::map<int, std::vector<int>> remote() const {
    std::map<int, std::vector<int>> out;
    for (std::size_t h = 0; h < all.size(); ++h) {
      if (static_cast<int>(h) == node.node_rank) continue;
      for (int r = all[h].first_rank; r < all[h].first_rank + all[h].ranks; ++r) out[static_cast<int>(h)].push_back(r);
    }
    return out;
  }
};

// A host that lost the job: cut off from the store, while the hosts that
// reach it declared its ranks lost and trained on (or lost the store for
// good). It must not train again, nor record the run as failed: the run goes
// on elsewhere.
class HostCutOff : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Waits up to wait_s for a membership_agreed event in the run since `since`
// (this host's launch) whose survivors include none of this host's ranks:
// the hosts that reach the store went on without it. Returns that event, or
// nothing.
std::optional<nlohmann::json> agreement_without(const train::RunDir& run, const Host& host, double since,
                                                double wait_s);
// How long such an agreement can still be in coming once this host's store
// calls gave up (multi_host.cpp says why).
double store_loss_wait_s(const train::Config& config);

// After this host's launch ended: throws HostCutOff when the others went on
// without it. Either another host's watcher declared its ranks lost with
// their host (it was cut off from the store), or every rank of it was lost
// (with elastic.recover) and the others agreed without them; then it says
// in the store that it leaves (the lowest host left writes the run's
// summary). Otherwise returns.
void leave_if_others_went_on(comm::Store& store, const train::Config& config, const train::RunDir& run,
                             const Host& host, const LaunchResult& result, double since);

// This host's part of the job of `config` with `node`'s number of hosts.
Host host_of(const train::Config& config, const NodeOptions& node);

// Node 0 of a job on a shared store: claims the job, prints the placement
// and how to start the other nodes, and publishes the run for them.
void start_hosts(const train::Config& config, const train::RunDir& run, NodeOptions& node, std::FILE* out);

}  // namespace ntp::elastic
