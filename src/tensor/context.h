#pragma once
// The execution context of the kernels. On the CPU: one pool of threads that
// runs the GEMMs (each split into one single-threaded library call per thread)
// and every other loop, and the sgemm library the GEMMs use. One pool means no
// library thread spins on a core the pool needs. With device cuda the context
// also owns a Gpu (tensor/gpu.h): every kernel called with it runs on that GPU,
// on device pointers; host() is the CPU context beside it (the same pool) for
// work on host memory (the optimizer on the master weights, norms). The kernel
// signatures are the same for both.
#include <array>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "tensor/gemm_backend.h"
#include "tensor/thread_pool.h"

namespace ntp::tensor {

class Gpu;
enum class Device;

struct ThreadSetup {
  int threads = 1;  // pool threads for GEMMs and every other loop, the caller included
  GemmBackend gemm = GemmBackend::kOneDnn;
  bool cuda = false;    // the kernels run on a GPU (model.device = "cuda")
  int gpu_device = -1;  // which one; -1: Gpu::device_for_local_rank()
  Precision precision = Precision::kFp32;  // of the GEMMs' inputs (model.precision)
  // bf16 GEMMs emulated (fp32 sgemm on the rounded inputs) even on a CPU with
  // the bf16 dot product: what a CPU without it runs, for tests.
  bool emulate_bf16 = false;
};

class Context {
 public:
  // Throws std::runtime_error naming the device when setup.cuda asks for a
  // GPU this process cannot use (none visible, or a build without CUDA).
  explicit Context(ThreadSetup setup);
  ~Context();
  Context(const Context&) = delete;
  Context& operator=(const Context&) = delete;

  ThreadPool& pool() { return *pool_; }
  // The GPU the kernels run on; null for a CPU context.
  Gpu* gpu() { return gpu_.get(); }
  Device device() const;
  // The CPU context for host memory: this one, or the GPU context's twin.
  Context& host() { return host_ != nullptr ? *host_ : *this; }
  const ThreadSetup& setup() const { return setup_; }
  GemmBackend gemm_backend() const { return setup_.gemm; }
  Precision precision() const { return setup_.precision; }
  // How this context's bf16 GEMMs run: natively where the CPU has AVX512-BF16,
  // else (or with setup.emulate_bf16) emulated; the same rounding points either way.
  Bf16Path bf16_path() const;
  // Two buffers for the operands of gemm()'s bf16 GEMMs, rounded once per
  // call, or once for both of a linear layer's backward GEMMs (the owning
  // thread's, like gemm_seconds).
  std::vector<Bf16>& bf16_scratch(int slot) { return bf16_scratch_.at(static_cast<std::size_t>(slot)); }
  // A bf16 copy of a block of fp32 memory (a model's weights, which Model
  // keeps current: rounded again only after they change). While it is set, a
  // bf16 GEMM operand that lies inside [base, base + count) is read from the
  // copy, at the same offset and leading dimension, instead of being rounded
  // again; every other operand is rounded per call. One block at a time;
  // clear_rounded_copy(base) ends it if base is still the one set.
  void set_rounded_copy(const float* base, std::int64_t count, const Bf16* copy);
  void clear_rounded_copy(const float* base);
  // The copy's elements for an operand of `rows` rows of `cols` at leading
  // dimension ld starting at x, or null when the operand is not all inside the block.
  const Bf16* rounded_copy(const float* x, std::int64_t rows, std::int64_t cols, std::int64_t ld) const;
  // Wall-clock seconds spent in gemm() on this context so far, and in the
  // attention's per-head sgemm calls (their thread-seconds over the pool's
  // threads); the rest of a step is the non-GEMM kernels, the sync and the
  // framework.
  double gemm_seconds() const { return gemm_seconds_; }
  void add_gemm_seconds(double seconds) { gemm_seconds_ += seconds; }
  // "gemm oneDNN 2.6.3, avx512_core_bf16, one call per pool thread; pool 2 threads; cores online 2;
  // huge pages"; with bf16 GEMMs "gemm bf16 (oneDNN matmul, fp32 accumulation) ..." or
  // "gemm bf16 emulated (no avx512_bf16: fp32 sgemm on bf16-rounded inputs) ..."
  std::string describe() const;

 private:
  Context(ThreadSetup setup, std::shared_ptr<ThreadPool> pool);  // host() of a GPU context

  ThreadSetup setup_;
  std::shared_ptr<ThreadPool> pool_;
  std::unique_ptr<Gpu> gpu_;
  std::unique_ptr<Context> host_;  // GPU contexts only
  double gemm_seconds_ = 0.0;  // only the thread that owns the context calls gemm()
  std::array<std::vector<Bf16>, 2> bf16_scratch_;
  struct RoundedCopy {
    const float* base = nullptr;
    std::int64_t count = 0;
    const Bf16* copy = nullptr;
  } rounded_;  // see set_rounded_copy
};

}  // namespace ntp::tensor
