#include "tensor/gemm_backend.h"

#include <cblas.h>
#include <omp.h>
#include <oneapi/dnnl/dnnl.h>

#include <stdexcept>

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

}  // namespace

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
