#include "tensor/context.h"

#include <cblas.h>
#include <unistd.h>

#include <cstdint>
#include <mutex>
#include <stdexcept>

#include "tensor/buffer.h"
#include "tensor/gpu.h"

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

Context::Context(ThreadSetup setup)
    : setup_(checked(setup)), pool_(std::make_shared<ThreadPool>(setup_.threads)) {
  make_openblas_single_threaded();
  if (!setup_.cuda) return;
  if (!cuda_built())
    throw std::runtime_error("model.device = \"cuda\": this ntp was built without CUDA (no toolkit found "
                             "at configure time); use model.device = \"cpu\"");
  if (Gpu::count() == 0)
    throw std::runtime_error("model.device = \"cuda\": no CUDA device is visible to this process "
                             "(check the driver and CUDA_VISIBLE_DEVICES); use model.device = \"cpu\"");
  gpu_ = std::make_unique<Gpu>(setup_.gpu_device >= 0 ? setup_.gpu_device : Gpu::device_for_local_rank());
  ThreadSetup host_setup = setup_;
  host_setup.cuda = false;
  host_.reset(new Context(host_setup, pool_));
}

Context::Context(ThreadSetup setup, std::shared_ptr<ThreadPool> pool)
    : setup_(setup), pool_(std::move(pool)) {}

Context::~Context() = default;

Bf16Path Context::bf16_path() const {
  return setup_.emulate_bf16 || !cpu_has_bf16() ? Bf16Path::kEmulated : Bf16Path::kNative;
}

void Context::set_rounded_copy(const float* base, std::int64_t count, const Bf16* copy) {
  rounded_ = {base, count, copy};
}

void Context::clear_rounded_copy(const float* base) {
  if (rounded_.base == base) rounded_ = {};
}

const Bf16* Context::rounded_copy(const float* x, std::int64_t rows, std::int64_t cols, std::int64_t ld) const {
  if (rounded_.base == nullptr || rows <= 0) return nullptr;
  // Compared as addresses: x may belong to another allocation.
  const auto address = reinterpret_cast<std::uintptr_t>(x), base = reinterpret_cast<std::uintptr_t>(rounded_.base);
  if (address < base || (address - base) % sizeof(float) != 0) return nullptr;
  const auto at = static_cast<std::int64_t>((address - base) / sizeof(float));
  if (at >= rounded_.count || (rows - 1) * ld + cols > rounded_.count - at) return nullptr;
  return rounded_.copy + at;
}

Device Context::device() const { return gpu_ != nullptr ? Device::kCuda : Device::kCpu; }

std::string Context::describe() const {
  if (gpu_ != nullptr)
    return "cuda " + gpu_->describe() + ", cuBLAS fp32; host pool " + std::to_string(pool_->threads()) + " threads";
  std::string precision;
  if (setup_.precision == Precision::kBf16) {
    precision = bf16_path() == Bf16Path::kNative
                    ? "bf16 (oneDNN matmul, fp32 accumulation), "
                    : "bf16 emulated (no avx512_bf16: fp32 sgemm on bf16-rounded inputs), ";
  }
  return "gemm " + precision + describe_gemm_backend(setup_.gemm) + ", one call per pool thread; pool " +
         std::to_string(pool_->threads()) + " threads; cores online " +
         std::to_string(sysconf(_SC_NPROCESSORS_ONLN)) + (huge_pages() ? "; huge pages" : "; no huge pages");
}

}  // namespace ntp::tensor
