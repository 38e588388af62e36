#pragma once
// Element-wise reductions by data type, shared by backends that reduce on the
// CPU (Gloo's all-reduce callback, reduce-scatter's local step).
#include <cstddef>

#include "comm/group.h"

namespace ntp::comm {

// out[i] = op(a[i], b[i]) for n elements; out may alias a or b.
using ReduceFn = void (*)(void* out, const void* a, const void* b, std::size_t n);

// Throws CommError(kBadInput) for types that cannot be reduced (uint8).
ReduceFn reduce_fn(DataType type, ReduceOp op);

// acc[i] = op(acc[i], other[i]) over acc.count elements of acc.type.
void reduce_into(View acc, const void* other, ReduceOp op);

}  // namespace ntp::comm
