#include "tensor/gemm_backend.h"

#include <cblas.h>
#include <omp.h>
#include <oneapi/dnnl/dnnl.h>
#include <oneapi/dnnl/dnnl.hpp>

#include <map>
#include <stdexcept>
#include <tuple>
#include <vector>

#include "tensor/simd/loops.h"

namespace ntp::tensor {

namespace {

std::string_view isa_name(dnnl_cpu_isa_t isa) {
  switch (isa) {
    case dnnl_cpu_isa_sse41: return "sse41";
    case dnnl_cpu_isa_avx: return "avx";
    case dnnl_cpu_isa_avx2: return "avx2";
    case dnnl_cpu_isa_avx2_vnni: return "avx2_vnni";
    case dnnl_cpu_isa_avx512_mic: return "avx512_mic";
    case dnnl_cpu_isa_avx512_mic_4ops: return "avx512_mic_4ops";
    case dnnl_cpu_isa_avx512_core: return "avx512_core";
    case dnnl_cpu_isa_avx512_core_vnni: return "avx512_core_vnni";
    case dnnl_cpu_isa_avx512_core_bf16: return "avx512_core_bf16";
    case dnnl_cpu_isa_avx512_core_amx: return "avx512_core_amx";
    default: return "baseline";
  }
}

// oneDNN (built on OpenMP) would start a team of omp_get_max_threads() threads
// per call; the pool already splits every GEMM, so each caller runs alone.
void run_onednn_single_threaded() {
  thread_local const bool once = [] {
    omp_set_num_threads(1);
    return true;
  }();
  (void)once;
}

// One bf16 matmul of a shape on the calling thread: the primitive (alpha and
// beta fixed at its creation) and the memory objects its pointers go into.
struct Bf16Matmul {
  dnnl::matmul primitive;
  dnnl::memory a, b, c;
};

// The shape, the strides and the scalars: what a primitive is made for.
using Bf16Key = std::tuple<bool, bool, std::int64_t, std::int64_t, std::int64_t, std::int64_t, std::int64_t,
                           std::int64_t, float, float>;

struct Bf16Thread {
  dnnl::engine engine{dnnl::engine::kind::cpu, 0};
  dnnl::stream stream{engine};
  std::map<Bf16Key, Bf16Matmul> cache;
  std::vector<float> a, b;  // the emulated path's fp32 copies
};

Bf16Thread& bf16_thread() {
  thread_local Bf16Thread t;
  return t;
}

Bf16Matmul make_bf16_matmul(dnnl::engine& engine, const Bf16Key& key) {
  using dnnl::memory;
  const auto [ta, tb, m, n, k, lda, ldb, ldc, alpha, beta] = key;
  const memory::desc a({m, k}, memory::data_type::bf16, ta ? memory::dims{1, lda} : memory::dims{lda, 1});
  const memory::desc b({k, n}, memory::data_type::bf16, tb ? memory::dims{1, ldb} : memory::dims{ldb, 1});
  const memory::desc c({m, n}, memory::data_type::f32, memory::dims{ldc, 1});
  dnnl::primitive_attr attr;
  if (alpha != 1.0f) attr.set_output_scales(0, {alpha});
  if (beta != 0.0f) {
    dnnl::post_ops ops;
    ops.append_sum(beta);
    attr.set_post_ops(ops);
  }
  const dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(a, b, c), attr, engine);
  return {dnnl::matmul(pd), memory(a, engine, DNNL_MEMORY_NONE), memory(b, engine, DNNL_MEMORY_NONE),
          memory(c, engine, DNNL_MEMORY_NONE)};
}

// The stored [rows, cols] block of a bf16 matrix, widened to fp32, dense.
const float* widen(std::vector<float>& out, const Bf16* x, std::int64_t rows, std::int64_t cols,
                   std::int64_t ld) {
  out.resize(static_cast<std::size_t>(rows * cols));
  for (std::int64_t i = 0; i < rows; ++i)
    for (std::int64_t j = 0; j < cols; ++j) out[static_cast<std::size_t>(i * cols + j)] = from_bf16(x[i * ld + j]);
  return out.data();
}

}  // namespace

void round_to_bf16(const float* x, std::int64_t rows, std::int64_t cols, std::int64_t ld, Bf16* out) {
  const auto round = simd::loops().round_bf16;
  if (ld == cols) return round(out, x, rows * cols);
  for (std::int64_t i = 0; i < rows; ++i) round(out + i * cols, x + i * ld, cols);
}

