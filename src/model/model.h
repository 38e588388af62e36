#pragma once
// One TP rank of a GPT-2 model (pre-LN, GELU tanh, learned positions, tied
// embedding / LM head) or of a Llama model (pre-RMSNorm, RoPE, SwiGLU,
// grouped-query attention, untied embeddings, no biases), fp32, Megatron
// tensor parallelism over arbitrary unit sets: QKV column-parallel over heads
// (Llama: KV groups), attention projection row-parallel, fc1 column-parallel
// over neurons (Llama: gate and up rows together), fc2 row-parallel,
// vocabulary-parallel embedding, LM head and cross-entropy. With tp == nullptr the model is a single rank
// and must hold every unit.
//
// On a GPU context (model.device = "cuda") the forward and backward run on
// that GPU: the activations and a device copy of the parameters and
// gradients live in its memory. params() and grads() stay host memory, the
// master copies that the optimizer, the gradient sync, checkpoints and
// recovery use: the parameters go up before a forward when params() was taken
// for writing since the last one, and each gradient tensor comes down as
// backward reports it ready. The TP all-reduces of activations are staged
// through the host (the group is Gloo's).
//
//   Model m(config, shard, ctx, tp_group);
//   m.init(seed);                 // or load values into m.params()
//   m.set_loss_scale(1.0f / global_tokens);
//   m.zero_grad();
//   LossStats loss = m.forward(batch);
//   m.backward();                 // gradients accumulate into m.grads()
//
// A pipeline stage (stage.h) holds only its layers [first_layer, end_layer),
// plus the embedding on the first stage and the final norm, LM head and loss
// on the last (GPT-2's last stage holds its own copy of the tied wte; the
// trainer sums the two copies' gradients). Its activations are sized for its
// own layers. It runs through forward_stage / backward_stage, which pass the
// residual stream [batch * seq, C] and its gradient across the stage
// boundaries (host memory):
//
//   Model s(config, shard, ctx, tp_group, stage);
//   StageForward f = s.forward_stage(batch, input);    // input: the previous stage's output
//   ... f.output to the next stage, or f.loss on the last ...
//   std::span<const float> dinput = s.backward_stage(doutput);  // doutput: from the next stage
//
// A stage that is not the whole model runs on the CPU only: on a GPU context
// the constructor throws.
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "comm/group.h"
#include "model/config.h"
#include "model/parameters.h"
#include "model/shard.h"
#include "model/stage.h"
#include "model/vocab_parallel.h"
#include "tensor/buffer.h"
#include "tensor/context.h"
#include "tensor/matmul.h"
#include "tensor/rope.h"

namespace ntp::model {

struct Batch {
  const std::int32_t* inputs = nullptr;   // [batch, seq] token ids
  const std::int32_t* targets = nullptr;  // [batch, seq] next-token ids
  std::int64_t batch = 0;
  std::int64_t seq = 0;
};

struct LossStats {
  double sum = 0.0;         // sum of per-token losses (natural log)
  std::int64_t tokens = 0;
  double mean() const { return tokens > 0 ? sum / static_cast<double>(tokens) : 0.0; }
};

struct BackwardHooks {
  // Called when the gradients of tensors [first, last) (layout indices) are
  // final for this backward pass, in reverse layer order; the trainer can
  // start their gradient sync while the rest of the backward runs.
  std::function<void(std::size_t first, std::size_t last)> grads_ready;
  // When set, the tied wte gradient is split: its LM-head part (with what
  // earlier backward passes added) is reported ready right after the LM head,
  // and this backward's embedding scatter goes to this hook instead of into
  // grads(); the receiver adds those rows where wte's synced gradient lies.
  // The rows stay valid until the next backward().
  std::function<void(const EmbeddingRows& rows)> embedding_rows;
};

// What forward_stage gives back: the loss on the last stage, the stage's
// output on the others.
struct StageForward {
  LossStats loss;  // last stage only
  // Other stages: the residual stream after the stage's last layer,
  // [batch * seq, C], the next stage's input; valid until the next forward.
  std::span<const float> output;
};

class Model {
 public:
  // The whole model.
  Model(const GptConfig& config, const Shard& shard, tensor::Context& ctx,
        comm::Group* tp = nullptr);
  // One pipeline stage. Throws std::invalid_argument for a stage outside the
  // model, or for a partial stage on a GPU context.
  Model(const GptConfig& config, const Shard& shard, tensor::Context& ctx, comm::Group* tp,
        const StageRange& stage);
  ~Model();
  Model(const Model&) = delete;
  Model& operator=(const Model&) = delete;

  const GptConfig& config() const { return layout_->config(); }
  const ParameterLayout& layout() const { return *layout_; }
  const StageRange& stage() const { return layout_->stage(); }
  comm::Group* tp_group() const { return tp_; }
  tensor::Context& context() { return ctx_; }

