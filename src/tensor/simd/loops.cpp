#include "tensor/simd/loops.h"

#include <stdexcept>
#include <string>

namespace ntp::tensor::simd {

// One table per build of loops.inc.
namespace scalar { extern const Loops kLoops; }
namespace sse2 { extern const Loops kLoops; }
namespace avx2 { extern const Loops kLoops; }
namespace avx512 { extern const Loops kLoops; }
namespace avx512_bf16 { extern const Loops kLoops; }

namespace {
bool cpu_runs(Isa isa) {
  __builtin_cpu_init();
  switch (isa) {
    case Isa::kScalar:
    case Isa::kSse2: return true;  // every x86-64
    case Isa::kAvx2: return __builtin_cpu_supports("avx2");
    case Isa::kAvx512:
      return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512vl") &&
             __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512dq");
    case Isa::kAvx512Bf16: return cpu_runs(Isa::kAvx512) && __builtin_cpu_supports("avx512bf16");
  }
  return false;
}
}  // namespace

std::string_view isa_name(Isa isa) {
  switch (isa) {
    case Isa::kScalar: return "scalar";
    case Isa::kSse2: return "sse2";
    case Isa::kAvx2: return "avx2";
    case Isa::kAvx512: return "avx512";
    case Isa::kAvx512Bf16: return "avx512_bf16";
  }
  return "unknown";
}

std::vector<Isa> runnable_isas() {
  std::vector<Isa> out;
  for (Isa isa : {Isa::kScalar, Isa::kSse2, Isa::kAvx2, Isa::kAvx512, Isa::kAvx512Bf16})
    if (cpu_runs(isa)) out.push_back(isa);
  return out;
}

const Loops& loops_for(Isa isa) {
  if (!cpu_runs(isa)) {
    throw std::invalid_argument("simd: this CPU does not run " + std::string(isa_name(isa)));
  }
  switch (isa) {
    case Isa::kScalar: return scalar::kLoops;
    case Isa::kSse2: return sse2::kLoops;
    case Isa::kAvx2: return avx2::kLoops;
    case Isa::kAvx512: return avx512::kLoops;
    case Isa::kAvx512Bf16: return avx512_bf16::kLoops;
  }
  return scalar::kLoops;
}

Isa best_isa() {
  static const Isa best = runnable_isas().back();
  return best;
}

const Loops& loops() {
  static const Loops& chosen = loops_for(best_isa());
  return chosen;
}

}  // namespace ntp::tensor::simd