bool cpu_has_bf16() {
  // The ISA oneDNN will use: the CPU's, or less under DNNL_MAX_CPU_ISA (so
  // DNNL_MAX_CPU_ISA=AVX512_CORE_VNNI shows what a CPU without it runs).
  static const bool has = (dnnl_get_effective_cpu_isa() & dnnl_cpu_isa_avx512_core_bf16) ==
                          dnnl_cpu_isa_avx512_core_bf16;
  return has;
}

void backend_gemm_bf16(Bf16Path path, GemmBackend backend, bool trans_a, bool trans_b, std::int64_t m,
                       std::int64_t n, std::int64_t k, float alpha, const Bf16* a, std::int64_t lda,
                       const Bf16* b, std::int64_t ldb, float beta, float* c, std::int64_t ldc) {
  if (m == 0 || n == 0) return;
  Bf16Thread& t = bf16_thread();
  if (path == Bf16Path::kEmulated || k == 0) {
    const float* fa = widen(t.a, a, trans_a ? k : m, trans_a ? m : k, lda);
    const float* fb = widen(t.b, b, trans_b ? n : k, trans_b ? k : n, ldb);
    backend_sgemm(backend, trans_a, trans_b, m, n, k, alpha, fa, trans_a ? m : k, fb, trans_b ? k : n, beta, c,
                  ldc);
    return;
  }
  run_onednn_single_threaded();
  const Bf16Key key{trans_a, trans_b, m, n, k, lda, ldb, ldc, alpha, beta};
  auto it = t.cache.find(key);
  if (it == t.cache.end()) it = t.cache.emplace(key, make_bf16_matmul(t.engine, key)).first;
  Bf16Matmul& mm = it->second;
  mm.a.set_data_handle(const_cast<Bf16*>(a));
  mm.b.set_data_handle(const_cast<Bf16*>(b));
  mm.c.set_data_handle(c);
  mm.primitive.execute(t.stream, {{DNNL_ARG_SRC, mm.a}, {DNNL_ARG_WEIGHTS, mm.b}, {DNNL_ARG_DST, mm.c}});
}

std::optional<GemmBackend> parse_gemm_backend(std::string_view name) {
  if (name == "onednn") return GemmBackend::kOneDnn;
  if (name == "openblas") return GemmBackend::kOpenBlas;
  return std::nullopt;
}

std::string_view gemm_backend_name(GemmBackend backend) {
  return backend == GemmBackend::kOneDnn ? "onednn" : "openblas";
}

std::string describe_gemm_backend(GemmBackend backend) {
  if (backend == GemmBackend::kOpenBlas) return std::string("OpenBLAS [") + openblas_get_config() + "]";
  const dnnl_version_t* v = dnnl_version();
  return "oneDNN " + std::to_string(v->major) + "." + std::to_string(v->minor) + "." +
         std::to_string(v->patch) + ", " + std::string(isa_name(dnnl_get_effective_cpu_isa()));
}

void backend_sgemm(GemmBackend backend, bool trans_a, bool trans_b, std::int64_t m,
                   std::int64_t k_out, std::int64_t inner, float alpha, const float* a,
                   std::int64_t lda, const float* b, std::int64_t ldb, float beta, float* c,
                   std::int64_t ldc) {
  if (backend == GemmBackend::kOpenBlas) {
    cblas_sgemm(CblasRowMajor, trans_a ? CblasTrans : CblasNoTrans,
                trans_b ? CblasTrans : CblasNoTrans, static_cast<blasint>(m),
                static_cast<blasint>(k_out), static_cast<blasint>(inner), alpha, a,
                static_cast<blasint>(lda), b, static_cast<blasint>(ldb), beta, c,
                static_cast<blasint>(ldc));
    return;
  }
  run_onednn_single_threaded();
  const dnnl_status_t status = dnnl_sgemm(trans_a ? 'T' : 'N', trans_b ? 'T' : 'N', m, k_out, inner,
                                          alpha, a, lda, b, ldb, beta, c, ldc);
  if (status != dnnl_success) {
    throw std::runtime_error("oneDNN sgemm failed with status " + std::to_string(status));
  }
}

}  // namespace ntp::tensor
