// The loops of simd/loops.inc built for avx2 (flags in src/tensor/CMakeLists.txt).
#define NTP_SIMD_ISA avx2
#include "tensor/simd/loops.inc"
