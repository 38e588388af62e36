#pragma once
// Gradient sync overlapped with the backward pass. The model reports, layer
// by layer in backward order, which tensors' gradients are final
// (BackwardHooks::grads_ready); they are gathered into buckets of about
// sync.bucket_mb (sized on the full model, so that every rank of the job cuts
// the same buckets), and each full bucket is synchronized (GradSync: pre-sync,
// DP all-reduce, post-sync) on a communication thread while backward goes on.
// finish() waits only for what is still in flight; that wait is the exposed
// sync time of the step.
//
// The communication thread uses its own TP group: the model's TP collectives
// run on the compute thread at the same time, and two threads must never
// share a group.
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <exception>
#include <map>
#include <memory>
#include <mutex>
#include <span>
#include <thread>
#include <vector>

#include "train/grad_sync.h"
#include "train/trace.h"

namespace ntp::train {

struct SyncTotals {
  SyncBytes bytes;
  double exposed_s = 0;             // time finish() waited
  std::vector<TraceSpan> spans;     // one per bucket (comm track)
};

class OverlappedSync {
 public:
  OverlappedSync(const model::ParameterLayout& layout, const model::ParameterLayout& full,
                 KindViews views, std::vector<int> active, comm::Group& tp_sync, comm::Group* dp,
                 double bucket_mb);
  ~OverlappedSync();
  OverlappedSync(const OverlappedSync&) = delete;
  OverlappedSync& operator=(const OverlappedSync&) = delete;

  // Starts a step whose final gradients will be in `grads`.
  void begin(std::span<float> grads, std::int64_t step);
  // The backward hook: gradients of tensors [first, last) are final.
  void grads_ready(std::size_t first, std::size_t last);
  // Sends the last partial bucket, waits for every bucket; rethrows a
  // communication error of the thread.
  SyncTotals finish();

  void mispair_for_test(bool on) { mispair_ = on; }
  void keep_replicated_for_test(bool on) { keep_replicated_ = on; }

 private:
  using Range = std::pair<std::size_t, std::size_t>;
  void enqueue(Range range);
  GradSync& bucket(Range range);
  void loop();

  const model::ParameterLayout& layout_;
  const model::ParameterLayout& full_;
  KindViews views_;
  std::vector<int> active_;
  comm::Group& tp_;
  comm::Group* dp_;
  double bucket_bytes_;
  bool mispair_ = false;
  bool keep_replicated_ = false;

  std::map<Range, std::unique_ptr<GradSync>> buckets_;  // built on first use, then reused
  std::span<float> grads_;
  std::int64_t step_ = 0;
  std::size_t pending_first_ = 0;
  std::size_t pending_last_ = 0;
  double pending_bytes_ = 0;

  std::mutex mutex_;
  std::condition_variable cv_;
  std::deque<GradSync*> queue_;
  std::size_t in_flight_ = 0;
  bool stop_ = false;
  std::exception_ptr error_;
  SyncTotals totals_;
  std::thread thread_;
};

}  // namespace ntp::train
