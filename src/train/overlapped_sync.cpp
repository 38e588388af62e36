#include "train/overlapped_sync.h"

#include <algorithm>
#include <stdexcept>
#include <utility>

#include "train/run_dir.h"

namespace ntp::train {

OverlappedSync::OverlappedSync(const model::ParameterLayout& layout,
                               const model::ParameterLayout& full, KindViews views,
                               std::vector<int> active, comm::Group& tp_sync, comm::Group* dp,
                               double bucket_mb, bool split_embedding)
    : layout_(layout),
      full_(full),
      views_(std::move(views)),
      active_(std::move(active)),
      tp_(tp_sync),
      dp_(dp),
      bucket_bytes_(bucket_mb * 1024 * 1024),
      split_embedding_(split_embedding) {
  const layout::SlotView& vocab = views_.vocab;
  if (split_embedding_ && (dp_ == nullptr || !vocab.pre_sync_sends.empty() || !vocab.pre_sync_receives.empty() ||
                           !(vocab.sync_units == layout_["wte"].units))) {
    throw std::invalid_argument(
        "OverlappedSync: a split wte gradient needs every slot to hold exactly its sync partition of the "
        "vocabulary");
  }
  thread_ = std::thread([this] { loop(); });
}

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
  // Ranges arrive in backward order, each just below the previous one, except
  // a split wte's LM-head part (ahead of the rest): a range that does not
  // border the pending bucket closes it, so a bucket is always one range.
  if (pending_bytes_ > 0 && last != pending_first_ && first != pending_last_) {
    enqueue({pending_first_, pending_last_});
    pending_bytes_ = 0;
  }
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
  enqueue({"sync bucket", [this, &sync] { return sync.run(grads_); }});
}

void OverlappedSync::enqueue(Task task) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    queue_.push_back(std::move(task));
    ++in_flight_;
  }
  cv_.notify_all();
}

void OverlappedSync::embedding_rows(const model::EmbeddingRows& rows) {
  if (!split_embedding_) throw std::logic_error("OverlappedSync: embedding rows without split_embedding");
  rows_ = rows;
  rows_pending_ = true;
}

// On the communication thread, after the wte bucket (the queue is in order).
SyncBytes OverlappedSync::sync_embedding_rows() {
  const model::TensorSpec& wte = layout_["wte"];
  const std::int64_t dim = wte.unit_size;
  // Which of the partition's rows any replica touched: a sum of 0/1 flags.
  std::vector<float> touched(static_cast<std::size_t>(wte.units.size()), 0.0f);
  for (std::int64_t col : rows_.cols) touched[static_cast<std::size_t>(col)] = 1.0f;
  dp_->all_reduce(touched.data(), touched.size());
  std::vector<std::int64_t> cols;
  for (std::size_t col = 0; col < touched.size(); ++col)
    if (touched[col] != 0.0f) cols.push_back(static_cast<std::int64_t>(col));
  std::vector<float> sum(cols.size() * static_cast<std::size_t>(dim), 0.0f);
  for (std::size_t i = 0; i < rows_.cols.size(); ++i) {
    const auto at = std::lower_bound(cols.begin(), cols.end(), rows_.cols[i]) - cols.begin();
    std::copy_n(rows_.values.data() + static_cast<std::int64_t>(i) * dim, dim, sum.data() + at * dim);
  }
  dp_->all_reduce(sum.data(), sum.size());
  float* grad = grads_.data() + wte.offset;
  for (std::size_t i = 0; i < cols.size(); ++i) {
    float* row = grad + cols[i] * dim;
    const float* add = sum.data() + static_cast<std::int64_t>(i) * dim;
    for (std::int64_t j = 0; j < dim; ++j) row[j] += add[j];
  }
  return {0, static_cast<std::int64_t>((touched.size() + sum.size()) * sizeof(float))};
}

SyncTotals OverlappedSync::finish() {
  if (pending_bytes_ > 0) {
    enqueue({pending_first_, pending_last_});
    pending_bytes_ = 0;
  }
  if (std::exchange(rows_pending_, false)) enqueue({"sync embedding rows", [this] { return sync_embedding_rows(); }});
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
    Task task;
    bool failed_before = false;  // after an error, later buckets of the step are skipped
    {
      std::unique_lock<std::mutex> lock(mutex_);
      cv_.wait(lock, [this] { return stop_ || !queue_.empty(); });
      if (queue_.empty()) return;
      task = std::move(queue_.front());
      queue_.pop_front();
      failed_before = error_ != nullptr;
    }
    const double start = unix_time_s();
    SyncBytes bytes;
    std::exception_ptr error;
    try {
      if (!failed_before) bytes = task.run();
    } catch (...) {
      error = std::current_exception();
    }
    {
      std::lock_guard<std::mutex> lock(mutex_);
      if (error && !error_) error_ = error;
      totals_.bytes.reshard += bytes.reshard;
      totals_.bytes.allreduce += bytes.allreduce;
      totals_.spans.push_back({task.name, Track::kComm, start, unix_time_s() - start, step_});
      --in_flight_;
    }
    cv_.notify_all();
  }
}

}  // namespace ntp::train