  // For writing: the next forward first copies the parameters to the GPU
  // (with bf16 GEMMs, rounds them again, and the copy leaves the Context at
  // once). Readers take the const overload (std::as_const), which changes
  // nothing and may be called from another thread, e.g. a checkpoint copy.
  std::span<float> params();
  // For the optimizer: the parameters and, when the GEMMs read a bf16 copy of
  // them that is current, that copy (else empty). The caller writes to_bf16
  // of every parameter it changes into the copy too, which keeps it current:
  // the next forward need not round the weights again (docs/model.md, "Mixed precision").
  struct ParamsForUpdate {
    std::span<float> params;
    std::span<tensor::Bf16> rounded;
  };
  ParamsForUpdate params_for_update();
  std::span<const float> params() const { return params_.span(); }
  // The gradients; a zero_grad() not yet overtaken by backward() is applied first.
  std::span<float> grads() { return settled_grads(); }
  std::span<const float> grads() const { return settled_grads(); }
  // The gradient buffer as it is, a pending zero_grad() not applied: for a
  // consumer that reads each tensor only once backward() reports it ready.
  std::span<float> grad_buffer() { return grads_.span(); }
  std::span<float> param(const std::string& name);  // one tensor's view
  std::span<float> grad(const std::string& name);

  // Every tensor gets the whole model's values for `seed`, whatever the shard and stage.
  void init(std::uint64_t seed);
  // Loads this rank's units (and the replicated tensors) of the stage's
  // tensors from full (TP = 1, whole-model) values, laid out by
  // ParameterLayout(config, Shard::full(config)), e.g. an llm.c checkpoint's
  // LlmcCheckpoint::params.
  void load_full(std::span<const float> full_params);
  // The full (TP = 1) parameters, assembled over the TP group (an all-reduce of
  // the full size; every rank gets them). For checkpoints and comparisons.
  // Whole model only (std::logic_error on a partial stage).
  std::vector<float> gather_full();
  // d(objective)/d(token loss). 0 (the default) means 1 / (tokens of the batch),
  // i.e. the mean loss; the trainer sets 1 / (global tokens of the step).
  void set_loss_scale(float scale) { loss_scale_ = scale; }
  float loss_scale() const { return loss_scale_; }

  // Runs the forward pass and the fused softmax / cross-entropy, whose
  // gradient is kept for backward(). Every TP rank must call it with the same
  // batch. Whole model only (std::logic_error on a partial stage).
  LossStats forward(const Batch& batch);
  // The stage's forward. The first stage embeds batch.inputs and takes no
  // `input`; the others take the previous stage's output ([batch * seq, C]),
  // which is copied. The last stage computes the loss of batch.targets; the
  // others return their output. Only batch.batch and batch.seq are read
  // where the stage has neither embedding nor head. Throws
  // std::invalid_argument for an input of the wrong size.
  StageForward forward_stage(const Batch& batch, std::span<const float> input = {});
  // 1F1B runs several micro-batches' forwards before their backwards: each
  // keeps its activations in a slot of its own. The next forward_stage /
  // backward_stage (and forward / backward) use slot `slot` (0 until this is
  // called); a backward consumes the forward of its own slot. A slot's
  // buffers are made at its first forward, each one forward's worth of the
  // stage's activations (and its backward scratch). Throws
  // std::invalid_argument outside [0, kMaxSlots).
  static constexpr int kMaxSlots = 64;
  void select_slot(int slot);
  int slot() const { return slot_; }
  // bf16 GEMMs: each linear layer's input is rounded once, by the forward,
  // and its rounding kept in the slot for the backward's dW GEMM, and the
  // cross-entropy rounds dlogits as it writes them (the default); with false
  // the backward's GEMMs round their inputs themselves (the same bits, for
  // half those activations' size less memory). Applies to the slots made
  // after the call: call it before the first forward.
  void keep_rounded_inputs(bool keep) { keep_rounded_ = keep; }
  // Gradients become zero. Lazily: the next backward() overwrites them (its
  // weight GEMMs run with beta 0, the small tensors are cleared), which spares
  // clearing the whole buffer every step.
  void zero_grad();
  // Whole model only (std::logic_error on a partial stage).
  void backward(const BackwardHooks& hooks = {});
  // The stage's backward of its last forward_stage. The last stage starts from
  // its loss and takes no `doutput`; the others take the gradient of their
  // output ([batch * seq, C]) from the next stage. Returns the gradient of the
  // stage's input ([batch * seq, C], valid until the next backward), empty on
  // the first stage. hooks.grads_ready reports the stage's tensor indices;
  // hooks.embedding_rows needs the embedding and the tied LM head in this
  // stage (std::logic_error otherwise). Throws std::logic_error without a
  // forward, std::invalid_argument for a doutput of the wrong size.
  std::span<const float> backward_stage(std::span<const float> doutput, const BackwardHooks& hooks = {});

