#pragma once
// A zero-initialised, 64-byte aligned float array: the storage behind every
// flat parameter, gradient, optimizer-state and activation tensor.
#include <cstddef>
#include <memory>
#include <span>

namespace ntp::tensor {

class Buffer {
 public:
  Buffer() = default;
  explicit Buffer(std::size_t count);

  float* data() { return data_.get(); }
  const float* data() const { return data_.get(); }
  std::size_t size() const { return size_; }
  std::span<float> span() { return {data_.get(), size_}; }
  std::span<const float> span() const { return {data_.get(), size_}; }
  void zero();

 private:
  struct Free {
    void operator()(float* p) const;
  };
  std::unique_ptr<float[], Free> data_;
  std::size_t size_ = 0;
};

}  // namespace ntp::tensor
