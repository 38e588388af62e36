#include "train/overlapped_sync.h"

#include <algorithm>
#include <stdexcept>
#include <utility>

#include "train/run_dir.h"

namespace ntp::train {

OverlappedSync::OverlappedSync(const model::ParameterLayout& layout,
                               const model::ParameterLayout& full, KindViews views,
                               std::vector<int> active, comm::Group& tp_sync, comm::Group* dp,
                               SyncOptions options)
    : layout_(layout),
      full_(full),
      views_(std::move(views)),
      active_(std::move(active)),
      tp_(tp_sync),
      dp_(dp),
      bucket_bytes_(options.bucket_mb * 1024 * 1024),
      split_embedding_(options.split_embedding),
      pipeline_(options.pipeline) {
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
  pending_bytes_ = 0;
  std::lock_guard<std::mutex> lock(mutex_);
  step_ = step;
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
  enqueue({"sync bucket", {}, &bucket(range)});
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
  if (pipeline_) enqueue({"settle", {}, nullptr});  // the last bucket's post-sync
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
      if (queue_.empty()) break;
      task = std::move(queue_.front());
      queue_.pop_front();
      failed_before = error_ != nullptr;
    }
    SyncBytes bytes;
    std::exception_ptr error;
    try {
      if (!failed_before) bytes = run(task);
    } catch (...) {
      error = std::current_exception();
      abandon();
    }
    {
      std::lock_guard<std::mutex> lock(mutex_);
      if (error && !error_) error_ = error;
      totals_.bytes += bytes;
      --in_flight_;
    }
    cv_.notify_all();
  }
  abandon();  // a step given up before finish(): its all-reduce must end before the buffers go
}

// Without the pipeline a bucket runs its stages in series. With it, the
// bucket's pre-sync, then its all-reduce handed to the DP group's thread,
// then the previous bucket's post-sync: the fixed order every rank issues.
// Any other task first settles the bucket in flight (the embedding rows add
// to wte's synced gradient; the last task of a step settles the last bucket).
SyncBytes OverlappedSync::run(const Task& task) {
  if (task.bucket == nullptr) {
    SyncBytes bytes = settle();
    if (!task.run) return bytes;
    const double start = unix_time_s();
    bytes += task.run();
    add_span(task.name, Track::kComm, start);
    return bytes;
  }
  GradSync& sync = *task.bucket;
  if (!pipeline_) {
    const double start = unix_time_s();
    const SyncBytes bytes = sync.run(grads_);
    add_span(task.name, Track::kComm, start);
    return bytes;
  }
  SyncBytes bytes = pre_sync(sync);
  const std::optional<Reducing> previous = std::exchange(reducing_, Reducing{&sync, all_reduce_async(sync)});
  if (previous) bytes += post_sync(*previous);
  return bytes;
}

SyncBytes OverlappedSync::pre_sync(GradSync& sync) {
  const double start = unix_time_s();
  const SyncBytes bytes = sync.pre_sync(grads_);
  add_span("pre-sync", Track::kComm, start);
  return bytes;
}

std::shared_ptr<comm::Work> OverlappedSync::all_reduce_async(GradSync& sync) {
  const std::span<float> sum = sync.reduce_span(grads_);
  if (sum.empty()) return comm::Work::completed();
  // The call takes the group's deadline when it starts, as a blocking one does.
  return dp_->run_async([this, sum](comm::Group& dp) {
    const double start = unix_time_s();
    dp.all_reduce(sum.data(), sum.size());
    add_span("all-reduce", Track::kReduce, start);
  });
}

// Waits for the bucket's all-reduce (bounded by its deadline; rethrows its
// error), then sends the reduced pieces back.
SyncBytes OverlappedSync::post_sync(const Reducing& r) {
  r.work->wait();
  const double start = unix_time_s();
  const SyncBytes bytes = r.bucket->post_sync(grads_);
  add_span("post-sync", Track::kComm, start);
  return bytes;
}

SyncBytes OverlappedSync::settle() {
  if (!reducing_) return {};
  const Reducing r = *std::exchange(reducing_, std::nullopt);
  return post_sync(r);
}

// After an error: the all-reduce in flight still writes into the gradients or
// the sync buffer, so wait for it (its own error, if any, is a consequence of
// the first one) and skip its post-sync.
void OverlappedSync::abandon() {
  if (!reducing_) return;
  const Reducing r = *std::exchange(reducing_, std::nullopt);
  try {
    r.work->wait();
  } catch (...) {  // NOLINT(bugprone-empty-catch): the step already failed
  }
}

void OverlappedSync::add_span(const char* name, Track track, double start) {
  const double end = unix_time_s();
  std::lock_guard<std::mutex> lock(mutex_);
  totals_.spans.push_back({name, track, start, end - start, step_});
}

}  // namespace ntp::train
