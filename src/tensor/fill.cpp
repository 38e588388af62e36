#include "tensor/fill.h"

#include <algorithm>

#include "tensor/gpu.h"

namespace ntp::tensor {

namespace {
constexpr std::int64_t kGrain = 1 << 16;  // below 256 KiB one thread clears it
}  // namespace

void zero(Context& ctx, float* x, std::int64_t count) {
  NTP_ON_GPU(ctx, zero, x, count);
  ctx.pool().parallel_for(count, kGrain, [&](std::int64_t begin, std::int64_t end) {
    std::fill(x + begin, x + end, 0.0f);
  });
}

void copy_from_host(Context& ctx, float* dst, const float* host_src, std::int64_t count) {
  if (Gpu* gpu = ctx.gpu()) return gpu->upload(dst, host_src, static_cast<std::size_t>(count) * sizeof(float));
  std::copy_n(host_src, count, dst);
}

void copy_to_host(Context& ctx, float* host_dst, const float* src, std::int64_t count) {
  if (Gpu* gpu = ctx.gpu()) return gpu->download(host_dst, src, static_cast<std::size_t>(count) * sizeof(float));
  std::copy_n(src, count, host_dst);
}

}  // namespace ntp::tensor
