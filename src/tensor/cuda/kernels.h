#pragma once
// The CUDA twins of the CPU kernels in tensor/*.h: the same arguments (device
// pointers), the same unit-major layouts, the same accumulate-or-overwrite
// contract; each header of tensor/ documents its kernel. They are queued on
// the Gpu's stream and return at once. fp32 throughout: GEMMs on cuBLAS with
// its default (non-TF32) math, so results differ from the CPU's by the order
// of additions and by expf / tanhf / logf where the CPU uses its own
// approximations (tests/tensor/backend_ops_test.cpp bounds each op).
#include <cstdint>

#include "tensor/adamw.h"
#include "tensor/attention.h"
#include "tensor/cross_entropy.h"
#include "tensor/gpu.h"
#include "tensor/matmul.h"
#include "tensor/rope.h"

namespace ntp::tensor::cuda {

// matmul.h
void gemm(Gpu& gpu, bool trans_a, bool trans_b, std::int64_t m, std::int64_t k_out, std::int64_t inner,
          float alpha, const float* a, std::int64_t lda, const float* b, std::int64_t ldb, float beta,
          float* c, std::int64_t ldc);
void matmul_forward(Gpu& gpu, float* out, const float* inp, const float* weight, const float* bias,
                    std::int64_t n, std::int64_t in_dim, std::int64_t out_dim, WeightLayout layout);
void matmul_backward(Gpu& gpu, float* dinp, float* dweight, float* dbias, const float* dout,
                     const float* inp, const float* weight, std::int64_t n, std::int64_t in_dim,
                     std::int64_t out_dim, WeightLayout layout, BackwardInto into);
void bias_backward(Gpu& gpu, float* dbias, const float* dout, std::int64_t n, std::int64_t dim);

// layernorm.h, rmsnorm.h
void layernorm_forward(Gpu& gpu, float* out, float* mean, float* rstd, const float* inp,
                       const float* weight, const float* bias, std::int64_t n, std::int64_t dim);
void layernorm_backward(Gpu& gpu, float* dinp, float* dweight, float* dbias, const float* dout,
                        const float* inp, const float* weight, const float* mean, const float* rstd,
                        std::int64_t n, std::int64_t dim);
void rmsnorm_forward(Gpu& gpu, float* out, float* rstd, const float* inp, const float* weight,
                     std::int64_t n, std::int64_t dim, float eps);
void rmsnorm_backward(Gpu& gpu, float* dinp, float* dweight, const float* dout, const float* inp,
                      const float* weight, const float* rstd, std::int64_t n, std::int64_t dim);

// gelu.h, swiglu.h, residual.h, fill.h
void gelu_forward(Gpu& gpu, float* out, const float* inp, std::int64_t count);
void gelu_backward(Gpu& gpu, float* d, const float* inp, std::int64_t count);
void swiglu_forward(Gpu& gpu, float* out, const float* gate_up, std::int64_t count);
void swiglu_backward(Gpu& gpu, float* dgate_up, const float* gate_up, const float* dout,
                     std::int64_t count);
void residual_forward(Gpu& gpu, float* out, const float* residual, const float* x, const float* bias,
                      std::int64_t n, std::int64_t dim);
void zero(Gpu& gpu, float* x, std::int64_t count);

// rope.h (the table is the host's; it is copied to the workspace per call)
void rope_forward(Gpu& gpu, float* qkv, const AttentionShape& shape, const RopeTable& table);
void rope_backward(Gpu& gpu, float* dqkv, const AttentionShape& shape, const RopeTable& table);

// attention.h (one path: cuBLAS strided-batched products per head)
void attention_forward(Gpu& gpu, float* out, float* att, const float* qkv, const AttentionShape& shape);
void attention_backward(Gpu& gpu, float* dqkv, const float* dout, const float* qkv, const float* att,
                        const AttentionShape& shape);

// cross_entropy.h (target_col in device memory)
void crossentropy_local_max(Gpu& gpu, float* row_max, const float* logits, const LogitShape& shape);
void crossentropy_local_sums(Gpu& gpu, float* sums, float* logits, const std::int64_t* target_col,
                             const float* row_max, const LogitShape& shape);
void crossentropy_finish(Gpu& gpu, float* losses, float* logits, const std::int64_t* target_col,
                         const float* row_max, const float* sums, float dloss_scale,
                         const LogitShape& shape);
void crossentropy_local(Gpu& gpu, float* losses, float* logits, const std::int64_t* target_col,
                        float* scratch, float dloss_scale, const LogitShape& shape);

// adamw.h
void adamw_update(Gpu& gpu, float* param, const float* grad, float* m, float* v, std::int64_t count,
                  const AdamWStep& step);

// The vocabulary-parallel embedding (model/vocab_parallel.h), in device memory:
// out[i] = rows[col[i]] (0 where col[i] < 0), then out[i] += wpe[i % seq].
void embedding_gather(Gpu& gpu, float* out, const std::int64_t* cols, const float* rows, std::int64_t n,
                      std::int64_t dim);
void embedding_add_positions(Gpu& gpu, float* out, const float* wpe, std::int64_t n, std::int64_t seq,
                             std::int64_t dim);
// dwpe[t] += dout[i] for every i with i % seq == t, in increasing i.
void embedding_positions_backward(Gpu& gpu, float* dwpe, const float* dout, std::int64_t n,
                                  std::int64_t seq, std::int64_t dim);
// For each group g: drows[row[g]] += dout[pos] for pos in
// positions[start[g] .. start[g+1]), in that order (the host sorts the
// positions of each distinct row, in position order, so the sums are the
// CPU's, bit for bit).
void embedding_rows_backward(Gpu& gpu, float* drows, const std::int64_t* row, const std::int64_t* start,
                             const std::int64_t* positions, std::int64_t groups, const float* dout,
                             std::int64_t dim);

}  // namespace ntp::tensor::cuda
