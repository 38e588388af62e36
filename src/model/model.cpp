#include "model/model.h"

#include <algorithm>
#include <chrono>
#include <stdexcept>
#include <utility>

#include "model/init.h"
#include "model/model_state.h"
#include "model/vocab_parallel.h"
#include "tensor/adamw.h"
#include "tensor/attention.h"
#include "tensor/fill.h"
#include "tensor/gelu.h"
#include "tensor/gpu.h"
#include "tensor/layernorm.h"
#include "tensor/matmul.h"
#include "tensor/residual.h"
#include "tensor/rmsnorm.h"

namespace ntp::model {

using tensor::Buffer;
using tensor::Into;
using tensor::WeightLayout;

Dims dims_of(const ParameterLayout& layout) {
  const GptConfig& c = layout.config();
  const Shard& s = layout.shard();
  const std::int64_t units = s.heads.size(), g = c.queries_per_group(), hd = c.head_dim();
  const std::int64_t neurons = s.neurons.size();
  return {c.d_model,        units * g,      g,
          hd,               units * (g + 2) * hd, units * g * hd,
          neurons,          c.llama() ? 2 * neurons : neurons,
          s.vocab.size(),   s.vocab.intersect(layout::IntervalSet::range(0, c.vocab)).size()};
}

const std::int64_t* KernelIds::put(tensor::Gpu* gpu, const std::vector<std::int64_t>& ids) {
  if (gpu == nullptr) return ids.data();
  if (ids.size() > capacity_) {
    device_.reset(static_cast<std::int64_t*>(gpu->alloc(ids.size() * sizeof(std::int64_t))));
    capacity_ = ids.size();
  }
  gpu->upload(device_.get(), ids.data(), ids.size() * sizeof(std::int64_t));
  return device_.get();
}

Model::Model(const GptConfig& config, const Shard& shard, tensor::Context& ctx, comm::Group* tp)
    : Model(config, shard, ctx, tp, StageRange::whole(config)) {}

Model::Model(const GptConfig& config, const Shard& shard, tensor::Context& ctx, comm::Group* tp,
             const StageRange& stage)
    : ctx_(ctx), gpu_(ctx.gpu()), tp_(tp) {
  if (tp_ == nullptr && !(shard == Shard::full(config)))
    throw std::invalid_argument("model: a shard smaller than the full model needs a TP group");
  layout_ = std::make_unique<ParameterLayout>(config, shard, stage);
  if (gpu_ != nullptr && !stage.is_whole(config))
    throw std::invalid_argument("model: a pipeline stage (" + to_string(stage) + " of " +
                                std::to_string(config.layers) + ") runs on the CPU only, not on model.device = cuda");
  adopt(shard, Buffer(static_cast<std::size_t>(layout_->size())));
}

Model::~Model() { ctx_.clear_rounded_copy(params_.data()); }

void Model::adopt(const Shard& next, Buffer values) {
  auto layout = std::make_unique<ParameterLayout>(layout_->config(), next, layout_->stage());
  if (values.size() != static_cast<std::size_t>(layout->size()))
    throw std::invalid_argument("model: adopted parameter buffer has " +
                                std::to_string(values.size()) + " elements, layout needs " +
                                std::to_string(layout->size()));
  layout_ = std::move(layout);
  ctx_.clear_rounded_copy(params_.data());
  params_ = std::move(values);
  grads_ = Buffer(params_.size());
  grads_pending_zero_ = false;
  if (gpu_ != nullptr) {
    device_params_ = Buffer(params_.size(), gpu_);
    device_grads_ = Buffer(params_.size(), gpu_);
  }
  params_changed_ = true;
  rounded_stale_ = true;
  device_grads_pending_zero_ = false;
  blocks_.clear();
  for (int l = stage().first_layer; l < stage().end_layer; ++l) {  // indexed from the stage's first
    const std::string prefix = "h" + std::to_string(l) + ".";
    const auto at = [&](const char* name) {
      const TensorSpec* t = layout_->find(prefix + name);
      return t != nullptr ? t->offset : -1;
    };
    blocks_.push_back({at("ln1_w"), at("ln1_b"), at("qkv_w"), at("qkv_b"), at("proj_wt"),
                       at("proj_b"), at("ln2_w"), at("ln2_b"), at("fc1_w"), at("fc1_b"),
                       at("fc2_wt"), at("fc2_b")});
  }
  if (layout_->config().llama()) {
    const GptConfig& c = layout_->config();
    rope_ = tensor::rope_table(c.max_seq, c.head_dim(), c.rope_theta);
  }
  for (auto& slot : slots_) slot.reset();  // sizes depend on the shard
  if (slots_.empty()) slots_.resize(1);
  forwarded_.assign(slots_.size(), false);
}

std::span<float> Model::param(const std::string& name) {
  const TensorSpec& t = (*layout_)[name];
  return params().subspan(static_cast<std::size_t>(t.offset), static_cast<std::size_t>(t.count));
}

std::span<float> Model::grad(const std::string& name) {
  const TensorSpec& t = (*layout_)[name];
  return grads().subspan(static_cast<std::size_t>(t.offset), static_cast<std::size_t>(t.count));
}

void Model::init(std::uint64_t seed) { init_parameters(*layout_, params(), seed); }

void Model::load_full(std::span<const float> full_params) {
  const ParameterLayout full(config(), Shard::full(config()));
  scatter_from_full(full, full_params, *layout_, params());
}

std::vector<float> Model::gather_full() {
  require_whole("gather_full");
  const ParameterLayout full(config(), Shard::full(config()));
  std::vector<float> values(static_cast<std::size_t>(full.size()), 0.0f);
  // Each element has exactly one non-zero contributor, so the sum is exact.
  gather_into_full(*layout_, params_.span(), full, values, counts_replicated());
  if (tp_ != nullptr) tp_->all_reduce(values.data(), values.size());
  return values;
}

void Model::zero_grad() {
  grads_pending_zero_ = true;
  device_grads_pending_zero_ = true;
}

std::span<float> Model::params() {
  params_changed_ = true;
  rounded_stale_ = true;
  ctx_.clear_rounded_copy(params_.data());  // no GEMM may read the copy until it is rounded again
  return params_.span();
}

Model::ParamsForUpdate Model::params_for_update() {
  if (rounded_stale_ || rounded_params_.size() != params_.size()) return {params(), {}};
  params_changed_ = true;
  return {params_.span(), rounded_params_};
}

void Model::round_params() {
  if (gpu_ != nullptr || ctx_.precision() != tensor::Precision::kBf16) return;
  if (rounded_stale_) {
    rounded_params_.resize(params_.size());
    tensor::round_to_bf16(ctx_, params_.data(), static_cast<std::int64_t>(params_.size()), rounded_params_.data());
    rounded_stale_ = false;
  }
  ctx_.set_rounded_copy(params_.data(), static_cast<std::int64_t>(params_.size()), rounded_params_.data());
}

void Model::upload_params() {
  if (gpu_ == nullptr || !params_changed_) return;
  gpu_->upload(device_params_.data(), params_.data(), params_.size() * sizeof(float));
  params_changed_ = false;
}

void Model::download_grads(std::size_t first, std::size_t last) {
  if (gpu_ == nullptr || first >= last) return;
  const auto& tensors = layout_->tensors();
  const std::int64_t begin = tensors[first].offset, end = tensors[last - 1].offset + tensors[last - 1].count;
  tensor::copy_to_host(ctx_, grads_.data() + begin, device_grads_.data() + begin, end - begin);
}

std::span<float> Model::settled_grads() const {
  if (std::exchange(grads_pending_zero_, false)) grads_.zero();
  return grads_.span();
}

// Every gradient tensor that backward() accumulates into rather than writes
// with a GEMM: the biases, the norms, wpe (a few MB for GPT-2), Llama's
// untied input embedding, and wte on a stage without the LM head.
void Model::zero_accumulated_grads() {
  std::vector<std::int64_t> gemm_written;
  if (stage().has_head(config())) gemm_written.push_back(head_offset());
  for (const BlockOffsets& o : blocks_) gemm_written.insert(gemm_written.end(), {o.qkv_w, o.proj_wt, o.fc1_w, o.fc2_wt});
  for (const TensorSpec& t : layout_->tensors()) {
    if (std::find(gemm_written.begin(), gemm_written.end(), t.offset) != gemm_written.end()) continue;
    tensor::zero(ctx_, kernel_grads() + t.offset, t.count);
  }
}

std::int64_t Model::head_offset() const {
  return (*layout_)[config().llama() ? "lm_head" : "wte"].offset;
}

void Model::require_whole(const char* call) const {
  if (!stage().is_whole(config()))
    throw std::logic_error(std::string("Model::") + call + " needs the whole model; this one is a pipeline stage (" +
                           to_string(stage()) + " of " + std::to_string(config().layers) +
                           "): use forward_stage / backward_stage");
}

const float* Model::stage_output() const {
  const Activations& a = *slots_[slot_];
  return a.res3.data() + (stage().layers() - 1) * a.n * config().d_model;
}

namespace {

// The activations at a stage boundary: none where the stage starts from its
// embedding (forward) or its loss (backward), else the residual stream [n, C].
void check_boundary(const char* call, const char* what, std::size_t got, std::int64_t want,
                    const ParameterLayout& layout) {
  if (got == static_cast<std::size_t>(want)) return;
  throw std::invalid_argument(
      std::string("Model::") + call + ": " + what + " has " + std::to_string(got) + " floats; " +
      to_string(layout.stage()) + " of " + std::to_string(layout.config().layers) + " takes " +
      std::to_string(want) + (want == 0 ? " (it starts from its own embedding or loss)" : " (batch * seq * d_model)"));
}

}  // namespace

void Model::all_reduce(float* data, std::int64_t count, comm::ReduceOp op) {
  if (tp_ == nullptr) return;
  const auto start = std::chrono::steady_clock::now();
  if (gpu_ == nullptr) {
    tp_->all_reduce(data, static_cast<std::size_t>(count), op);
  } else {
    staging_.resize(static_cast<std::size_t>(count));
    tensor::copy_to_host(ctx_, staging_.data(), data, count);
    tp_->all_reduce(staging_.data(), staging_.size(), op);
    tensor::copy_from_host(ctx_, data, staging_.data(), count);
  }
  tp_reduce_s_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

KernelAllReduce Model::group_reduce() {
  if (tp_ == nullptr || tp_->size() == 1) return {};
  return [this](float* data, std::size_t count, comm::ReduceOp op) {
    all_reduce(data, static_cast<std::int64_t>(count), op);
  };
}

void Model::select_slot(int slot) {
  if (slot < 0 || slot >= kMaxSlots)
    throw std::invalid_argument("Model::select_slot: slot " + std::to_string(slot) + " outside [0, " +
                                std::to_string(kMaxSlots) + ")");
  if (static_cast<std::size_t>(slot) >= slots_.size()) {
    slots_.resize(static_cast<std::size_t>(slot) + 1);
    forwarded_.resize(slots_.size(), false);
  }
  slot_ = slot;
}

void Model::ensure_activations(std::int64_t batch, std::int64_t seq) {
  // Per-layer arrays are indexed by the current n, so buffers sized for a larger
  // micro-batch serve a smaller one (a step's remainder micro-batch) as they are.
  if (slots_[slot_] && slots_[slot_]->seq == seq && batch <= slots_[slot_]->capacity) {
    slots_[slot_]->batch = batch;
    slots_[slot_]->n = batch * seq;
    return;
  }
  const Dims d = dims_of(*layout_);
  const std::int64_t L = stage().layers();
  const std::int64_t n = batch * seq;
  const std::int64_t head = stage().has_head(config()) ? 1 : 0;  // the last stage's buffers
  const auto sz = [this](std::int64_t count) { return Buffer(static_cast<std::size_t>(count), gpu_); };
  auto a = std::make_unique<Activations>();
  a->batch = batch;
  a->capacity = batch;
  a->seq = seq;
  a->n = n;
  a->encoded = sz(n * d.C);
  a->ln1 = sz(L * n * d.C);
  a->ln1_mean = sz(L * n);
  a->ln1_rstd = sz(L * n);
  a->qkv = sz(L * n * d.qkv);
  a->att = sz(L * batch * d.heads * seq * seq);
  a->atty = sz(L * n * d.attn);
  a->res2 = sz(L * n * d.C);
  a->ln2 = sz(L * n * d.C);
  a->ln2_mean = sz(L * n);
  a->ln2_rstd = sz(L * n);
  a->fch = sz(L * n * d.fc1);
  a->fch_gelu = sz(L * n * d.neurons);
  a->res3 = sz(L * n * d.C);
  a->lnf = sz(head * n * d.C);
  a->lnf_mean = sz(head * n);
  a->lnf_rstd = sz(head * n);
  a->logits = sz(head * n * d.vocab_rows);
  a->losses = sz(head * n);
  a->partial = sz(n * d.C);
  a->ce_scratch = sz(head * 4 * n);
  a->dres = sz(n * d.C);
  a->dln = sz(n * d.C);
  a->dqkv = sz(n * d.qkv);
  a->datty = sz(n * d.attn);
  a->dgelu = sz(n * d.neurons);
  a->dfch = sz(config().llama() ? n * d.fc1 : 0);  // GPT-2's GELU backward works in place
  if (gpu_ == nullptr && ctx_.precision() == tensor::Precision::kBf16 && keep_rounded_) {
    const auto h = [](std::int64_t count) { return std::vector<tensor::Bf16>(static_cast<std::size_t>(count)); };
    a->ln1_h = h(L * n * d.C);
    a->atty_h = h(L * n * d.attn);
    a->ln2_h = h(L * n * d.C);
    a->fch_gelu_h = h(L * n * d.neurons);
    a->lnf_h = h(head * n * d.C);
    a->dlogits_h = h(head * n * d.vocab_rows);
  }
  slots_[slot_] = std::move(a);
}

LossStats Model::forward(const Batch& batch) {
  require_whole("forward");
  return forward_stage(batch).loss;
}

StageForward Model::forward_stage(const Batch& batch, std::span<const float> input) {
  check_batch(batch);
  forwarded_[slot_] = false;  // the activations are about to change
  ensure_activations(batch.batch, batch.seq);
  check_boundary("forward_stage", "input", input.size(), stage().has_embedding() ? 0 : slots_[slot_]->n * config().d_model,
                 *layout_);
  Activations& a = *slots_[slot_];
  if (stage().has_embedding()) {
    a.token_col = local_columns(layout_->shard().vocab, batch.inputs, a.n, config().vocab, "inputs");
    a.token_ids = a.token_store.put(gpu_, a.token_col);
  }
  if (stage().has_head(config())) {
    a.target_col = local_columns(layout_->shard().vocab, batch.targets, a.n, config().vocab, "targets");
    a.target_ids = a.target_store.put(gpu_, a.target_col);
  }
  upload_params();
  round_params();

  forward_embedding(batch, input);
  const std::int64_t residual_size = a.n * config().d_model;
  for (int l = 0; l < stage().layers(); ++l) {
    const float* residual = l == 0 ? a.encoded.data() : a.res3.data() + (l - 1) * residual_size;
    if (config().llama()) forward_llama_block(l, residual);
    else forward_block(l, residual);
  }
  StageForward result;
  if (stage().has_head(config())) result.loss = forward_head();
  else result.output = {stage_output(), static_cast<std::size_t>(residual_size)};
  forwarded_[slot_] = true;
  return result;
}

// The ids the stage reads must be there: inputs where it embeds them,
// targets where it computes the loss.
void Model::check_batch(const Batch& batch) const {
  const GptConfig& c = config();
  if (stage().has_embedding() && batch.inputs == nullptr)
    throw std::invalid_argument("batch: inputs are required (the stage holds the embedding)");
  if (stage().has_head(c) && batch.targets == nullptr)
    throw std::invalid_argument("batch: targets are required (the stage holds the loss)");
  if (batch.batch <= 0 || batch.seq <= 0 || batch.seq > c.max_seq)
    throw std::invalid_argument("batch: seq " + std::to_string(batch.seq) + " outside [1," +
                                std::to_string(c.max_seq) + "] or batch " +
                                std::to_string(batch.batch) + " <= 0");
}

// encoded [n, C]: the token (and position) embedding on the first stage, a
// copy of the previous stage's output on the others.
void Model::forward_embedding(const Batch& batch, std::span<const float> input) {
  Activations& a = *slots_[slot_];
  const Dims d = dims_of(*layout_);
  if (!stage().has_embedding()) {
    tensor::copy_from_host(ctx_, a.encoded.data(), input.data(), a.n * d.C);
    return;
  }
  const float* p = kernel_params();
  const TensorSpec* wpe = layout_->find("wpe");  // Llama: none (RoPE in the blocks)
  embedding_forward(ctx_, a.encoded.data(), a.token_ids, a.n, p + (*layout_)["wte"].offset,
                    wpe != nullptr ? p + wpe->offset : nullptr, batch.seq, d.C, group_reduce());
}

// The final norm, the LM head and the fused softmax / cross-entropy, whose
// gradient replaces the logits.
LossStats Model::forward_head() {
  Activations& a = *slots_[slot_];
  const GptConfig& c = config();
  const Dims d = dims_of(*layout_);
  const std::int64_t n = a.n;
  const float* p = kernel_params();
  const float* last = stage_output();
  if (c.llama()) {
    tensor::rmsnorm_forward(ctx_, a.lnf.data(), a.lnf_rstd.data(), last,
                            p + (*layout_)["lnf_w"].offset, n, d.C, c.norm_eps);
  } else {
    tensor::layernorm_forward(ctx_, a.lnf.data(), a.lnf_mean.data(), a.lnf_rstd.data(), last,
                              p + (*layout_)["lnf_w"].offset, p + (*layout_)["lnf_b"].offset, n, d.C);
  }
  // LM head (GPT-2: wte, tied; Llama: lm_head): the rank's vocabulary rows, column-parallel.
  tensor::matmul_forward(ctx_, a.logits.data(), a.lnf.data(), p + head_offset(), nullptr, n,
                         d.C, d.vocab_rows, WeightLayout::kOutIn, {data_or_null(a.lnf_h)});
  const float scale = loss_scale_ != 0.0f ? loss_scale_ : 1.0f / static_cast<float>(n);
  vocab_parallel_cross_entropy(ctx_, a.losses.data(), a.logits.data(), a.target_col, a.target_ids,
                               {n, d.vocab_rows, d.vocab_valid}, scale, a.ce_scratch.data(), group_reduce(),
                               data_or_null(a.dlogits_h));
  std::vector<float> losses(static_cast<std::size_t>(n));
  tensor::copy_to_host(ctx_, losses.data(), a.losses.data(), n);
  LossStats stats;
  stats.tokens = n;
  for (float loss : losses) stats.sum += loss;
  return stats;
}

void Model::forward_block(int l, const float* residual) {
  Activations& a = *slots_[slot_];
  const Dims d = dims_of(*layout_);
  const BlockOffsets& o = blocks_[static_cast<std::size_t>(l)];
  const float* p = kernel_params();
  const std::int64_t n = a.n;
  const auto [ln1, qkv, att, atty, res2, ln2, fch, fch_gelu, res3] = a.layer(d, l);
  const Activations::Rounded h = a.rounded(d, l);

  tensor::layernorm_forward(ctx_, ln1, a.ln1_mean.data() + l * n, a.ln1_rstd.data() + l * n,
                            residual, p + o.ln1_w, p + o.ln1_b, n, d.C);
  tensor::matmul_forward(ctx_, qkv, ln1, p + o.qkv_w, p + o.qkv_b, n, d.C, d.qkv, WeightLayout::kOutIn,
                         {h.ln1});
  tensor::attention_forward(ctx_, atty, att, qkv, {a.batch, a.seq, d.heads, d.hd});
  tensor::matmul_forward(ctx_, a.partial.data(), atty, p + o.proj_wt, nullptr, n, d.attn, d.C,
                         WeightLayout::kInOut, {h.atty});
  all_reduce(a.partial.data(), n * d.C);
  tensor::residual_forward(ctx_, res2, residual, a.partial.data(), p + o.proj_b, n, d.C);

  tensor::layernorm_forward(ctx_, ln2, a.ln2_mean.data() + l * n, a.ln2_rstd.data() + l * n, res2,
                            p + o.ln2_w, p + o.ln2_b, n, d.C);
  tensor::matmul_forward(ctx_, fch, ln2, p + o.fc1_w, p + o.fc1_b, n, d.C, d.neurons,
                         WeightLayout::kOutIn, {h.ln2});
  tensor::gelu_forward(ctx_, fch_gelu, fch, n * d.neurons);
  tensor::matmul_forward(ctx_, a.partial.data(), fch_gelu, p + o.fc2_wt, nullptr, n, d.neurons, d.C,
                         WeightLayout::kInOut, {h.fch_gelu});
  all_reduce(a.partial.data(), n * d.C);
  tensor::residual_forward(ctx_, res3, res2, a.partial.data(), p + o.fc2_b, n, d.C);
}

void Model::backward(const BackwardHooks& hooks) {
  require_whole("backward");
  backward_stage({}, hooks);
}

std::span<const float> Model::backward_stage(std::span<const float> doutput, const BackwardHooks& hooks) {
  if (!forwarded_[slot_]) throw std::logic_error("model: backward() without a preceding forward() in activation slot " +
                                                     std::to_string(slot_));
  const GptConfig& c = config();
  // The split applies to the tied embedding only (GPT-2): an untied one has
  // no LM-head part to sync early, and a stage without both has no split to make.
  const bool split_wte = static_cast<bool>(hooks.embedding_rows);
  if (split_wte && c.llama()) throw std::logic_error("Model::backward: the embedding split needs a tied embedding");
  if (split_wte && !stage().is_whole(c))
    throw std::logic_error("Model::backward: the embedding split needs the embedding and the LM head in one stage, not " +
                           to_string(stage()) + " of " + std::to_string(c.layers));
  Activations& a = *slots_[slot_];
  const std::int64_t residual_size = a.n * c.d_model;
  check_boundary("backward_stage", "doutput", doutput.size(), stage().has_head(c) ? 0 : residual_size, *layout_);
  forwarded_[slot_] = false;  // dlogits are consumed
  round_params();  // a no-op after this step's forward, unless params() was taken since
  // On a GPU every host gradient is overwritten by its download below.
  if (gpu_ != nullptr) grads_pending_zero_ = false;
  const bool pending_zero = gpu_ != nullptr ? std::exchange(device_grads_pending_zero_, false)
                                            : std::exchange(grads_pending_zero_, false);
  if (pending_zero) {
    zero_accumulated_grads();
    weight_grads_ = Into::kOverwrite;
  } else {
    weight_grads_ = Into::kAdd;
  }

  if (stage().has_head(c)) backward_head(hooks, split_wte);
  else tensor::copy_from_host(ctx_, a.dres.data(), doutput.data(), residual_size);
  for (int l = stage().layers() - 1; l >= 0; --l) {
    const float* residual = l == 0 ? a.encoded.data() : a.res3.data() + (l - 1) * residual_size;
    if (c.llama()) backward_llama_block(l, residual);
    else backward_block(l, residual);
    const auto [first, end] = layout_->layer_range(stage().first_layer + l);
    report_ready(hooks, first, end);
  }
  if (!stage().has_embedding()) return {a.dres.data(), static_cast<std::size_t>(residual_size)};
  backward_embedding(hooks, split_wte);
  return {};
}

void Model::report_ready(const BackwardHooks& hooks, std::size_t first, std::size_t last) {
  download_grads(first, last);
  if (hooks.grads_ready) hooks.grads_ready(first, last);
}

// From the loss to dres, the gradient of the stage's output.
void Model::backward_head(const BackwardHooks& hooks, bool split_wte) {
  Activations& a = *slots_[slot_];
  const GptConfig& c = config();
  const Dims d = dims_of(*layout_);
  const std::int64_t n = a.n;
  const float* p = kernel_params();
  float* g = kernel_grads();
  const auto& lay = *layout_;
  // LM head: the input gradient is partial per rank, hence the all-reduce.
  tensor::matmul_backward(ctx_, a.dln.data(), g + head_offset(), nullptr, a.logits.data(),
                          a.lnf.data(), p + head_offset(), n, d.C, d.vocab_rows,
                          WeightLayout::kOutIn, {Into::kOverwrite, weight_grads_},
                          {data_or_null(a.lnf_h), data_or_null(a.dlogits_h)});
  all_reduce(a.dln.data(), n * d.C);
  a.dres.zero();
  const float* last = stage_output();
  if (c.llama()) {
    tensor::rmsnorm_backward(ctx_, a.dres.data(), g + lay["lnf_w"].offset, a.dln.data(), last,
                             p + lay["lnf_w"].offset, a.lnf_rstd.data(), n, d.C);
  } else {
    tensor::layernorm_backward(ctx_, a.dres.data(), g + lay["lnf_w"].offset, g + lay["lnf_b"].offset,
                               a.dln.data(), last, p + lay["lnf_w"].offset, a.lnf_mean.data(),
                               a.lnf_rstd.data(), n, d.C);
  }
  // The tied wte is final here when the embedding's part goes elsewhere: to
  // the split's hook, or (a stage without the embedding) to the first stage.
  if (!c.llama() && (split_wte || !stage().has_embedding()))
    report_ready(hooks, lay.index_of("wte"), lay.index_of("wte") + 1);
  report_ready(hooks, lay.index_of("lnf_w"), lay.tensors().size());
}

// From dres, the gradient of the embedding's output, to wte (and wpe).
void Model::backward_embedding(const BackwardHooks& hooks, bool split_wte) {
  Activations& a = *slots_[slot_];
  const Dims d = dims_of(*layout_);
  const std::int64_t n = a.n;
  float* g = kernel_grads();
  const auto& lay = *layout_;
  a.groups = row_groups(a.token_col);
  a.group_ids = {a.group_store[0].put(gpu_, a.groups.row), a.group_store[1].put(gpu_, a.groups.start),
                 a.group_store[2].put(gpu_, a.groups.positions), a.group_store[3].put(gpu_, a.groups.slot),
                 a.groups.groups()};
  if (split_wte) {
    // dln is free by now: it holds the embedding rows' sums on their way to the host.
    embedding_backward_rows(ctx_, embedding_rows_, g + lay["wpe"].offset, a.groups, a.group_ids, a.dln.data(),
                            a.dres.data(), n, a.seq, d.C);
    report_ready(hooks, lay.index_of("wpe"), lay.index_of("wpe") + 1);
    hooks.embedding_rows(embedding_rows_);
    return;
  }
  const TensorSpec* wpe = lay.find("wpe");
  embedding_backward(ctx_, g + lay["wte"].offset, wpe != nullptr ? g + wpe->offset : nullptr, a.group_ids,
                     a.dres.data(), n, a.seq, d.C);
  report_ready(hooks, lay.index_of("wte"), lay.index_of(wpe != nullptr ? "wpe" : "wte") + 1);
}

void Model::backward_block(int l, const float* residual) {
  Activations& a = *slots_[slot_];
  const Dims d = dims_of(*layout_);
  const BlockOffsets& o = blocks_[static_cast<std::size_t>(l)];
  const float* p = kernel_params();
  float* g = kernel_grads();
  const std::int64_t n = a.n;
  const auto [ln1, qkv, att, atty, res2, ln2, fch, fch_gelu, res3] = a.layer(d, l);
  const Activations::Rounded h = a.rounded(d, l);
  float* dres = a.dres.data();  // gradient of the residual stream, flows through unchanged

  // MLP: res3 = res2 + fc2(gelu(fc1(ln2(res2)))) + fc2_b
  const tensor::BackwardInto into{Into::kOverwrite, weight_grads_};
  tensor::matmul_backward(ctx_, a.dgelu.data(), g + o.fc2_wt, g + o.fc2_b, dres, fch_gelu, p + o.fc2_wt,
                          n, d.neurons, d.C, WeightLayout::kInOut, into, {h.fch_gelu});
  tensor::gelu_backward(ctx_, a.dgelu.data(), fch, n * d.neurons);  // in place: now d(fch)
  tensor::matmul_backward(ctx_, a.dln.data(), g + o.fc1_w, g + o.fc1_b, a.dgelu.data(), ln2, p + o.fc1_w,
                          n, d.C, d.neurons, WeightLayout::kOutIn, into, {h.ln2});
  all_reduce(a.dln.data(), n * d.C);
  tensor::layernorm_backward(ctx_, dres, g + o.ln2_w, g + o.ln2_b, a.dln.data(), res2, p + o.ln2_w,
                             a.ln2_mean.data() + l * n, a.ln2_rstd.data() + l * n, n, d.C);

  // Attention: res2 = residual + proj(attn(qkv(ln1(residual)))) + proj_b
  tensor::matmul_backward(ctx_, a.datty.data(), g + o.proj_wt, g + o.proj_b, dres, atty, p + o.proj_wt,
                          n, d.attn, d.C, WeightLayout::kInOut, into, {h.atty});
  tensor::zero(ctx_, a.dqkv.data(), n * d.qkv);  // the attention adds dQ, dK, dV into it
  tensor::attention_backward(ctx_, a.dqkv.data(), a.datty.data(), qkv, att,
                             {a.batch, a.seq, d.heads, d.hd});
  tensor::matmul_backward(ctx_, a.dln.data(), g + o.qkv_w, g + o.qkv_b, a.dqkv.data(), ln1, p + o.qkv_w,
                          n, d.C, d.qkv, WeightLayout::kOutIn, into, {h.ln1});
  all_reduce(a.dln.data(), n * d.C);
  tensor::layernorm_backward(ctx_, dres, g + o.ln1_w, g + o.ln1_b, a.dln.data(), residual,
                             p + o.ln1_w, a.ln1_mean.data() + l * n, a.ln1_rstd.data() + l * n, n,
                             d.C);
}

double Model::local_grad_sq_norm() {
  double total = 0.0;
  for (const TensorSpec& t : layout_->tensors()) {
    if (t.kind == UnitKind::kReplicated && !counts_replicated()) continue;
    if (layout_->is_tied_copy(t)) continue;  // counted on the first stage
    total += tensor::sum_squares(ctx_.host(), grads_.data() + t.offset, t.count);
  }
  return total;
}

std::vector<float> Model::next_token_probs(std::span<const std::int32_t> tokens) {
  require_whole("next_token_probs");
  if (tp_ != nullptr) throw std::invalid_argument("model: next_token_probs needs a single-rank model");
  // The fused cross-entropy leaves softmax - onehot(target) (times the loss
  // scale) in place of the logits: with scale 1 and target 0 the last row
  // is the distribution, less 1 at token 0.
  const std::vector<std::int32_t> targets(tokens.size(), 0);
  const float scale = loss_scale_;
  loss_scale_ = 1.0f;
  forward({tokens.data(), targets.data(), 1, static_cast<std::int64_t>(tokens.size())});
  loss_scale_ = scale;
  forwarded_[slot_] = false;
  const Dims d = dims_of(*layout_);
  const float* last = slots_[slot_]->logits.data() + (static_cast<std::int64_t>(tokens.size()) - 1) * d.vocab_rows;
  std::vector<float> probs(static_cast<std::size_t>(config().vocab));
  tensor::copy_to_host(ctx_, probs.data(), last, config().vocab);
  probs[0] += 1.0f;
  return probs;
}

}  // namespace ntp::model
