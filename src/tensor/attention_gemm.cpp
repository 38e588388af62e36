// Causal attention through sgemm per head. For one batch row and one query
// head h of KV group g (Q, K, V, dOut the [T, hd] slices, P the probabilities):
//
//   S   = scale · Q · Kᵀ            [T, T]   P = causal softmax(S), in att
//   out = P · V                      [T, hd]
//   dP  = dOut · Vᵀ                  [T, T]   dS = scale · P ∘ (dP − rowsum(P ∘ dP))
//   dV += Pᵀ · dOut,  dQ += dS · K,  dK += dSᵀ · Q   (dK, dV summed over g's heads)
//
// The library reads Q, K, V and dOut where they lie (strided views into qkv
// and dout) and adds dQ, dK, dV straight into dqkv: measured faster than
// packing each head into contiguous copies. Query rows run in blocks of
// kBlockRows; block [r0, r1) reads keys [0, r1) only, so of the masked upper
// triangle only the diagonal blocks are computed (and zeroed). Each (batch,
// group) task runs on one pool thread with single-threaded library calls, so
// an element's bits depend on the shapes alone, never on the thread count.
//
// Agreement with the loops (the reference). Both paths round every dot
// product of length n (in any order, with or without FMA) to within γ_n of
// its magnitude sum Σ|aᵢbᵢ|, γ_n = n·u/(1 − n·u), u = 2⁻²⁴; so two results of
// one dot product differ by at most 2·γ_n·Σ|aᵢbᵢ|. Carried through to first
// order (tests/tensor/attention_test.cpp computes it element by element, in
// double, from the inputs):
//
//   δs_j   = 2·γ_{hd+1}·scale·Σ_k|q_k·K_jk|                     the scores
//   ρ_j    = δs_j + 2u·|s_j − max s| + 2·ε_exp                   exp(s_j − max s), relative;
//                                                                ε_exp = 1e-7, simd's exp
//   |δp_j| ≤ p_j·(ρ_j + Σ_m p_m·ρ_m + 2·γ_{t+4})                  softmax of row t
//   |δout| ≤ Σ_j |δp_j|·|V_j| + 2·γ_T·Σ_j p_j·|V_j|
//
// and for the backward, from the same att: dP (length hd), the row weight
// w = Σ p·dP (length t+1), dS = scale·p·(dP − w) (three roundings), then dQ
// (length T) and dK, dV (group·T terms), each plus one rounding of the value
// it is added onto. The bound is a worst case, typically 10–100 times the
// difference seen; a wrong mask, scale, head or transpose exceeds it by
// orders of magnitude.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <vector>

#include "tensor/attention_heads.h"
#include "tensor/gemm_backend.h"
#include "tensor/simd/loops.h"

