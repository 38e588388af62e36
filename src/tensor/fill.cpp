#include "tensor/fill.h"

#include <algorithm>

namespace ntp::tensor {

namespace {
constexpr std::int64_t kGrain = 1 << 16;  // below 256 KiB one thread clears it
}  // namespace

void zero(Context& ctx, float* x, std::int64_t count) {
  ctx.pool().parallel_for(count, kGrain, [&](std::int64_t begin, std::int64_t end) {
    std::fill(x + begin, x + end, 0.0f);
  });
}

}  // namespace ntp::tensor
