#pragma once
// The inner loops of the non-GEMM kernels, compiled once per instruction set
// (loops.inc built with different -m flags) and picked at run time, so one
// binary runs on any x86-64 and uses AVX2 or AVX-512 where present.
//
// Every build of a loop does the same float operations in the same order
// (reductions run 16 fixed lanes, added in a fixed tree; no FMA contraction),
// so every instruction set gives the bits of the scalar build, the reference.
#include <cstdint>
#include <string_view>
#include <vector>

namespace ntp::tensor {
struct AdamWStep;
}

namespace ntp::tensor::simd {

struct Loops {
  // param, m, v updated in place; c1, c2 the bias corrections. Unless null,
  // rounded[i] = tensor::to_bf16 of the new param[i].
  void (*adamw)(float* param, const float* grad, float* m, float* v, std::uint16_t* rounded, std::int64_t count,
                const AdamWStep& step, float c1, float c2);
  double (*sum_squares)(const float* x, std::int64_t count);  // in double
  // Four arrays of `count` floats read side by side: out[a] has the bits of
  // sum_squares(x[a], count).
  void (*sum_squares_x4)(const float* const* x, std::int64_t count, double* out);
  void (*gelu_forward)(float* out, const float* inp, std::int64_t count);
  // In place: d holds dL/d(gelu(inp)) and becomes dL/d(inp).
  void (*gelu_backward)(float* d, const float* inp, std::int64_t count);
  float (*dot)(const float* a, const float* b, std::int64_t count);
  void (*axpy)(float* y, float a, const float* x, std::int64_t count);  // y += a x
  float (*sum)(const float* x, std::int64_t count);
  float (*centered_sum_squares)(const float* x, float mean, std::int64_t count);
  float (*max)(const float* x, std::int64_t count);                      // -inf when empty
  float (*exp_shifted_sum)(float* x, float shift, std::int64_t count);  // x = exp(x - shift)
  void (*scale)(float* x, float factor, std::int64_t count);
  // Softmax backward of one row, in place: d[i] = p[i] (d[i] - weighted) factor,
  // weighted = sum p d (the row's dot product), factor the score scale.
  void (*softmax_backward)(float* d, const float* p, float weighted, float factor, std::int64_t count);
  // out[i] = silu(gate_up[2i]) * gate_up[2i+1]; the backward accumulates (+=).
  void (*swiglu_forward)(float* out, const float* gate_up, std::int64_t count);
  void (*swiglu_backward)(float* dgate_up, const float* gate_up, const float* dout, std::int64_t count);
  // One RMSNorm row: y = x * s * w with s = 1 / sqrt(mean(x^2) + eps); returns s.
  float (*rmsnorm_row)(float* y, const float* x, const float* w, float eps, std::int64_t dim);
  // Its input gradient, accumulating: dx += (w dy - x s m) s, m = mean(w dy x s).
  void (*rmsnorm_backward_row)(float* dx, const float* dy, const float* x, const float* w, float s,
                               std::int64_t dim);
  // One LayerNorm row's input gradient, accumulating: with xhat = (x - mean) rstd
  // and g = w dy, dx += (g - mean(g) - xhat mean(g xhat)) rstd.
  void (*layernorm_backward_row)(float* dx, const float* dy, const float* x, const float* w, float mean,
                                 float rstd, std::int64_t dim);
  // LayerNorm's parameter gradients, one row's columns: dbias += dy,
  // dweight += (x - mean) rstd dy.
  void (*layernorm_param_grads_row)(float* dweight, float* dbias, const float* dy, const float* x, float mean,
                                    float rstd, std::int64_t count);
  // y += x * a * z (RMSNorm's weight gradient, one row at a time).
  void (*scaled_product_add)(float* y, const float* x, float a, const float* z, std::int64_t count);
  // out[i] = tensor::to_bf16(x[i]): nearest even, NaN stays a quiet NaN (the
  // bf16 GEMMs' operands; integer operations, so every build gives its bits).
  void (*round_bf16)(std::uint16_t* out, const float* x, std::int64_t count);
};

// kAvx512Bf16: the AVX-512 build with AVX512-BF16's conversion for round_bf16
// (the other loops have no use for it).
enum class Isa { kScalar, kSse2, kAvx2, kAvx512, kAvx512Bf16 };

std::string_view isa_name(Isa isa);
// The instruction sets this CPU runs, scalar first.
std::vector<Isa> runnable_isas();
// The loops built for `isa`; the CPU must run it.
const Loops& loops_for(Isa isa);
// The fastest build this CPU runs, chosen once.
Isa best_isa();
const Loops& loops();

}  // namespace ntp::tensor::simd
