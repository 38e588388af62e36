#include "train/overlapped_sync.h"

#include <utility>

#include "train/run_dir.h"

namespace ntp::train {

OverlappedSync::OverlappedSync(const model::ParameterLayout& layout,
                               const model::ParameterLayout& full, KindViews views,
                               std::vector<int> active, comm::Group& tp_sync, comm::Group* dp,
                               double bucket_mb)
    : layout_(layout),
      full_(full),
      views_(std::move(views)),
      active_(std::move(active)),
      tp_(tp_sync),
      dp_(dp),
      bucket_bytes_(bucket_mb * 1024 * 1024),
      thread_([this] { loop(); }) {}

OverlappedSync::~OverlappedSync() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stop_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

void OverlappedSync::begin(std::span<float> grads, std::int64_t step) {
  grads_ = grads;
  step_ = step;
  pending_bytes_ = 0;
  std::lock_guard<std::mutex> lock(mutex_);
  totals_ = {};
}

GradSync& OverlappedSync::bucket(Range range) {
  auto& slot = buckets_[range];
  if (!slot) {
    slot = std::make_unique<GradSync>(layout_, views_, active_, tp_, dp_, range.first, range.second);
    slot->mispair_for_test(mispair_);
    slot->keep_replicated_for_test(keep_replicated_);
  }
  return *slot;
}

void OverlappedSync::grads_ready(std::size_t first, std::size_t last) {
  // Ranges arrive in backward order, each just below the previous one.
  if (pending_bytes_ == 0) {
    pending_first_ = first;
    pending_last_ = last;
  } else {
    pending_first_ = std::min(pending_first_, first);
    pending_last_ = std::max(pending_last_, last);
  }
  for (std::size_t i = first; i < last; ++i) {
    pending_bytes_ += static_cast<double>(full_.tensors()[i].count) * sizeof(float);
  }
  if (pending_bytes_ >= bucket_bytes_) {
    enqueue({pending_first_, pending_last_});
    pending_bytes_ = 0;
  }
}

void OverlappedSync::enqueue(Range range) {
  GradSync& sync = bucket(range);
  {
    std::lock_guard<std::mutex> lock(mutex_);
    queue_.push_back(&sync);
    ++in_flight_;
  }
  cv_.notify_all();
}

SyncTotals OverlappedSync::finish() {
  if (pending_bytes_ > 0) {
    enqueue({pending_first_, pending_last_});
    pending_bytes_ = 0;
  }
  const double start = unix_time_s();
  std::unique_lock<std::mutex> lock(mutex_);
  // Bounded: each group call fails by its deadline, which ends the bucket.
  cv_.wait(lock, [this] { return in_flight_ == 0; });
  if (error_) std::rethrow_exception(std::exchange(error_, nullptr));
  totals_.exposed_s = unix_time_s() - start;
  return totals_;
}

void OverlappedSync::loop() {
  for (;;) {
    GradSync* sync = nullptr;
    bool failed_before = false;  // after an error, later buckets of the step are skipped
    {
      std::unique_lock<std::mutex> lock(mutex_);
      cv_.wait(lock, [this] { return stop_ || !queue_.empty(); });
      if (queue_.empty()) return;
      sync = queue_.front();
      queue_.pop_front();
      failed_before = error_ != nullptr;
    }
    const double start = unix_time_s();
    SyncBytes bytes;
    std::exception_ptr error;
    try {
      if (!failed_before) bytes = sync->run(grads_);
    } catch (...) {
      error = std::current_exception();
    }
    {
      std::lock_guard<std::mutex> lock(mutex_);
      if (error && !error_) error_ = error;
      totals_.bytes.reshard += bytes.reshard;
      totals_.bytes.allreduce += bytes.allreduce;
      totals_.spans.push_back({"sync bucket", Track::kComm, start, unix_time_s() - start, step_});
      --in_flight_;
    }
    cv_.notify_all();
  }
}

}  // namespace ntp::train
