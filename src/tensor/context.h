#pragma once
// The execution context of the CPU kernels: one pool of threads that runs the
// GEMMs (each split into one single-threaded library call per thread) and every
// other loop, and the sgemm library the GEMMs use. One pool means no library
// thread spins on a core the pool needs. A CUDA backend would put its stream and
// handles here; the kernel signatures would not change.
#include <string>

#include "tensor/gemm_backend.h"
#include "tensor/thread_pool.h"

namespace ntp::tensor {

struct ThreadSetup {
  int threads = 1;  // pool threads for GEMMs and every other loop, the caller included
  GemmBackend gemm = GemmBackend::kOneDnn;
};

class Context {
 public:
  explicit Context(ThreadSetup setup);

  ThreadPool& pool() { return pool_; }
  const ThreadSetup& setup() const { return setup_; }
  GemmBackend gemm_backend() const { return setup_.gemm; }
  // Wall-clock seconds spent in gemm() on this context so far, and in the
  // attention's per-head sgemm calls (their thread-seconds over the pool's
  // threads); the rest of a step is the non-GEMM kernels, the sync and the
  // framework.
  double gemm_seconds() const { return gemm_seconds_; }
  void add_gemm_seconds(double seconds) { gemm_seconds_ += seconds; }
  // "gemm oneDNN 2.6.3, avx512_core_bf16, one call per pool thread; pool 2 threads; cores online 2;
  // huge pages"
  std::string describe() const;

 private:
  ThreadSetup setup_;
  ThreadPool pool_;
  double gemm_seconds_ = 0.0;  // only the thread that owns the context calls gemm()
};

}  // namespace ntp::tensor
