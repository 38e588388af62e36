#include "tensor/context.h"

#include <cblas.h>
#include <unistd.h>

#include <mutex>
#include <stdexcept>

#include "tensor/buffer.h"

namespace ntp::tensor {

namespace {
ThreadSetup checked(ThreadSetup setup) {
  if (setup.threads < 1) throw std::invalid_argument("threads: threads must be >= 1");
  return setup;
}

// OpenBLAS's thread count is process-wide; the pool splits every GEMM, so
// OpenBLAS itself runs on the calling thread. Set once: ranks may run as threads
// of one process, and a concurrent set would race with their GEMMs.
void make_openblas_single_threaded() {
  static std::once_flag once;
  std::call_once(once, [] { openblas_set_num_threads(1); });
}
}  // namespace

Context::Context(ThreadSetup setup) : setup_(checked(setup)), pool_(setup_.threads) {
  make_openblas_single_threaded();
}

std::string Context::describe() const {
  return "gemm " + describe_gemm_backend(setup_.gemm) + ", one call per pool thread; pool " +
         std::to_string(pool_.threads()) + " threads; cores online " +
         std::to_string(sysconf(_SC_NPROCESSORS_ONLN)) + (huge_pages() ? "; huge pages" : "; no huge pages");
}

}  // namespace ntp::tensor
