#include "train/commit_record.h"

#include <algorithm>

namespace ntp::train {

CommitTotals commit_totals(const std::vector<std::int64_t>& words, std::size_t ranks, std::int64_t replicas) {
  CommitTotals t;
  t.replica_compute_s.assign(static_cast<std::size_t>(replicas), -1.0);
  NormPart norm;
  std::int64_t norm_replica = -1;
  double last_backward_end = -1;
  for (std::size_t r = 0; r < ranks; ++r) {
    const CommitRecord rec = CommitRecord::read(words.data() + r * CommitRecord::kWords);
    t.loss_sum += rec.loss_sum;
    t.reshard_bytes += rec.reshard_bytes;
    t.allreduce_bytes += rec.allreduce_bytes;
    const double backward_end = rec.elapsed_s - rec.exposed_sync_s;
    if (backward_end > last_backward_end) {
      last_backward_end = backward_end;
      t.exposed_sync_s = rec.exposed_sync_s;
    }
    t.sync_wait_max_s = std::max(t.sync_wait_max_s, rec.exposed_sync_s);
    t.elapsed_s = std::max(t.elapsed_s, rec.elapsed_s);
    t.join_pending = t.join_pending || rec.join_pending;
    t.checkpoint_due = t.checkpoint_due || rec.checkpoint_due;
    t.stop = t.stop || rec.stop;
    t.save_busy = t.save_busy || rec.save_busy;
    double& compute = t.replica_compute_s.at(static_cast<std::size_t>(rec.replica));
    compute = compute < 0 ? rec.forward_s : std::min(compute, rec.forward_s);
    t.busy_s.push_back(rec.busy_s);
    if (norm_replica < 0) norm_replica = rec.replica;
    if (rec.replica == norm_replica) norm.add(rec.norm);
  }
  t.grad_norm = norm.norm();
  for (double& compute : t.replica_compute_s) compute = std::max(compute, 0.0);
  return t;
}


}  // namespace ntp::train
