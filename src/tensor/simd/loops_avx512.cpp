// The loops of simd/loops.inc built for avx512 (flags in src/tensor/CMakeLists.txt).
#define NTP_SIMD_ISA avx512
#include "tensor/simd/loops.inc"
