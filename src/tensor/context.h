#pragma once
// The execution context of the CPU kernels: how many threads OpenBLAS uses for
// GEMMs and how many the pool uses for every other loop. A CUDA backend would
// put its stream and handles here; the kernel signatures would not change.
#include <string>

#include "tensor/thread_pool.h"

namespace ntp::tensor {

struct ThreadSetup {
  int blas_threads = 1;  // OpenBLAS threads (process-wide: set per process, not per rank thread)
  int pool_threads = 1;  // threads for the non-GEMM loops, the caller included
};

class Context {
 public:
  // Applies setup.blas_threads to OpenBLAS unless apply_blas is false (ranks
  // run as threads of one process share OpenBLAS and set it once).
  explicit Context(ThreadSetup setup, bool apply_blas = true);

  ThreadPool& pool() { return pool_; }
  const ThreadSetup& setup() const { return setup_; }
  // "OpenBLAS <config>: 2 threads (pthreads); pool: 2 threads; cores online: 2"
  std::string describe() const;

 private:
  ThreadSetup setup_;
  ThreadPool pool_;
};

}  // namespace ntp::tensor
