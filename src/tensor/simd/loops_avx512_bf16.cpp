// The loops of simd/loops.inc built for avx512 with AVX512-BF16 (flags in src/tensor/CMakeLists.txt).
#define NTP_SIMD_ISA avx512_bf16
#include "tensor/simd/loops.inc"
