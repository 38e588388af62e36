#pragma once
// The units one TP rank holds: a set of attention units (GPT-2 heads, Llama
// KV groups), of FFN neurons (Llama: SwiGLU neurons) and of vocabulary rows. The same head and neuron sets apply to every layer. Any
// sets are allowed (non-contiguous, uneven, even empty); the TP ranks of one
// replica must together hold every unit exactly once.
#include "layout/interval_set.h"
#include "model/config.h"

namespace ntp::model {

// What a tensor is split by: replicated (not split), or one of the three unit kinds.
enum class UnitKind { kReplicated, kHead, kNeuron, kVocab };

struct Shard {
  layout::IntervalSet heads;    // units of kind head:   0 .. head_units()-1
  layout::IntervalSet neurons;  // units of kind neuron: 0 .. ffn-1
  layout::IntervalSet vocab;    // units of kind vocab:  0 .. padded_vocab-1

  static Shard full(const GptConfig& config);  // everything: TP = 1
  // The set of `kind`; throws std::invalid_argument for kReplicated.
  const layout::IntervalSet& of(UnitKind kind) const;
  // Throws std::invalid_argument if a set reaches outside its unit range.
  void validate(const GptConfig& config) const;
  bool operator==(const Shard&) const = default;
};

}  // namespace ntp::model
