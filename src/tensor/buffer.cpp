#include "tensor/buffer.h"

#include <sys/mman.h>

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <new>

namespace ntp::tensor {

namespace {
constexpr std::size_t kAlignment = 64;  // one cache line; enough for AVX-512 loads
// Buffers of at least one huge page are aligned to it and asked to be backed
// by transparent huge pages (THP in "madvise" mode, Debian's default).
constexpr std::size_t kHugePage = std::size_t{2} << 20;
std::atomic<bool> g_huge_pages{true};
}  // namespace

void set_huge_pages(bool on) { g_huge_pages.store(on, std::memory_order_relaxed); }
bool huge_pages() { return g_huge_pages.load(std::memory_order_relaxed); }

void Buffer::Free::operator()(float* p) const { std::free(p); }

Buffer::Buffer(std::size_t count) : size_(count) {
  if (count == 0) return;
  const std::size_t raw = count * sizeof(float);
  const bool huge = raw >= kHugePage && huge_pages();
  const std::size_t align = huge ? kHugePage : kAlignment;
  const std::size_t bytes = (raw + align - 1) / align * align;
  auto* p = static_cast<float*>(std::aligned_alloc(align, bytes));
  if (p == nullptr) throw std::bad_alloc();
  if (huge) (void)madvise(p, bytes, MADV_HUGEPAGE);  // a hint: without THP it fails, harmlessly
  data_.reset(p);
  zero();
}

void Buffer::zero() {
  if (size_ > 0) std::memset(data_.get(), 0, size_ * sizeof(float));
}

}  // namespace ntp::tensor
