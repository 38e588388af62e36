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
// With split_embedding, the tied wte gradient is synchronized in two parts:
// the LM-head part as its own bucket as soon as the LM head's backward ends,
// and the embedding scatter's rows (a few hundred, model::EmbeddingRows) at
// the end: the DP group first sums which rows any replica touched, then sums
// those rows and adds them to the synced wte gradient. The result is the same
// sum over replicas, reassociated (lm_0 + lm_1) + (rows_0 + rows_1). It needs
// every replica to hold exactly its sync partition of the vocabulary (no
// extra slots), which the trainer checks job-wide.
//
// The communication thread uses its own TP group: the model's TP collectives
// run on the compute thread at the same time, and two threads must never
// share a group.
//
// With pipeline (the default), a bucket's DP all-reduce runs on the DP
// group's own thread (Group::run_async) while the communication thread goes
// on with the TP stages: bucket i+1's pre-sync, then bucket i's post-sync and
// broadcast once its all-reduce ended. Every rank issues its TP stages in
// that one fixed order (pre 0, pre 1, post 0, pre 2, post 1, ..., post n-1),
// whatever the timing, so the TP group's call sequences match; the DP group
// sees the buckets' all-reduces in bucket order as before. Each bucket sums
// the same elements in the same calls as without the pipeline, so the result
// is bit-identical.
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <exception>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <thread>
#include <vector>

#include "comm/work.h"
#include "model/vocab_parallel.h"
#include "train/grad_sync.h"
#include "train/trace.h"

namespace ntp::train {

struct SyncTotals {
  SyncBytes bytes;
  double exposed_s = 0;             // time finish() waited
  std::vector<TraceSpan> spans;     // per bucket: its TP stages (comm) and its all-reduce (reduce)
};

struct SyncOptions {
  double bucket_mb = 4.0;        // every rank of the job must use the same
  bool split_embedding = false;  // see above; needs the vocabulary at the sync layout
  bool pipeline = true;          // all-reduces overlap the TP stages; every rank alike
};

class OverlappedSync {
 public:
  OverlappedSync(const model::ParameterLayout& layout, const model::ParameterLayout& full,
                 KindViews views, std::vector<int> active, comm::Group& tp_sync, comm::Group* dp,
                 SyncOptions options);
  ~OverlappedSync();
  OverlappedSync(const OverlappedSync&) = delete;
  OverlappedSync& operator=(const OverlappedSync&) = delete;

  // Starts a step whose final gradients will be in `grads`.
  void begin(std::span<float> grads, std::int64_t step);
  // The backward hook: gradients of tensors [first, last) are final.
  void grads_ready(std::size_t first, std::size_t last);
  // The backward hook of a split wte gradient (split_embedding only): the
  // embedding scatter's rows of this step, copied; synced after every bucket.
  void embedding_rows(const model::EmbeddingRows& rows);
  bool splits_embedding() const { return split_embedding_; }
  // Sends the last partial bucket, waits for every bucket; rethrows a
  // communication error of the thread.
  SyncTotals finish();

  void mispair_for_test(bool on) { mispair_ = on; }
  void keep_replicated_for_test(bool on) { keep_replicated_ = on; }

 private:
  using Range = std::pair<std::size_t, std::size_t>;
  struct Task {
    const char* name;
    std::function<SyncBytes()> run;  // unset for a bucket, and for the task that only settles
    GradSync* bucket = nullptr;
  };
  // A pipelined bucket between pre-sync and post-sync: its all-reduce queued
  // or running on the DP group's thread.
  struct Reducing {
    GradSync* bucket;
    std::shared_ptr<comm::Work> work;
  };
  void enqueue(Range range);
  void enqueue(Task task);
  GradSync& bucket(Range range);
  SyncBytes sync_embedding_rows();
  void loop();
  SyncBytes run(const Task& task);
  SyncBytes pre_sync(GradSync& sync);
  std::shared_ptr<comm::Work> all_reduce_async(GradSync& sync);
  SyncBytes post_sync(const Reducing& r);
  SyncBytes settle();
  void abandon();
  void add_span(const char* name, Track track, double start);

  const model::ParameterLayout& layout_;
  const model::ParameterLayout& full_;
  KindViews views_;
  std::vector<int> active_;
  comm::Group& tp_;
  comm::Group* dp_;
  double bucket_bytes_;
  bool split_embedding_;
  bool pipeline_;
  bool mispair_ = false;
  bool keep_replicated_ = false;

  std::map<Range, std::unique_ptr<GradSync>> buckets_;  // built on first use, then reused
  std::span<float> grads_;
  std::int64_t step_ = 0;
  std::size_t pending_first_ = 0;
  std::size_t pending_last_ = 0;
  double pending_bytes_ = 0;
  model::EmbeddingRows rows_;  // this step's embedding scatter (split_embedding)
  bool rows_pending_ = false;

  std::mutex mutex_;
  std::condition_variable cv_;
  std::deque<Task> queue_;
  std::size_t in_flight_ = 0;
  bool stop_ = false;
  std::exception_ptr error_;
  SyncTotals totals_;
  std::optional<Reducing> reducing_;  // communication thread only
  std::thread thread_;
};

}  // namespace ntp::train
