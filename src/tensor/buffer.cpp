#include "tensor/buffer.h"

#include <cstdlib>
#include <cstring>
#include <new>

namespace ntp::tensor {

namespace {
constexpr std::size_t kAlignment = 64;  // one cache line; enough for AVX-512 loads
}

void Buffer::Free::operator()(float* p) const { std::free(p); }

Buffer::Buffer(std::size_t count) : size_(count) {
  if (count == 0) return;
  const std::size_t bytes = (count * sizeof(float) + kAlignment - 1) / kAlignment * kAlignment;
  auto* p = static_cast<float*>(std::aligned_alloc(kAlignment, bytes));
  if (p == nullptr) throw std::bad_alloc();
  data_.reset(p);
  zero();
}

void Buffer::zero() {
  if (size_ > 0) std::memset(data_.get(), 0, size_ * sizeof(float));
}

}  // namespace ntp::tensor
