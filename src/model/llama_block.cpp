// One Llama block on one TP rank, forward and backward side by side:
//
//   res2 = x + proj(attention(rope(qkv(rmsnorm1(x)))))
//   res3 = res2 + fc2(swiglu(fc1(rmsnorm2(res2))))
//
// qkv is column-parallel over the rank's KV groups (each group: its query
// heads, key head and value head), so RoPE and attention read only the rank's
// own rows; proj is row-parallel over the same groups, and its partial sums
// meet in one all-reduce. fc1 is column-parallel over SwiGLU neurons (gate and
// up rows together, so the product gate * up is local), fc2 row-parallel.
#include "model/model_state.h"
#include "tensor/attention.h"
#include "tensor/fill.h"
#include "tensor/matmul.h"
#include "tensor/residual.h"
#include "tensor/rmsnorm.h"
#include "tensor/rope.h"
#include "tensor/swiglu.h"

namespace ntp::model {

using tensor::WeightLayout;

void Model::forward_llama_block(int l, const float* residual) {
  Activations& a = *slots_[slot_];
  const Dims d = dims_of(*layout_);
  const BlockOffsets& o = blocks_[static_cast<std::size_t>(l)];
  const float* p = kernel_params();
  const std::int64_t n = a.n;
  const float eps = config().norm_eps;
  const tensor::AttentionShape shape{a.batch, a.seq, d.heads, d.hd, d.group};
  // [n, C], [n, groups (g+2) hd], [B, heads, T, T], [n, heads hd], [n, C], [n, C],
  // [n, neurons, 2], [n, neurons], [n, C]
  const auto [ln1, qkv, att, atty, res2, ln2, gate_up, act, res3] = a.layer(d, l);
  const Activations::Rounded h = a.rounded(d, l);

  tensor::rmsnorm_forward(ctx_, ln1, a.ln1_rstd.data() + l * n, residual, p + o.ln1_w, n, d.C, eps);
  tensor::matmul_forward(ctx_, qkv, ln1, p + o.qkv_w, nullptr, n, d.C, d.qkv, WeightLayout::kOutIn, {h.ln1});
  tensor::rope_forward(ctx_, qkv, shape, rope_);  // qkv keeps the rotated q and k for backward
  tensor::attention_forward(ctx_, atty, att, qkv, shape);
  tensor::matmul_forward(ctx_, a.partial.data(), atty, p + o.proj_wt, nullptr, n, d.attn, d.C,
                         WeightLayout::kInOut, {h.atty});
  all_reduce(a.partial.data(), n * d.C);
  tensor::residual_forward(ctx_, res2, residual, a.partial.data(), nullptr, n, d.C);

  tensor::rmsnorm_forward(ctx_, ln2, a.ln2_rstd.data() + l * n, res2, p + o.ln2_w, n, d.C, eps);
  tensor::matmul_forward(ctx_, gate_up, ln2, p + o.fc1_w, nullptr, n, d.C, d.fc1, WeightLayout::kOutIn, {h.ln2});
  tensor::swiglu_forward(ctx_, act, gate_up, n * d.neurons);
  tensor::matmul_forward(ctx_, a.partial.data(), act, p + o.fc2_wt, nullptr, n, d.neurons, d.C,
                         WeightLayout::kInOut, {h.fch_gelu});
  all_reduce(a.partial.data(), n * d.C);
  tensor::residual_forward(ctx_, res3, res2, a.partial.data(), nullptr, n, d.C);
}

void Model::backward_llama_block(int l, const float* residual) {
  Activations& a = *slots_[slot_];
  const Dims d = dims_of(*layout_);
  const BlockOffsets& o = blocks_[static_cast<std::size_t>(l)];
  const float* p = kernel_params();
  float* g = kernel_grads();
  const std::int64_t n = a.n;
  const tensor::AttentionShape shape{a.batch, a.seq, d.heads, d.hd, d.group};
  const auto [ln1, qkv, att, atty, res2, ln2, gate_up, act, res3] = a.layer(d, l);
  const Activations::Rounded h = a.rounded(d, l);
  float* dres = a.dres.data();  // gradient of the residual stream, flows through unchanged

  // FFN: res3 = res2 + fc2(swiglu(fc1(rmsnorm2(res2))))
  const tensor::BackwardInto into{tensor::Into::kOverwrite, weight_grads_};
  tensor::matmul_backward(ctx_, a.dgelu.data(), g + o.fc2_wt, nullptr, dres, act, p + o.fc2_wt, n,
                          d.neurons, d.C, WeightLayout::kInOut, into, {h.fch_gelu});
  tensor::zero(ctx_, a.dfch.data(), n * d.fc1);  // SwiGLU's backward adds into it
  tensor::swiglu_backward(ctx_, a.dfch.data(), gate_up, a.dgelu.data(), n * d.neurons);
  tensor::matmul_backward(ctx_, a.dln.data(), g + o.fc1_w, nullptr, a.dfch.data(), ln2, p + o.fc1_w,
                          n, d.C, d.fc1, WeightLayout::kOutIn, into, {h.ln2});
  all_reduce(a.dln.data(), n * d.C);
  tensor::rmsnorm_backward(ctx_, dres, g + o.ln2_w, a.dln.data(), res2, p + o.ln2_w,
                           a.ln2_rstd.data() + l * n, n, d.C);

  // Attention: res2 = residual + proj(attention(rope(qkv(rmsnorm1(residual)))))
  tensor::matmul_backward(ctx_, a.datty.data(), g + o.proj_wt, nullptr, dres, atty, p + o.proj_wt,
                          n, d.attn, d.C, WeightLayout::kInOut, into, {h.atty});
  tensor::zero(ctx_, a.dqkv.data(), n * d.qkv);  // the attention adds dQ, dK, dV into it
  tensor::attention_backward(ctx_, a.dqkv.data(), a.datty.data(), qkv, att, shape);
  tensor::rope_backward(ctx_, a.dqkv.data(), shape, rope_);
  tensor::matmul_backward(ctx_, a.dln.data(), g + o.qkv_w, nullptr, a.dqkv.data(), ln1, p + o.qkv_w,
                          n, d.C, d.qkv, WeightLayout::kOutIn, into, {h.ln1});
  all_reduce(a.dln.data(), n * d.C);
  tensor::rmsnorm_backward(ctx_, dres, g + o.ln1_w, a.dln.data(), residual, p + o.ln1_w,
                           a.ln1_rstd.data() + l * n, n, d.C);
}

}  // namespace ntp::model
