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

// The precision of the GEMMs' inputs (model.precision, parsed with the
// configuration's other choices; docs/model.md, "Mixed precision"). kBf16:
// both operands of every GEMM rounded to bf16 (nearest even), the products
// summed in fp32, the output fp32; everything else stays fp32.
enum class Precision { kFp32, kBf16 };

// "oneDNN 2.6.3, avx512_core_bf16" / "OpenBLAS [<config>]": the library, its
// version and the instruction set its kernels use on this machine.
std::string describe_gemm_backend(GemmBackend backend);

// c[m, k] = alpha · op(a) · op(b) + beta · c, row-major, on the calling thread.
void backend_sgemm(GemmBackend backend, bool trans_a, bool trans_b, std::int64_t m,
                   std::int64_t k_out, std::int64_t inner, float alpha, const float* a,
                   std::int64_t lda, const float* b, std::int64_t ldb, float beta, float* c,
                   std::int64_t ldc);

// ---------------------------------------------------------------- bf16 ---
// bf16: the upper 16 bits of an fp32 (8 significant bits). A product of two
// bf16 values is exact in fp32, so a bf16 GEMM differs from an fp32 GEMM on
// the same (rounded) inputs only by the order of its fp32 sums.
using Bf16 = std::uint16_t;

// Round to nearest, ties to even; NaN stays NaN (quiet), ±inf stays ±inf,
// subnormals are kept (rounded like any value).
inline Bf16 to_bf16(float x) {
  std::uint32_t bits = 0;
  __builtin_memcpy(&bits, &x, sizeof bits);
  if ((bits & 0x7fffffffu) > 0x7f800000u) return static_cast<Bf16>((bits >> 16) | 0x40u);
  return static_cast<Bf16>((bits + 0x7fffu + ((bits >> 16) & 1u)) >> 16);
}
inline float from_bf16(Bf16 h) {
  const std::uint32_t bits = static_cast<std::uint32_t>(h) << 16;
  float x = 0;
  __builtin_memcpy(&x, &bits, sizeof x);
  return x;
}

// out[i * cols + j] = to_bf16(x[i * ld + j]) for a [rows, cols] block of x.
void round_to_bf16(const float* x, std::int64_t rows, std::int64_t cols, std::int64_t ld, Bf16* out);

// Whether this CPU has the bf16 dot product (AVX512-BF16; oneDNN's
// avx512_core_bf16 or above). Without it a bf16 GEMM is emulated (below).
bool cpu_has_bf16();

// How a bf16 GEMM runs: kNative, oneDNN's matmul primitive (bf16 sources,
// fp32 accumulation and output; one cached primitive per shape on each
// thread); kEmulated, the operands widened back to fp32 and the fp32 sgemm of
// `backend`: the same products, exact either way, summed in another order.
enum class Bf16Path { kNative, kEmulated };

// c[m, n] = alpha · op(a) · op(b) + beta · c on the calling thread; a and b
// bf16, row-major with leading dimensions lda, ldb; c fp32. beta is 0
// (overwrite, NaN in c ignored) or anything else (c scaled and added onto in
// fp32, as sgemm does).
void backend_gemm_bf16(Bf16Path path, GemmBackend backend, bool trans_a, bool trans_b, std::int64_t m,
                       std::int64_t n, std::int64_t k, float alpha, const Bf16* a, std::int64_t lda,
                       const Bf16* b, std::int64_t ldb, float beta, float* c, std::int64_t ldc);

}  // namespace ntp::tensor