  // Inference on a single-rank whole model: the next-token distribution after
  // `tokens` (1 <= count <= max_seq), `vocab` probabilities. Leaves no
  // forward for backward() to consume.
  std::vector<float> next_token_probs(std::span<const std::int32_t> tokens);

  // Sum of squared gradients this rank counts towards the global norm:
  // its own units, plus the replicated tensors on TP rank 0 only, so that a
  // sum over the TP group counts every parameter exactly once. A GPT-2 last
  // stage does not count its copy of the tied wte (the first stage counts
  // it), so the sum over the stages counts it once too, once the trainer has
  // summed the two copies' gradients.
  double local_grad_sq_norm();
  bool counts_replicated() const { return tp_ == nullptr || tp_->rank() == 0; }
  // Seconds this model spent in its TP group's all-reduces, since it was
  // built: a pass's time without them is this rank's own compute, which a
  // slower peer cannot stretch (the trainer's measure of a rank's speed).
  double tp_reduce_s() const { return tp_reduce_s_; }

  // Replaces the shard with `next` and its parameter values (laid out by
  // ParameterLayout(config, next, stage())); gradients are zeroed. See reshard.h.
  void adopt(const Shard& next, tensor::Buffer values);

 private:
  struct Activations;
  struct BlockOffsets;
  // The blocks take the stage's own layer index: 0 is the stage's first layer.
  void forward_block(int layer, const float* residual);  // GPT-2
  void backward_block(int layer, const float* residual);
  void forward_llama_block(int layer, const float* residual);  // llama_block.cpp
  void backward_llama_block(int layer, const float* residual);
  // The pieces of forward_stage / backward_stage outside the blocks.
  void check_batch(const Batch& batch) const;
  void forward_embedding(const Batch& batch, std::span<const float> input);
  LossStats forward_head();
  void backward_head(const BackwardHooks& hooks, bool split_wte);
  void backward_embedding(const BackwardHooks& hooks, bool split_wte);
  // Gradients of tensors [first, last) are final: to the host, then to the hook.
  void report_ready(const BackwardHooks& hooks, std::size_t first, std::size_t last);
  void require_whole(const char* call) const;  // std::logic_error on a partial stage
  const float* stage_output() const;  // the residual stream after the stage's last layer
  std::int64_t head_offset() const;  // the LM head's weights: wte (GPT-2) or lm_head
  // The TP group's all-reduce of activations, staged through the host on a GPU.
  void all_reduce(float* data, std::int64_t count, comm::ReduceOp op = comm::ReduceOp::kSum);
  KernelAllReduce group_reduce();  // empty for a single rank
  // Where the kernels read the parameters and write the gradients: the host
  // buffers on the CPU, their device copies on a GPU.
  const float* kernel_params() const { return gpu_ != nullptr ? device_params_.data() : params_.data(); }
  float* kernel_grads() { return gpu_ != nullptr ? device_grads_.data() : grads_.data(); }
  void upload_params();
  // With bf16 GEMMs: rounds the parameters into rounded_params_ when they
  // changed, and sets that copy as the one ctx_'s GEMMs read.
  void round_params();
  void download_grads(std::size_t first, std::size_t last);  // tensors [first, last)
  void ensure_activations(std::int64_t batch, std::int64_t seq);
  std::span<float> settled_grads() const;
  void zero_accumulated_grads();

  tensor::Context& ctx_;
  tensor::Gpu* gpu_;  // ctx_'s GPU, or null
  comm::Group* tp_;
  std::unique_ptr<ParameterLayout> layout_;
  std::vector<BlockOffsets> blocks_;
  tensor::Buffer params_;
  mutable tensor::Buffer grads_;
  mutable bool grads_pending_zero_ = false;  // zero_grad() not yet applied
  tensor::Buffer device_params_, device_grads_;  // GPU only
  bool params_changed_ = true;                   // params() taken for writing since the last upload
  std::vector<tensor::Bf16> rounded_params_;     // bf16 GEMMs: the copy the GEMMs read
  bool rounded_stale_ = true;                    // params() taken for writing since the last rounding
  bool device_grads_pending_zero_ = false;       // zero_grad() not yet applied to device_grads_
  std::vector<float> staging_;                   // activations on their way through a TP all-reduce
  double tp_reduce_s_ = 0;                       // see tp_reduce_s()
  tensor::Into weight_grads_ = tensor::Into::kAdd;  // this backward's weight GEMMs
  // One set of activations per slot (select_slot), made at its first forward.
  std::vector<std::unique_ptr<Activations>> slots_;
  std::vector<bool> forwarded_;  // per slot: a forward its backward has not consumed
  int slot_ = 0;
  bool keep_rounded_ = true;  // see keep_rounded_inputs
  EmbeddingRows embedding_rows_;  // the split embedding scatter of the last backward
  tensor::RopeTable rope_;  // Llama only
  float loss_scale_ = 0.0f;
};

}  // namespace ntp::model
