#pragma once
// A zero-initialised, 64-byte aligned float array: the storage behind every
// flat parameter, gradient, optimizer-state and activation tensor. Buffers of
// 2 MiB or more are mappings of their own, zeroed by the kernel page by page
// at first touch rather than by a memset when they are made. A buffer made
// with a Gpu lives in that GPU's memory (zeroed on its stream): its data() is
// a device pointer, for kernels that run on that GPU and for Gpu's copies.
#include <cstddef>
#include <memory>
#include <span>

namespace ntp::tensor {

class Gpu;

// Whether buffers of 2 MiB or more ask for transparent huge pages (default
// yes): a process-wide choice, made once at start-up (the trainer applies
// model.huge_pages). Faster streaming passes (fewer TLB misses); on a virtual
// machine whose host backs freed guest memory lazily, the first touch of
// fresh huge pages costs more (docs/model.md).
void set_huge_pages(bool on);
bool huge_pages();

class Buffer {
 public:
  Buffer() = default;
  explicit Buffer(std::size_t count);
  // Host memory when gpu is null, else that GPU's.
  Buffer(std::size_t count, Gpu* gpu);

  float* data() { return data_.get(); }
  const float* data() const { return data_.get(); }
  std::size_t size() const { return size_; }
  std::span<float> span() { return {data_.get(), size_}; }
  std::span<const float> span() const { return {data_.get(), size_}; }
  void zero();
  bool on_gpu() const { return gpu_ != nullptr; }

 private:
  struct Free {
    std::size_t mapped_bytes;  // a mapping of its own (2 MiB or more), or 0: from the heap
    bool device;               // from Gpu::alloc
    void operator()(float* p) const;
  };
  std::unique_ptr<float[], Free> data_;
  std::size_t size_ = 0;
  Gpu* gpu_ = nullptr;
};

}  // namespace ntp::tensor
