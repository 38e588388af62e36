#pragma once
// The global gradient norm, bit-identical on every replica whatever its TP
// degree and layout.
//
// Why: the norm decides the clipping factor, which scales every update. Summed
// the usual way (each rank's partial sum, then a TP all-reduce), the result
// depends on how the replica splits its units, so replicas at different TP
// degrees clip by factors that differ in the last bits and their parameters
// drift apart by ulps — the DP invariant (every replica holds identical
// state) would hold only approximately, and a cross-replica hash could not
// tell drift from a bug.
//
// How: the sum of squares is cut into pieces that do not depend on the layout
// (one per unit of each sharded tensor, fixed 4096-element chunks of each
// replicated tensor). Each piece is summed in a fixed order (the same values
// give the same bits anywhere) and rounded to a fixed-point integer with 64
// fraction bits; integer addition is exact and associative, so the replica's
// total is the same for any split among its ranks. The resolution is 2^-64 per
// piece: far below the float rounding of the gradients themselves.
#include <cstdint>
#include <span>

#include "model/model.h"

namespace ntp::train {

// 128-bit unsigned (a GCC/Clang extension, hence __extension__ for -Wpedantic).
__extension__ typedef unsigned __int128 Fixed128;

// A rank's share of its replica's squared gradient norm, in fixed point.
struct NormPart {
  Fixed128 fixed = 0;  // sum of squares * 2^64
  bool overflow = false;        // a non-finite gradient, or a total too large to hold exactly
  void add(const NormPart& other);
  // The two words and the flag, for an all-gather of int64.
  void write(std::int64_t* out) const;
  static NormPart read(const std::int64_t* in);
  static constexpr int kWords = 3;
  // sqrt of the value; +inf on overflow.
  double norm() const;
};

// The pieces of the gradients a rank holds (`grads`, laid out by `layout`):
// its units of every sharded tensor and, if `count_replicated` (one rank per
// replica), the replicated tensors. The sum of the parts of one replica's
// ranks is that replica's squared norm.
NormPart grad_norm_part(const model::ParameterLayout& layout, std::span<const float> grads,
                        bool count_replicated, tensor::Context& ctx);
inline NormPart grad_norm_part(model::Model& model) {
  return grad_norm_part(model.layout(), model.grads(), model.counts_replicated(), model.context().host());
}

}  // namespace ntp::train
