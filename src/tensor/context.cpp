#include "tensor/context.h"

#include <cblas.h>
#include <unistd.h>

#include <stdexcept>

namespace ntp::tensor {

namespace {
ThreadSetup checked(ThreadSetup setup) {
  if (setup.blas_threads < 1) throw std::invalid_argument("threads: blas_threads must be >= 1");
  if (setup.pool_threads < 1) throw std::invalid_argument("threads: pool_threads must be >= 1");
  return setup;
}
}  // namespace

Context::Context(ThreadSetup setup, bool apply_blas)
    : setup_(checked(setup)), pool_(setup_.pool_threads) {
  if (apply_blas) openblas_set_num_threads(setup_.blas_threads);
}

std::string Context::describe() const {
  const int parallel = openblas_get_parallel();  // 0 sequential, 1 pthreads, 2 OpenMP
  const char* kind = parallel == 0 ? "sequential" : parallel == 1 ? "pthreads" : "openmp";
  return std::string("OpenBLAS [") + openblas_get_config() + "] " +
         std::to_string(openblas_get_num_threads()) + " threads (" + kind + "); pool " +
         std::to_string(pool_.threads()) + " threads; cores online " +
         std::to_string(sysconf(_SC_NPROCESSORS_ONLN));
}

}  // namespace ntp::tensor
