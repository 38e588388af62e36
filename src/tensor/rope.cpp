#include "tensor/rope.h"

#include <cmath>
#include <stdexcept>

#include "tensor/gpu.h"

namespace ntp::tensor {

RopeTable rope_table(std::int64_t positions, std::int64_t head_dim, float theta) {
  if (head_dim % 2 != 0) throw std::invalid_argument("rope: head_dim must be even");
  RopeTable t{positions, head_dim, {}, {}};
  const std::int64_t pairs = head_dim / 2;
  t.cos.resize(static_cast<std::size_t>(positions * pairs));
  t.sin.resize(t.cos.size());
  for (std::int64_t pos = 0; pos < positions; ++pos) {
    for (std::int64_t j = 0; j < pairs; ++j) {
      const float freq = 1.0f / std::pow(theta, static_cast<float>(2 * j) / static_cast<float>(head_dim));
      const float angle = static_cast<float>(pos) * freq;
      t.cos[static_cast<std::size_t>(pos * pairs + j)] = std::cos(angle);
      t.sin[static_cast<std::size_t>(pos * pairs + j)] = std::sin(angle);
    }
  }
  return t;
}

namespace {

// Rotates the query and key heads of every row by `sign` times its angles:
// (x0, x1) -> (x0 c - s x1, x0 s + x1 c) with s = sign * sin.
void rotate(Context& ctx, float* qkv, const AttentionShape& shape, const RopeTable& table, float sign) {
  if (shape.seq > table.positions || shape.head_dim != table.head_dim)
    throw std::invalid_argument("rope: the table does not cover the sequence or head size");
  const std::int64_t hd = shape.head_dim, pairs = hd / 2;
  const std::int64_t rotated = shape.group + 1;  // query heads and the key head of a group
  ctx.pool().parallel_for(shape.batch * shape.seq, 16, [&](std::int64_t begin, std::int64_t end) {
    for (std::int64_t row = begin; row < end; ++row) {
      const float* c = table.cos.data() + (row % shape.seq) * pairs;
      const float* s = table.sin.data() + (row % shape.seq) * pairs;
      for (std::int64_t g = 0; g < shape.groups(); ++g) {
        float* group = qkv + row * shape.qkv_row() + g * (shape.group + 2) * hd;
        for (std::int64_t h = 0; h < rotated; ++h) {
          float* x = group + h * hd;
          for (std::int64_t j = 0; j < pairs; ++j) {
            const float x0 = x[2 * j], x1 = x[2 * j + 1], sn = sign * s[j];
            x[2 * j] = x0 * c[j] - x1 * sn;
            x[2 * j + 1] = x0 * sn + x1 * c[j];
          }
        }
      }
    }
  });
}

}  // namespace

void rope_forward(Context& ctx, float* qkv, const AttentionShape& shape, const RopeTable& table) {
  NTP_ON_GPU(ctx, rope_forward, qkv, shape, table);
  rotate(ctx, qkv, shape, table, 1.0f);
}

void rope_backward(Context& ctx, float* dqkv, const AttentionShape& shape, const RopeTable& table) {
  NTP_ON_GPU(ctx, rope_backward, dqkv, shape, table);
  rotate(ctx, dqkv, shape, table, -1.0f);
}

}  // namespace ntp::tensor
