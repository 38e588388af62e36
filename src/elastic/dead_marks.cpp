#include "elastic/dead_marks.h"

#include <stdexcept>

#include <fmt/format.h>

#include "elastic/membership.h"

namespace ntp::elastic {

DeadMarks::DeadMarks(std::shared_ptr<comm::Store> store, int world_size, std::chrono::milliseconds max_age)
    : store_(std::move(store)), max_age_(max_age), world_size_(world_size),
      dead_(static_cast<std::size_t>(world_size), false) {
  for (int r = 0; r < world_size; ++r) keys_.push_back(dead_key(r));
  keys_.emplace_back();  // failed_key of the epoch asked about
}

void DeadMarks::refresh(std::uint64_t epoch) {
  const auto now = std::chrono::steady_clock::now();
  if (read_ && epoch == epoch_ && now - read_at_ < max_age_) return;
  keys_.back() = failed_key(epoch);
  const auto marks = store_->get_many(keys_);
  if (marks.size() != keys_.size()) throw std::runtime_error("dead marks: the store answered a batched read short");
  for (std::size_t r = 0; r < dead_.size(); ++r) dead_[r] = marks[r].has_value();
  epoch_failed_ = marks.back().has_value();
  epoch_ = epoch;
  read_at_ = now;  // taken before the read: the snapshot is at least this fresh
  read_ = true;
}

bool DeadMarks::is_dead(int rank) {
  if (rank < 0 || rank >= world_size_) {
    throw std::out_of_range(fmt::format("dead marks: rank {} is not in a world of {}", rank, world_size_));
  }
  std::lock_guard lock(mutex_);
  refresh(read_ ? epoch_ : 0);
  return dead_[static_cast<std::size_t>(rank)];
}

bool DeadMarks::epoch_failed(std::uint64_t epoch) {
  std::lock_guard lock(mutex_);
  refresh(epoch);
  return epoch_failed_;
}

}  // namespace ntp::elastic
