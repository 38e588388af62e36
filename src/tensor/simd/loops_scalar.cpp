// The loops of simd/loops.inc built for scalar (flags in src/tensor/CMakeLists.txt).
#define NTP_SIMD_ISA scalar
#include "tensor/simd/loops.inc"
