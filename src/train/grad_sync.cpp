#include "train/grad_sync.h"

#include <algorithm>
#include <stdexcept>

#include <fmt/format.h>

#include "train/state_hash.h"

namespace ntp::train {
namespace {

using model::TensorSpec;
using model::UnitKind;

// Copies the values of `units` of one tensor from a buffer that stores the
// unit set `from_set` unit-major to one that stores `to_set`. A run of
// consecutive unit ids is contiguous in both, so each interval is one copy.
void move_units(const layout::IntervalSet& units, std::int64_t unit_size,
                const layout::IntervalSet& from_set, const float* from,
                const layout::IntervalSet& to_set, float* to) {
  for (const layout::Interval& iv : units.intervals()) {
    std::copy_n(from + from_set.offset_of(iv.start) * unit_size, iv.size() * unit_size,
                to + to_set.offset_of(iv.start) * unit_size);
  }
}

}  // namespace

const layout::SlotView& KindViews::of(model::UnitKind kind) const {
  switch (kind) {
    case UnitKind::kHead:
      return heads;
    case UnitKind::kNeuron:
      return neurons;
    case UnitKind::kVocab:
      return vocab;
    case UnitKind::kReplicated:
      break;
  }
  throw std::invalid_argument("KindViews: replicated tensors have no slot view");
}

GradSync::GradSync(const model::ParameterLayout& layout, KindViews views, std::vector<int> active,
                   comm::Group& tp, comm::Group* dp, std::size_t first, std::size_t last)
    : layout_(layout),
      first_(first),
      last_(last == 0 ? layout.tensors().size() : last),
      views_(std::move(views)),
      active_(std::move(active)),
      tp_(tp),
      dp_(dp) {
  std::size_t sync_size = 0;
  std::size_t replicated = 0;
  const bool group0 = views_.heads.sync_group == 0;
  for (const TensorSpec& spec : tensors()) {
    if (spec.kind == UnitKind::kReplicated) {
      if (group0) sync_size += static_cast<std::size_t>(spec.count);
      replicated += static_cast<std::size_t>(spec.count);
    } else if (views_.of(spec.kind).is_core()) {
      sync_size += static_cast<std::size_t>(views_.of(spec.kind).sync_units.size() * spec.unit_size);
    }
  }
  for (UnitKind kind : kShardedKinds) {
    // A bucket without tensors of this kind moves nothing (the same on both ends).
    if (!holds_kind(kind)) continue;
    for (const layout::SlotTransfer& t : views_.of(kind).pre_sync_sends) {
      outgoing_.push_back({kind, tp_rank_of(t.to), t.units,
                           tensor::Buffer(transfer_size(kind, t.units))});
    }
    for (const layout::SlotTransfer& t : views_.of(kind).pre_sync_receives) {
      incoming_.push_back({kind, tp_rank_of(t.from), t.units,
                           tensor::Buffer(transfer_size(kind, t.units))});
    }
  }
  replicated_ = tensor::Buffer(replicated);
  in_place_ = sync_layout_is_own();
  sync_buffer_ = tensor::Buffer(dp_ != nullptr && !in_place_ ? sync_size : 0);
  sync_size_ = dp_ != nullptr ? sync_size : 0;
}

// The sync buffer would be a copy of the rank's own gradients of the range,
// element for element: this core slot receives nothing and holds exactly its
// partition of every sharded tensor, and the range's replicated tensors (if
// any) belong to its group. Then the all-reduce runs on the gradients in place.
bool GradSync::sync_layout_is_own() const {
  if (dp_ == nullptr || !incoming_.empty() || !outgoing_.empty()) return false;
  for (const TensorSpec& spec : tensors()) {
    if (spec.kind == UnitKind::kReplicated) {
      if (views_.heads.sync_group != 0) return false;
    } else if (!(views_.of(spec.kind).sync_units == spec.units)) {
      return false;
    }
  }
  return true;
}

std::span<const TensorSpec> GradSync::tensors() const {
  return std::span<const TensorSpec>(layout_.tensors()).subspan(first_, last_ - first_);
}

bool GradSync::holds_kind(UnitKind kind) const {
  const auto specs = tensors();
  return std::any_of(specs.begin(), specs.end(), [&](const TensorSpec& s) { return s.kind == kind; });
}

int GradSync::tp_rank_of(int slot) const {
  const auto it = std::find(active_.begin(), active_.end(), slot);
  if (it == active_.end()) {
    throw std::invalid_argument(fmt::format("GradSync: slot {} is not active in this replica", slot));
  }
  return static_cast<int>(it - active_.begin());
}

std::size_t GradSync::transfer_size(UnitKind kind, const layout::IntervalSet& units) const {
  std::size_t size = 0;
  for (const TensorSpec& spec : tensors()) {
    if (spec.kind == kind) size += static_cast<std::size_t>(units.size() * spec.unit_size);
  }
  return size;
}

void GradSync::pack(const Transfer& t, std::span<const float> grads, std::span<float> buffer) const {
  float* out = buffer.data();
  for (const TensorSpec& spec : tensors()) {
    if (spec.kind != t.kind) continue;
    move_units(t.units, spec.unit_size, spec.units, grads.data() + spec.offset, t.units, out);
    out += t.units.size() * spec.unit_size;
  }
}

void GradSync::unpack(const Transfer& t, std::span<const float> buffer, std::span<float> grads) const {
  const float* in = buffer.data();
  for (const TensorSpec& spec : tensors()) {
    if (spec.kind != t.kind) continue;
    move_units(t.units, spec.unit_size, t.units, in, spec.units, grads.data() + spec.offset);
    in += t.units.size() * spec.unit_size;
  }
}

std::int64_t GradSync::exchange(std::vector<Transfer>& sends, std::vector<Transfer>& receives,
                                std::uint32_t phase) {
  std::vector<comm::P2POp> ops;
  std::int64_t bytes = 0;
  for (Transfer& t : sends) {
    ops.push_back(comm::P2POp::send(comm::ConstView(t.buffer.data(), t.buffer.size()), t.peer,
                                    phase * 4 + static_cast<std::uint32_t>(t.kind)));
    bytes += static_cast<std::int64_t>(t.buffer.size() * sizeof(float));
  }
  for (Transfer& t : receives) {
    ops.push_back(comm::P2POp::recv(comm::View(t.buffer.data(), t.buffer.size()), t.peer,
                                    phase * 4 + static_cast<std::uint32_t>(t.kind)));
  }
  if (!ops.empty()) tp_.exchange(ops);
  return bytes;
}

// Between the rank's gradients (plus the received pieces) and the sync
// buffer: S_j unit-major per sharded tensor, replicated tensors in group 0.
void GradSync::sync_buffer_copy(std::span<float> grads, bool into_buffer) {
  const bool group0 = views_.heads.sync_group == 0;
  std::vector<std::size_t> cursor(incoming_.size(), 0);  // tensor offset inside each piece
  float* sync = sync_buffer_.data();
  for (const TensorSpec& spec : tensors()) {
    float* mine = grads.data() + spec.offset;
    if (spec.kind == UnitKind::kReplicated) {
      if (!group0) continue;
      if (into_buffer) std::copy_n(mine, spec.count, sync);
      else std::copy_n(sync, spec.count, mine);
      sync += spec.count;
      continue;
    }
    const layout::IntervalSet& S = views_.of(spec.kind).sync_units;
    // A core slot faster than its peers holds more than S_j: the rest went
    // to its core slots in the pre-sync (outgoing_), only S_j's part is here.
    const layout::IntervalSet own = spec.units.intersect(S);
    if (into_buffer) move_units(own, spec.unit_size, spec.units, mine, S, sync);
    else move_units(own, spec.unit_size, S, sync, spec.units, mine);
    for (std::size_t i = 0; i < incoming_.size(); ++i) {
      Transfer& t = incoming_[i];
      if (t.kind != spec.kind) continue;
      float* piece = t.buffer.data() + cursor[i];
      if (into_buffer) move_units(t.units, spec.unit_size, t.units, piece, S, sync);
      else move_units(t.units, spec.unit_size, S, sync, t.units, piece);
      cursor[i] += static_cast<std::size_t>(t.units.size() * spec.unit_size);
    }
    if (into_buffer && mispair_ && spec.kind == UnitKind::kHead && S.size() >= 2) {
      // Deliberately wrong: unit 0 and unit 1 of this tensor trade places.
      std::swap_ranges(sync, sync + spec.unit_size, sync + spec.unit_size);
    }
    sync += S.size() * spec.unit_size;
  }
}

void GradSync::replicated_broadcast(std::span<float> grads) {
  if (tp_.size() == 1 || replicated_.size() == 0) return;
  float* buffer = replicated_.data();
  for (const TensorSpec& spec : tensors()) {
    if (spec.kind != UnitKind::kReplicated) continue;
    std::copy_n(grads.data() + spec.offset, spec.count, buffer);
    buffer += spec.count;
  }
  tp_.broadcast(comm::View(replicated_.data(), replicated_.size()), 0);
  if (keep_replicated_) return;
  const float* in = replicated_.data();
  for (const TensorSpec& spec : tensors()) {
    if (spec.kind != UnitKind::kReplicated) continue;
    std::copy_n(in, spec.count, grads.data() + spec.offset);
    in += spec.count;
  }
}

// The DP group has something to sum: a core slot with peers and elements.
bool GradSync::reduces() const { return dp_ != nullptr && dp_->size() > 1 && sync_size_ > 0; }

// The bucket goes through the sync buffer: it is reduced and the sync layout
// is not the rank's own, or the test mispairing is to show in the buffer.
// Alone in the DP group the round trip through the buffer is the identity and
// is skipped.
bool GradSync::via_buffer() const {
  return dp_ != nullptr && (mispair_ || (reduces() && !in_place_));
}

SyncBytes GradSync::pre_sync(std::span<float> grads) {
  SyncBytes bytes;
  for (Transfer& t : outgoing_) pack(t, grads, t.buffer.span());
  bytes.reshard += exchange(outgoing_, incoming_, 0);  // pre-sync: extra -> core
  if (via_buffer()) {
    if (sync_buffer_.size() != sync_size_) sync_buffer_ = tensor::Buffer(sync_size_);  // mispairing in place
    sync_buffer_copy(grads, true);
  }
  if (dp_ != nullptr) bytes.allreduce += static_cast<std::int64_t>(sync_size_ * sizeof(float));
  return bytes;
}

std::span<float> GradSync::reduce_span(std::span<float> grads) {
  if (!reduces()) return {};
  if (via_buffer()) return sync_buffer_.span();
  return grads.subspan(static_cast<std::size_t>(tensors().front().offset), sync_size_);
}

SyncBytes GradSync::post_sync(std::span<float> grads) {
  SyncBytes bytes;
  if (via_buffer()) sync_buffer_copy(grads, false);
  bytes.reshard += exchange(incoming_, outgoing_, 1);  // post-sync: core -> extra
  for (const Transfer& t : outgoing_) unpack(t, t.buffer.span(), grads);
  replicated_broadcast(grads);
  return bytes;
}

SyncBytes GradSync::run(std::span<float> grads) {
  SyncBytes bytes = pre_sync(grads);
  if (const std::span<float> sum = reduce_span(grads); !sum.empty()) dp_->all_reduce(sum.data(), sum.size());
  bytes += post_sync(grads);
  return bytes;
}

}  // namespace ntp::train
