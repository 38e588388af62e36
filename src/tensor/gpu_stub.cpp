// The Gpu of a build without CUDA: no device is ever visible, so no context
// has a GPU and no cuda:: kernel is reached.
#include <stdexcept>

#include "tensor/gpu.h"

namespace ntp::tensor {

struct Gpu::Impl {};

bool cuda_built() { return false; }
int Gpu::count() { return 0; }
int Gpu::device_for_local_rank() { return 0; }

Gpu::Gpu(int device) {
  throw std::runtime_error("cuda device " + std::to_string(device) + ": this ntp was built without CUDA");
}
Gpu::~Gpu() = default;
int Gpu::device() const { return -1; }
std::string Gpu::describe() const { return "none"; }
void* Gpu::alloc(std::size_t) { return nullptr; }
void Gpu::upload(void*, const void*, std::size_t) {}
void Gpu::download(void*, const void*, std::size_t) {}
void Gpu::zero(void*, std::size_t) {}
void Gpu::synchronize() {}
float* Gpu::workspace(std::size_t) { return nullptr; }
void gpu_free(void*) {}

}  // namespace ntp::tensor