namespace ntp::tensor::attention_detail {

namespace {

// Query rows per block of the causal products. Measured (model_bench's
// attention benchmarks): 32 beats 64 and 128 at T = 64 to 256; the work
// skipped in the masked triangle outweighs the smaller calls.
constexpr std::int64_t kBlockRows = 32;

// A row-major matrix: element (i, j) at p[i * ld + j]; rows(r) starts at row r.
struct View {
  const float* p;
  std::int64_t ld;
  View rows(std::int64_t r) const { return {p + r * ld, ld}; }
};

// The GEMM of the Context's library on the calling thread:
// c = alpha · op(a) · op(b) + beta · c, c [m, n]; with bf16 GEMMs a and b are
// rounded to bf16 first (into the thread's scratch), as gemm() rounds its
// operands. It adds its time to thread_ns, summed over the pool's threads
// (see GemmTime).
struct Sgemm {
  GemmBackend backend;
  Precision precision;
  Bf16Path path;
  std::atomic<std::int64_t>* thread_ns;
  void operator()(bool ta, bool tb, std::int64_t m, std::int64_t n, std::int64_t k, float alpha, View a,
                  View b, float beta, float* c, std::int64_t ldc) const {
    const auto start = std::chrono::steady_clock::now();
    if (precision == Precision::kBf16) {
      thread_local std::vector<Bf16> scratch;
      const std::int64_t a_rows = ta ? k : m, a_cols = ta ? m : k;
      const std::int64_t b_rows = tb ? n : k, b_cols = tb ? k : n;
      scratch.resize(static_cast<std::size_t>(a_rows * a_cols + b_rows * b_cols));
      Bf16* ha = scratch.data();
      Bf16* hb = ha + a_rows * a_cols;
      round_to_bf16(a.p, a_rows, a_cols, a.ld, ha);
      round_to_bf16(b.p, b_rows, b_cols, b.ld, hb);
      backend_gemm_bf16(path, backend, ta, tb, m, n, k, alpha, ha, a_cols, hb, b_cols, beta, c, ldc);
    } else {
      backend_sgemm(backend, ta, tb, m, n, k, alpha, a.p, a.ld, b.p, b.ld, beta, c, ldc);
    }
    thread_ns->fetch_add(std::chrono::duration_cast<std::chrono::nanoseconds>(
                             std::chrono::steady_clock::now() - start)
                             .count(),
                         std::memory_order_relaxed);
  }
};

// The per-head sgemm calls run on every pool thread at once, between the
// softmax loops: their thread-seconds over the pool's threads is the wall
// time they take, which the Context counts as GEMM time (its non-GEMM share
// is then the softmax and the framework, not the attention's GEMMs).
struct GemmTime {
  explicit GemmTime(Context& context) : ctx(context) {}
  ~GemmTime() { ctx.add_gemm_seconds(1e-9 * static_cast<double>(thread_ns.load()) / ctx.pool().threads()); }
  GemmTime(const GemmTime&) = delete;
  GemmTime& operator=(const GemmTime&) = delete;
  Context& ctx;
  std::atomic<std::int64_t> thread_ns{0};
};

// What the forward and the backward both read.
struct Setup {
  Setup(Context& ctx, const AttentionShape& shape, GemmTime& time)
      : sl{shape},
        T(shape.seq),
        hd(shape.head_dim),
        row(shape.qkv_row()),
        scale(1.0f / std::sqrt(static_cast<float>(shape.head_dim))),
        L(simd::loops()),
        sgemm{ctx.gemm_backend(), ctx.precision(), ctx.bf16_path(), &time.thread_ns} {}
  Slice sl;
  std::int64_t T, hd, row;  // positions, head size, floats per qkv row
  float scale;              // of the scores, 1/sqrt(hd)
  const simd::Loops& L;
  Sgemm sgemm;
};

}  // namespace

void gemm_forward(Context& ctx, float* out, float* att, const float* qkv, const AttentionShape& shape) {
  GemmTime time(ctx);
  const Setup setup(ctx, shape, time);
  const auto& [sl, T, hd, row, scale, L, sgemm] = setup;
  for_each_group(ctx, shape, [&](std::int64_t b, std::int64_t first) {
    const View k{qkv + sl.k_at(b, 0, first), row}, v{qkv + sl.v_at(b, 0, first), row};
    for (std::int64_t h = first; h < first + shape.group; ++h) {
      const View q{qkv + sl.q_at(b, 0, h), row};
      float* p = att + sl.att_at(b, h, 0);  // [T, T]
      for (std::int64_t r0 = 0; r0 < T; r0 += kBlockRows) {
        const std::int64_t r1 = std::min(T, r0 + kBlockRows), m = r1 - r0;
        sgemm(false, true, m, r1, hd, scale, q.rows(r0), k, 0.0f, p + r0 * T, T);  // S
        for (std::int64_t t = r0; t < r1; ++t) {  // causal softmax of row t over keys [0, t]
          float* pt = p + t * T;
          const float sum = L.exp_shifted_sum(pt, L.max(pt, t + 1), t + 1);
          L.scale(pt, 1.0f / sum, t + 1);
          std::fill(pt + t + 1, pt + T, 0.0f);
        }
        sgemm(false, false, m, hd, r1, 1.0f, {p + r0 * T, T}, v, 0.0f, out + sl.out_at(b, r0, h),
              sl.out_row());  // out
      }
    }
  });
}

void gemm_backward(Context& ctx, float* dqkv, const float* dout, const float* qkv, const float* att,
                   const AttentionShape& shape) {
  GemmTime time(ctx);
  const Setup setup(ctx, shape, time);
  const auto& [sl, T, hd, row, scale, L, sgemm] = setup;
  for_each_group(ctx, shape, [&](std::int64_t b, std::int64_t first) {
    thread_local std::vector<float> score_grad;  // [T, T]: dP, then dS in place
    score_grad.resize(static_cast<std::size_t>(T * T));
    float* ds = score_grad.data();
    const View k{qkv + sl.k_at(b, 0, first), row}, v{qkv + sl.v_at(b, 0, first), row};
    float* dk = dqkv + sl.k_at(b, 0, first);
    float* dv = dqkv + sl.v_at(b, 0, first);
    for (std::int64_t h = first; h < first + shape.group; ++h) {
      const View q{qkv + sl.q_at(b, 0, h), row}, dy{dout + sl.out_at(b, 0, h), sl.out_row()};
      const float* p = att + sl.att_at(b, h, 0);  // [T, T], zero above the diagonal
      for (std::int64_t r0 = 0; r0 < T; r0 += kBlockRows) {
        const std::int64_t r1 = std::min(T, r0 + kBlockRows), m = r1 - r0;
        const View p_block{p + r0 * T, T}, ds_block{ds + r0 * T, T};
        sgemm(false, true, m, r1, hd, 1.0f, dy.rows(r0), v, 0.0f, ds + r0 * T, T);  // dP
        for (std::int64_t t = r0; t < r1; ++t) {  // dS over keys [0, t], zero beyond
          const float* pt = p + t * T;
          float* dst = ds + t * T;
          L.softmax_backward(dst, pt, L.dot(pt, dst, t + 1), scale, t + 1);
          std::fill(dst + t + 1, dst + r1, 0.0f);
        }
        sgemm(true, false, r1, hd, m, 1.0f, p_block, dy.rows(r0), 1.0f, dv, row);   // dV += Pᵀ dOut
        sgemm(false, false, m, hd, r1, 1.0f, ds_block, k, 1.0f, dqkv + sl.q_at(b, r0, h), row);  // dQ += dS K
        sgemm(true, false, r1, hd, m, 1.0f, ds_block, q.rows(r0), 1.0f, dk, row);   // dK += dSᵀ Q
      }
    }
  });
}

}  // namespace ntp::tensor::attention_detail
