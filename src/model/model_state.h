#pragma once
// The Model's private state shared by its GPT-2 (model.cpp) and Llama
// (llama_block.cpp) blocks: where each block's tensors sit, the activations
// forward keeps for backward, and the per-rank sizes.
#include <cstdint>
#include <vector>

#include "model/model.h"
#include "model/vocab_parallel.h"
#include "tensor/buffer.h"
#include "tensor/gpu.h"

namespace ntp::model {

// Offsets of one block's tensors in the flat buffers (params and grads alike),
// looked up by name; -1 for a tensor the family does not have (Llama has no
// biases and no LayerNorm shifts).
struct Model::BlockOffsets {
  std::int64_t ln1_w, ln1_b, qkv_w, qkv_b, proj_wt, proj_b, ln2_w, ln2_b, fc1_w, fc1_b, fc2_wt,
      fc2_b;
};

// Per-rank sizes. A head unit holds `group` query heads (GPT-2: 1) and their
// key and value heads; a neuron unit fc1 rows per neuron (GPT-2 1, SwiGLU 2).
struct Dims {
  std::int64_t C, heads, group, hd, qkv, attn, neurons, fc1, vocab_rows, vocab_valid;
};
Dims dims_of(const ParameterLayout& layout);

// Integer arrays where the kernels read them: the host vector itself on the
// CPU, a device copy (grow-only) on a GPU.
class KernelIds {
 public:
  const std::int64_t* put(tensor::Gpu* gpu, const std::vector<std::int64_t>& ids);

 private:
  struct Free {
    void operator()(std::int64_t* p) const { tensor::gpu_free(p); }
  };
  std::unique_ptr<std::int64_t, Free> device_;
  std::size_t capacity_ = 0;
};

// Everything forward keeps for backward, sized for one (batch, seq); per layer
// arrays are [L][...] over the stage's L layers. Llama leaves the *_mean
// buffers unused; a stage without the head leaves lnf .. ce_scratch empty.
struct Model::Activations {
  std::int64_t batch = 0, seq = 0, n = 0;  // n = batch * seq rows
  std::int64_t capacity = 0;               // the largest batch the buffers hold
  std::vector<std::int64_t> token_col, target_col;  // host
  const std::int64_t* token_ids = nullptr;  // token_col / target_col where the kernels read them
  const std::int64_t* target_ids = nullptr;
  KernelIds token_store, target_store;
  RowGroups groups;  // the batch's positions by embedding row, and where the kernels read them
  RowGroupsView group_ids;
  KernelIds group_store[4];
  tensor::Buffer encoded;                   // [n, C]: the embedding, or the stage's input
  tensor::Buffer ln1, ln1_mean, ln1_rstd;   // [L, n, C], [L, n]
  tensor::Buffer qkv;                       // [L, n, qkv] (Llama: after RoPE)
  tensor::Buffer att;                       // [L, B, heads, T, T]
  tensor::Buffer atty;                      // [L, n, heads hd]
  tensor::Buffer res2;                      // [L, n, C]
  tensor::Buffer ln2, ln2_mean, ln2_rstd;
  tensor::Buffer fch;                       // [L, n, fc1]: GELU input / SwiGLU (gate, up) pairs
  tensor::Buffer fch_gelu;                  // [L, n, neurons]: GELU / SwiGLU output
  tensor::Buffer res3;                      // [L, n, C]
  tensor::Buffer lnf, lnf_mean, lnf_rstd;
  tensor::Buffer logits;                    // [n, vocab rows]; after forward: dlogits
  tensor::Buffer losses;                    // [n]
  tensor::Buffer partial;                   // [n, C] row-parallel output before the all-reduce
  tensor::Buffer ce_scratch;                // [4 n]
  // backward scratch
  tensor::Buffer dres, dln;                 // [n, C]
  tensor::Buffer dqkv, datty, dgelu, dfch;
  // bf16 GEMMs only (else empty): the linear layers' inputs rounded by the
  // forward and read again by the dW GEMMs, laid out as their fp32 twins, and
  // dlogits rounded by the cross-entropy (tensor::KeptBf16).
  std::vector<tensor::Bf16> ln1_h, atty_h, ln2_h, fch_gelu_h, lnf_h, dlogits_h;

  struct Layer {
    float *ln1, *qkv, *att, *atty, *res2, *ln2, *fch, *fch_gelu, *res3;
  };
  Layer layer(const Dims& d, int l);
  // Layer l's slices of the bf16 roundings (null for fp32 GEMMs).
  struct Rounded {
    tensor::Bf16 *ln1, *atty, *ln2, *fch_gelu;
  };
  Rounded rounded(const Dims& d, int l);
};

// Layer l's slices of the per-layer buffers, in block order.
inline Model::Activations::Layer Model::Activations::layer(const Dims& d, int l) {
  return {ln1.data() + l * n * d.C,   qkv.data() + l * n * d.qkv, att.data() + l * batch * d.heads * seq * seq,
          atty.data() + l * n * d.attn, res2.data() + l * n * d.C, ln2.data() + l * n * d.C,
          fch.data() + l * n * d.fc1, fch_gelu.data() + l * n * d.neurons, res3.data() + l * n * d.C};
}

// A rounding's storage, or null where there is none (fp32 GEMMs).
inline tensor::Bf16* data_or_null(std::vector<tensor::Bf16>& h) { return h.empty() ? nullptr : h.data(); }

inline Model::Activations::Rounded Model::Activations::rounded(const Dims& d, int l) {
  const auto at = [&](std::vector<tensor::Bf16>& h, std::int64_t width) {
    tensor::Bf16* base = data_or_null(h);
    return base != nullptr ? base + l * n * width : nullptr;
  };
  return {at(ln1_h, d.C), at(atty_h, d.attn), at(ln2_h, d.C), at(fch_gelu_h, d.neurons)};
}

}  // namespace ntp::model
