#pragma once
// NTP gradient sync of one rank (DESIGN §3, §4), for each unit kind (heads,
// neurons, vocabulary rows) with its own layout:
//   1. pre-sync: an extra slot sends the gradients of the pieces it holds to
//      the core slot that owns them in the sync partition S (inside the
//      replica, over the TP group);
//   2. a core slot j lays out S_j unit-major for every sharded tensor (plus,
//      in sync group 0, the replicated tensors) and all-reduces that buffer in
//      DP group j = {core slot j of every training replica};
//   3. post-sync: the core slots send the reduced pieces back;
//   4. the replicated gradients, reduced in group 0, are broadcast from core
//      slot 0 to every slot of the replica, so every copy ends identical.
// Because every replica stores its units unit-major, a unit's gradient has
// the same element layout everywhere and the all-reduce adds like to like.
#include <cstdint>
#include <span>
#include <vector>

#include "comm/group.h"
#include "layout/job_layout.h"
#include "model/parameters.h"
#include "tensor/buffer.h"

namespace ntp::train {

// The slot views of one rank, one per sharded unit kind.
struct KindViews {
  layout::SlotView heads;
  layout::SlotView neurons;
  layout::SlotView vocab;
  const layout::SlotView& of(model::UnitKind kind) const;
};

struct SyncBytes {
  std::int64_t reshard = 0;    // pre-sync + post-sync bytes this rank sent
  std::int64_t allreduce = 0;  // bytes this rank all-reduced in its DP group
  SyncBytes& operator+=(const SyncBytes& o) {
    reshard += o.reshard;
    allreduce += o.allreduce;
    return *this;
  }
};

class GradSync {
 public:
  // `active` are the replica's active slots in TP-group order; `dp` is the
  // rank's sync group (nullptr for an extra slot). Groups must outlive this.
  // Only the tensors [first, last) of the layout are synchronized (a bucket);
  // last = 0 means every tensor. Every rank must use the same ranges.
  GradSync(const model::ParameterLayout& layout, KindViews views, std::vector<int> active,
           comm::Group& tp, comm::Group* dp, std::size_t first = 0, std::size_t last = 0);

  // Synchronizes `grads` (laid out by `layout`) in place. Blocking.
  SyncBytes run(std::span<float> grads);

  // run() in its three stages, for a caller that pipelines buckets
  // (OverlappedSync): pre_sync (TP group, then the copy into the sync
  // buffer), the DP all-reduce of reduce_span() in place, post_sync (the copy
  // back, then TP group). The all-reduce is the stages' only DP call and is
  // left to the caller, which may run it on another thread while this or
  // another bucket's TP stages go on. Every rank of the replica must issue the
  // TP stages of all buckets in the same order.
  SyncBytes pre_sync(std::span<float> grads);
  // What the DP group sums, after pre_sync: the sync buffer, or the rank's
  // own gradients of the range in place; empty when there is nothing to sum.
  std::span<float> reduce_span(std::span<float> grads);
  SyncBytes post_sync(std::span<float> grads);

  // Test hook: swap two units of the sync layout on this rank (mis-pairing the
  // reshard), to show that --verify catches it. Off by default.
  void mispair_for_test(bool on) { mispair_ = on; }
  // Test hook: this rank takes part in the broadcast of the replicated
  // gradients but keeps its own (unsynced) copy, so its replicated tensors
  // drift from the other slots'; the holder check must catch it.
  void keep_replicated_for_test(bool on) { keep_replicated_ = on; }

 private:
  struct Transfer {
    model::UnitKind kind;
    int peer = 0;               // TP-group rank of the other slot
    layout::IntervalSet units;  // units moved
    tensor::Buffer buffer;      // every tensor of `kind`, unit-major over `units`
  };
  int tp_rank_of(int slot) const;
  std::size_t transfer_size(model::UnitKind kind, const layout::IntervalSet& units) const;
  void pack(const Transfer& t, std::span<const float> grads, std::span<float> buffer) const;
  void unpack(const Transfer& t, std::span<const float> buffer, std::span<float> grads) const;
  std::int64_t exchange(std::vector<Transfer>& sends, std::vector<Transfer>& receives, std::uint32_t phase);
  void sync_buffer_copy(std::span<float> grads, bool into_buffer);
  bool reduces() const;
  bool via_buffer() const;
  void replicated_broadcast(std::span<float> grads);

  std::span<const model::TensorSpec> tensors() const;
  bool holds_kind(model::UnitKind kind) const;

  const model::ParameterLayout& layout_;
  std::size_t first_;
  std::size_t last_;
  KindViews views_;
  std::vector<int> active_;
  comm::Group& tp_;
  comm::Group* dp_;
  std::vector<Transfer> outgoing_;  // pre-sync sends (extra slot)
  std::vector<Transfer> incoming_;  // pre-sync receives (core slot)
  bool sync_layout_is_own() const;
  // Buffers, not vectors: made when a layout changes, i.e. in the first step
  // after a recovery, where a vector's memset and small pages cost that step
  // a tenth of its time; a Buffer is zeroed by the kernel on huge pages.
  tensor::Buffer sync_buffer_;      // empty when the all-reduce runs in place
  std::size_t sync_size_ = 0;       // elements this rank all-reduces
  bool in_place_ = false;
  tensor::Buffer replicated_;
  bool mispair_ = false;
  bool keep_replicated_ = false;
};

}  // namespace ntp::train
