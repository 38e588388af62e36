// The loops of simd/loops.inc built for sse2 (flags in src/tensor/CMakeLists.txt).
#define NTP_SIMD_ISA sse2
#include "tensor/simd/loops.inc"
