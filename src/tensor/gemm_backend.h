#pragma once
// The sgemm libraries a Context can run its GEMMs on. Both run single-threaded
// inside the Context's pool (one pool for GEMM and non-GEMM loops alike), so no
// library thread ever spins on a core the pool needs.
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace ntp::tensor {

// oneDNN picks its kernels (AVX-512 where present) at run time by its own JIT;
// OpenBLAS runs the kernels of its pinned core type. oneDNN is the default: on
// AVX-512 machines it is about twice as fast, and never slower on AVX2.
enum class GemmBackend { kOneDnn, kOpenBlas };

inline constexpr std::string_view kGemmBackendNames = "onednn | openblas";

std::optional<GemmBackend> parse_gemm_backend(std::string_view name);
std::string_view gemm_backend_name(GemmBackend backend);

// "oneDNN 2.6.3, avx512_core_bf16" / "OpenBLAS [<config>]": the library, its
// version and the instruction set its kernels use on this machine.
std::string describe_gemm_backend(GemmBackend backend);

// c[m, k] = alpha · op(a) · op(b) + beta · c, row-major, on the calling thread.
void backend_sgemm(GemmBackend backend, bool trans_a, bool trans_b, std::int64_t m,
                   std::int64_t k_out, std::int64_t inner, float alpha, const float* a,
                   std::int64_t lda, const float* b, std::int64_t ldb, float beta, float* c,
                   std::int64_t ldc);

}  // namespace ntp::tensor
