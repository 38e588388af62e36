#pragma once
// The flat, named parameter layout of one TP rank. Every parameter (and its
// gradient, and each AdamW moment) lives in one flat buffer; a TensorSpec says
// where a named tensor sits in it and, for a TP-sharded tensor, which units it
// holds. Sharded tensors are unit-major: unit u's `unit_size` elements are
// contiguous, units in increasing id order, so the same unit has the same
// element layout on every rank and in the full (TP = 1) model.
//
// Per layer l (name prefix "h<l>."), with C = d_model, hd = head_dim:
//   ln1_w, ln1_b          replicated [C]
//   qkv_w                 head   unit [3, hd, C]  (the head's q, k, v rows)
//   qkv_b                 head   unit [3, hd]
//   proj_wt               head   unit [hd, C]     (row-parallel, stored transposed)
//   proj_b                replicated [C]
//   ln2_w, ln2_b          replicated [C]
//   fc1_w                 neuron unit [C]
//   fc1_b                 neuron unit [1]
//   fc2_wt                neuron unit [C]         (row-parallel, stored transposed)
//   fc2_b                 replicated [C]
// plus wte (vocab unit [C], tied LM head), wpe [max_seq, C], lnf_w, lnf_b [C].
//
// Llama (no biases; g = heads / kv_heads query heads per KV group, F = ffn_hidden):
//   ln1_w                 replicated [C]          (RMSNorm gain)
//   qkv_w                 head   unit [g+2, hd, C] (the group's g query heads, its key head, its value head)
//   proj_wt               head   unit [g, hd, C]  (the group's output-projection columns, stored transposed)
//   ln2_w                 replicated [C]
//   fc1_w                 neuron unit [2, C]      (the SwiGLU neuron's gate row, then its up row)
//   fc2_wt                neuron unit [C]         (its down-projection column, stored transposed)
// plus wte (vocab unit [C], input embedding), lnf_w [C], lm_head (vocab unit [C], untied).
//
// A pipeline stage (stage.h) holds the whole layout's tensors that it uses, in
// the whole layout's order: its layers (names keep their global "h<l>."),
// on the first stage wte (and wpe), on the last lnf_w (and lnf_b) and the LM
// head. GPT-2's head is the tied wte, so a last stage that is not also the
// first holds a copy of wte (Megatron's way; the two copies' gradients are
// summed between the stages by the trainer).
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "layout/interval_set.h"
#include "model/config.h"
#include "model/shard.h"
#include "model/stage.h"

namespace ntp::model {

const char* to_string(UnitKind kind);

struct TensorSpec {
  std::string name;
  UnitKind kind = UnitKind::kReplicated;
  std::int64_t unit_size = 0;  // elements per unit; for replicated tensors the whole size
  layout::IntervalSet units;   // units held (replicated: {[0,1)})
  std::int64_t offset = 0;     // first element in the flat buffer
  std::int64_t count = 0;      // elements held = units.size() * unit_size
  bool weight_decay = false;   // 2-D weight matrices only (GPT-2 convention)
  int layer = -1;              // -1 for tensors outside the blocks
  // Position in the whole model's layout: the initialisation's key, so a
  // stage draws the whole model's values.
  std::size_t whole_index = 0;
};

class ParameterLayout {
 public:
  ParameterLayout(const GptConfig& config, const Shard& shard);  // the whole model
  // Throws std::invalid_argument for a stage outside the model (StageRange::validate).
  ParameterLayout(const GptConfig& config, const Shard& shard, const StageRange& stage);

  const GptConfig& config() const { return config_; }
  const Shard& shard() const { return shard_; }
  const StageRange& stage() const { return stage_; }
  const std::vector<TensorSpec>& tensors() const { return tensors_; }
  std::int64_t size() const { return size_; }  // elements of the flat buffer
  // Index of a tensor by name; throws std::out_of_range naming it.
  std::size_t index_of(const std::string& name) const;
  const TensorSpec& operator[](const std::string& name) const { return tensors_[index_of(name)]; }
  // The tensor named `name`, or null if this model family has none.
  const TensorSpec* find(const std::string& name) const;
  // The first and one-past-last tensor index of layer l (its tensors are
  // contiguous); throws std::out_of_range naming a layer outside the stage.
  std::pair<std::size_t, std::size_t> layer_range(int layer) const;
  // GPT-2's wte on a stage without the embedding: the LM head's copy of the
  // first stage's tensor. The first stage's is the tensor: the gradient norm,
  // model.bin and checkpoints count it there, never here.
  bool is_tied_copy(const TensorSpec& t) const;

 private:
  void add_gpt2();
  void add_llama();
  // Every tensor of the whole model is offered in order; the stage keeps those it holds.
  // `layer` -1: a tensor outside the blocks.
  void add(const std::string& name, UnitKind kind, std::int64_t unit_size, bool decay, int layer);
  bool holds_outside_blocks(const std::string& name) const;

  GptConfig config_;
  Shard shard_;
  StageRange stage_;
  std::size_t offered_ = 0;  // tensors of the whole layout offered so far
  std::vector<TensorSpec> tensors_;
  std::int64_t size_ = 0;
};

// Copies the units (and replicated tensors) of `shard` out of a full (TP = 1)
// buffer laid out by `full`. Both layouts must share the config; tensors are
// matched by name, so `shard` may be a pipeline stage (each of its tensors
// must be in `full`).
void scatter_from_full(const ParameterLayout& full, std::span<const float> full_values,
                       const ParameterLayout& shard, std::span<float> shard_values);

// Writes a shard's units into a full buffer (other units untouched);
// replicated tensors are written only if `include_replicated`, a tied copy
// never. Tensors are matched by name, as above.
void gather_into_full(const ParameterLayout& shard, std::span<const float> shard_values,
                      const ParameterLayout& full, std::span<float> full_values,
                      bool include_replicated);

}  // namespace ntp::model
