#pragma once
// The commit point's record: what each rank contributes to the one all-gather
// that ends a step (as int64 words), and the job-wide totals every rank
// derives from all of them alike. Pure logic, no I/O.
#include <cstdint>
#include <cstring>
#include <vector>

#include "train/grad_norm.h"

namespace ntp::train {

// What each rank contributes to the commit collective, as int64 words.
struct CommitRecord {
  double loss_sum = 0;  // this rank's loss sum if it is TP rank 0 of its replica, else 0
  std::int64_t reshard_bytes = 0;
  std::int64_t allreduce_bytes = 0;
  double exposed_sync_s = 0;
  double elapsed_s = 0;
  NormPart norm;
  std::int64_t replica = 0;
  bool join_pending = false;
  bool checkpoint_due = false;  // the writer's clock says train.checkpoint_every_s passed
  bool stop = false;            // this rank received SIGINT, SIGTERM or SIGHUP
  bool save_busy = false;       // this rank is still writing its part of the previous checkpoint
  // This rank's forward passes of the step: its compute alone, which no other
  // replica can delay (the gradient sync runs only from the backward pass on).
  double forward_s = 0;
  // Its forward and backward passes without the TP all-reduces: its own
  // compute, which a slower TP peer does not stretch (the slow-rank measure).
  double busy_s = 0;

  static constexpr int kWords = 12 + NormPart::kWords;
  void write(std::int64_t* out) const {
    std::memcpy(out + 0, &loss_sum, 8);
    out[1] = reshard_bytes;
    out[2] = allreduce_bytes;
    std::memcpy(out + 3, &exposed_sync_s, 8);
    std::memcpy(out + 4, &elapsed_s, 8);
    out[5] = replica;
    out[6] = join_pending ? 1 : 0;
    out[7] = checkpoint_due ? 1 : 0;
    out[8] = stop ? 1 : 0;
    std::memcpy(out + 9, &forward_s, 8);
    out[10] = save_busy ? 1 : 0;
    std::memcpy(out + 11, &busy_s, 8);
    norm.write(out + 12);
  }
  static CommitRecord read(const std::int64_t* in) {
    CommitRecord r;
    std::memcpy(&r.loss_sum, in + 0, 8);
    r.reshard_bytes = in[1];
    r.allreduce_bytes = in[2];
    std::memcpy(&r.exposed_sync_s, in + 3, 8);
    std::memcpy(&r.elapsed_s, in + 4, 8);
    r.replica = in[5];
    r.join_pending = in[6] != 0;
    r.checkpoint_due = in[7] != 0;
    r.stop = in[8] != 0;
    std::memcpy(&r.forward_s, in + 9, 8);
    r.save_busy = in[10] != 0;
    std::memcpy(&r.busy_s, in + 11, 8);
    r.norm = NormPart::read(in + 12);
    return r;
  }
};

// The job-wide figures of a step from every rank's record. Every rank sums
// the same records in the same (rank) order, so every rank gets the same
// bits; the norm is the first training replica's (all replicas agree
// exactly, grad_norm.h).
struct CommitTotals {
  double loss_sum = 0;
  std::int64_t reshard_bytes = 0;
  std::int64_t allreduce_bytes = 0;
  // The sync's cost to the step: the wait of the rank whose backward ended
  // last (the latest elapsed_s - exposed_sync_s). Every other rank also waited
  // for that rank's compute, which is skew between ranks, not communication;
  // the longest wait of any rank is sync_wait_max_s.
  double exposed_sync_s = 0;
  double sync_wait_max_s = 0;
  double elapsed_s = 0;
  double grad_norm = 0;
  bool join_pending = false;
  bool checkpoint_due = false;
  bool stop = false;
  bool save_busy = false;  // a periodic save due now is skipped (CheckpointSaver::skip)
  // Per replica: the forward passes (CommitRecord::forward_s) of its rank
  // that took the least, i.e. waited least in the TP collectives: the pace of
  // its busiest GPU, which the others wait for; 0 when it does not train.
  std::vector<double> replica_compute_s;
  // Every rank's CommitRecord::busy_s, in the order of the records (members ascending).
  std::vector<double> busy_s;
};

CommitTotals commit_totals(const std::vector<std::int64_t>& words, std::size_t ranks, std::int64_t replicas);

}  // namespace ntp::train
