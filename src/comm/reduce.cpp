#include "comm/reduce.h"

#include <algorithm>
#include <cstdint>

namespace ntp::comm {

namespace {

template <class T>
void sum(void* out, const void* a, const void* b, std::size_t n) {
  auto* o = static_cast<T*>(out);
  const auto* x = static_cast<const T*>(a);
  const auto* y = static_cast<const T*>(b);
  for (std::size_t i = 0; i < n; ++i) o[i] = x[i] + y[i];
}

template <class T>
void max(void* out, const void* a, const void* b, std::size_t n) {
  auto* o = static_cast<T*>(out);
  const auto* x = static_cast<const T*>(a);
  const auto* y = static_cast<const T*>(b);
  for (std::size_t i = 0; i < n; ++i) o[i] = std::max(x[i], y[i]);
}

template <class T>
ReduceFn pick(ReduceOp op) {
  return op == ReduceOp::kSum ? &sum<T> : &max<T>;
}

}  // namespace

ReduceFn reduce_fn(DataType type, ReduceOp op) {
  switch (type) {
    case DataType::kFloat32: return pick<float>(op);
    case DataType::kFloat64: return pick<double>(op);
    case DataType::kInt32: return pick<std::int32_t>(op);
    case DataType::kInt64: return pick<std::int64_t>(op);
    case DataType::kUint8: break;
  }
  throw_bad_input("reduce", std::string("cannot reduce ") + to_string(type) + " elements");
}

void reduce_into(View acc, const void* other, ReduceOp op) {
  reduce_fn(acc.type, op)(acc.data, acc.data, other, acc.count);
}

}  // namespace ntp::comm
