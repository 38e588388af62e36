#include "tensor/buffer.h"

#include <sys/mman.h>

#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <new>

#include "tensor/gpu.h"

namespace ntp::tensor {

namespace {
constexpr std::size_t kAlignment = 64;  // one cache line; enough for AVX-512 loads
// Buffers of at least one huge page are mapped on their own, aligned to one
// and asked to be backed by transparent huge pages (THP in "madvise" mode,
// Debian's default).
constexpr std::size_t kHugePage = std::size_t{2} << 20;
std::atomic<bool> g_huge_pages{true};

// A fresh anonymous mapping of `bytes` (a multiple of kHugePage) starting on
// a huge-page boundary. The kernel hands it out zeroed and touches nothing:
// each page is faulted in (and cleared) by its first use, which for the
// large tensors is a kernel running on every pool thread, not one memset on
// the thread that allocates. On a virtual machine whose host backs freed
// guest memory lazily that first touch is the cost of a cold start
// (docs/model.md), so spreading it matters.
void* map_aligned(std::size_t bytes, bool huge) {
  const std::size_t padded = bytes + kHugePage;
  void* raw = mmap(nullptr, padded, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (raw == MAP_FAILED) throw std::bad_alloc();
  const auto start = reinterpret_cast<std::uintptr_t>(raw);
  const std::uintptr_t aligned = (start + kHugePage - 1) / kHugePage * kHugePage;
  const std::size_t head = aligned - start;
  if (head > 0) munmap(raw, head);
  const std::size_t tail = padded - head - bytes;
  if (tail > 0) munmap(reinterpret_cast<void*>(aligned + bytes), tail);
  auto* p = reinterpret_cast<void*>(aligned);
  // A hint either way: without THP it fails, harmlessly. "No" matters where
  // THP is "always".
  (void)madvise(p, bytes, huge ? MADV_HUGEPAGE : MADV_NOHUGEPAGE);
  return p;
}
}  // namespace

void set_huge_pages(bool on) { g_huge_pages.store(on, std::memory_order_relaxed); }
bool huge_pages() { return g_huge_pages.load(std::memory_order_relaxed); }

void Buffer::Free::operator()(float* p) const {
  if (device) {
    gpu_free(p);
  } else if (mapped_bytes > 0) {
    munmap(p, mapped_bytes);
  } else {
    std::free(p);
  }
}

Buffer::Buffer(std::size_t count) : size_(count) {
  if (count == 0) return;
  const std::size_t raw = count * sizeof(float);
  if (raw >= kHugePage) {
    const std::size_t bytes = (raw + kHugePage - 1) / kHugePage * kHugePage;
    data_ = std::unique_ptr<float[], Free>(static_cast<float*>(map_aligned(bytes, huge_pages())), Free{bytes, false});
    return;  // already zero
  }
  const std::size_t bytes = (raw + kAlignment - 1) / kAlignment * kAlignment;
  auto* p = static_cast<float*>(std::aligned_alloc(kAlignment, bytes));
  if (p == nullptr) throw std::bad_alloc();
  data_ = std::unique_ptr<float[], Free>(p, Free{0, false});
  zero();
}

Buffer::Buffer(std::size_t count, Gpu* gpu) : Buffer(gpu == nullptr ? count : 0) {
  if (gpu == nullptr || count == 0) return;
  size_ = count;
  gpu_ = gpu;
  data_ = std::unique_ptr<float[], Free>(static_cast<float*>(gpu->alloc(count * sizeof(float))), Free{0, true});
  zero();
}

void Buffer::zero() {
  if (gpu_ != nullptr) {
    if (size_ > 0) gpu_->zero(data_.get(), size_ * sizeof(float));
    return;
  }
  if (size_ > 0) std::memset(data_.get(), 0, size_ * sizeof(float));
}

}  // namespace ntp::tensor
