#pragma once
// The job as the policies see it: active GPUs per logical TP group, and
// aggregates kept up to date incrementally so that a policy's throughput is a
// walk over tp + 1 counters, never over the whole cluster.
//
// Logical TP group g belongs to replica g / pp (pipeline stage g % pp).
#include <vector>

namespace ntp::sim {

class ReplicaView {
 public:
  ReplicaView(int groups, int pp, int tp);

  void reset();                      // every group healthy
  void set_active(int group, int k);  // O(pp)
  int active(int group) const { return k_[static_cast<std::size_t>(group)]; }

  int tp() const { return tp_; }
  int pp() const { return pp_; }
  int groups() const { return static_cast<int>(k_.size()); }
  int replicas() const { return static_cast<int>(replica_min_.size()); }
  // groups_with[k]: TP groups with k active GPUs.
  const std::vector<int>& groups_with() const { return group_hist_; }
  // replicas_with[k]: replicas whose lowest stage has k active GPUs.
  const std::vector<int>& replicas_with() const { return replica_hist_; }

 private:
  int tp_;
  int pp_;
  std::vector<int> k_;
  std::vector<int> replica_min_;
  std::vector<int> group_hist_;
  std::vector<int> replica_hist_;
};

}  // namespace ntp::sim
