#pragma once
// One replica of a job plan as the pipeline executor sees it: its training
// ranks in rank order and their links (RankView's activation/gradient peers)
// as indices into that list (its pipeline group), the form check_exchanges takes. With one
// replica whose ranks all train, the indices are the global ranks.
#include <algorithm>
#include <vector>

#include "train/job_plan.h"
#include "train/pipeline_executor.h"

namespace ntp::train::testing {

struct ReplicaPipeline {
  std::vector<int> ranks;        // global ranks, ascending
  std::vector<RankLinks> links;  // links[i]: ranks[i]'s, as indices into ranks
};

inline ReplicaPipeline replica_pipeline(const JobPlan& plan, int replica) {
  ReplicaPipeline p;
  p.ranks = plan.view(plan.tp_group(replica, 0).front()).pipeline_group;
  const auto local = [&](int rank) {
    if (rank < 0) return -1;
    return static_cast<int>(std::find(p.ranks.begin(), p.ranks.end(), rank) - p.ranks.begin());
  };
  const auto locals = [&](const std::vector<int>& ranks) {
    std::vector<int> out;
    for (int rank : ranks) out.push_back(local(rank));
    return out;
  };
  for (int rank : p.ranks) {
    const RankView v = plan.view(rank);
    p.links.push_back({v.place.stage, local(v.activation_from), locals(v.gradient_to), local(v.gradient_from),
                       locals(v.activation_to)});
  }
  return p;
}

}  // namespace ntp::train::testing
