// The Llama kernels (RMSNorm, RoPE, SwiGLU, grouped-query attention) against
// central finite differences of a random projection of their output,
// L = sum r * f(x). Inputs are O(1) and f is smooth, so with h = 1e-2 in fp32
// the difference carries ~1e-4 of rounding and truncation error: we accept
// |fd - g| <= 2e-3 + 1e-2 |g|. Each check is also run against a deliberately
// wrong backward and must fail there.
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <functional>
#include <random>
#include <vector>

#include "tensor/attention.h"
#include "tensor/context.h"
#include "tensor/rmsnorm.h"
#include "tensor/rope.h"
#include "tensor/swiglu.h"
#include "reference_checks.h"

namespace ntp::tensor {
namespace {

using testing::differing_bits;
using testing::kDims;
using testing::random_vector;

// out = f(x), then L = sum r * out in double.
using Forward = std::function<std::vector<float>(const std::vector<float>& x)>;

double projected(const Forward& f, const std::vector<float>& x, const std::vector<float>& r) {
  const std::vector<float> out = f(x);
  double sum = 0.0;
  for (std::size_t i = 0; i < out.size(); ++i) sum += static_cast<double>(r[i]) * out[i];
  return sum;
}

// The number of elements of `grad` (dL/dx) that disagree with finite differences.
int mismatches(const Forward& f, std::vector<float> x, const std::vector<float>& r,
               const std::vector<float>& grad) {
  int bad = 0;
  const float h = 1e-2f;
  for (std::size_t i = 0; i < x.size(); ++i) {
    const float saved = x[i];
    x[i] = saved + h;
    const double plus = projected(f, x, r);
    x[i] = saved - h;
    const double minus = projected(f, x, r);
    x[i] = saved;
    const double fd = (plus - minus) / (2.0 * h);
    if (std::abs(fd - grad[i]) > 2e-3 + 1e-2 * std::abs(grad[i])) ++bad;
  }
  return bad;
}

struct RmsCase {
  std::int64_t n = 3, dim = 8;
  float eps = 1e-5f;
  Context ctx{{2}};
  std::vector<float> x = random_vector(24, 1), w = random_vector(8, 2, 1.0f), r = random_vector(24, 3);

  Forward of_input() {
    return [this](const std::vector<float>& in) {
      std::vector<float> out(in.size()), rstd(static_cast<std::size_t>(n));
      rmsnorm_forward(ctx, out.data(), rstd.data(), in.data(), w.data(), n, dim, eps);
      return out;
    };
  }
  Forward of_weight() {
    return [this](const std::vector<float>& weight) {
      std::vector<float> out(x.size()), rstd(static_cast<std::size_t>(n));
      rmsnorm_forward(ctx, out.data(), rstd.data(), x.data(), weight.data(), n, dim, eps);
      return out;
    };
  }
  // dx and dw from the backward kernel.
  std::pair<std::vector<float>, std::vector<float>> backward() {
    std::vector<float> out(x.size()), rstd(static_cast<std::size_t>(n));
    rmsnorm_forward(ctx, out.data(), rstd.data(), x.data(), w.data(), n, dim, eps);
    std::vector<float> dx(x.size(), 0.0f), dw(w.size(), 0.0f);
    rmsnorm_backward(ctx, dx.data(), dw.data(), r.data(), x.data(), w.data(), rstd.data(), n, dim);
    return {dx, dw};
  }
};

TEST(RmsNorm, BackwardMatchesFiniteDifferences) {
  RmsCase c;
  const auto [dx, dw] = c.backward();
  EXPECT_EQ(mismatches(c.of_input(), c.x, c.r, dx), 0);
  EXPECT_EQ(mismatches(c.of_weight(), c.w, c.r, dw), 0);
}

TEST(RmsNorm, CheckFailsWithoutTheNormalisationTerm) {
  RmsCase c;
  auto [dx, dw] = c.backward();
  // The broken variant treats the RMS as a constant: dx = s * w * dy.
  std::vector<float> out(c.x.size()), rstd(3);
  rmsnorm_forward(c.ctx, out.data(), rstd.data(), c.x.data(), c.w.data(), c.n, c.dim, c.eps);
  for (std::int64_t i = 0; i < c.n; ++i)
    for (std::int64_t j = 0; j < c.dim; ++j)
      dx[static_cast<std::size_t>(i * c.dim + j)] = rstd[i] * c.w[j] * c.r[i * c.dim + j];
  EXPECT_GT(mismatches(c.of_input(), c.x, c.r, dx), 0);
}

TEST(RmsNorm, NormalisesToUnitRms) {
  RmsCase c;
  std::vector<float> ones(8, 1.0f), out(c.x.size()), rstd(3);
  rmsnorm_forward(c.ctx, out.data(), rstd.data(), c.x.data(), ones.data(), c.n, c.dim, c.eps);
  for (std::int64_t i = 0; i < c.n; ++i) {
    double sq = 0.0;
    for (std::int64_t j = 0; j < c.dim; ++j) sq += out[i * c.dim + j] * out[i * c.dim + j];
    EXPECT_NEAR(sq / c.dim, 1.0, 1e-4);
  }
}

TEST(SwiGlu, BackwardMatchesFiniteDifferences) {
  Context ctx({2});
  const std::int64_t count = 20;
  const auto x = random_vector(2 * count, 4), r = random_vector(count, 5);
  const Forward f = [&](const std::vector<float>& in) {
    std::vector<float> out(static_cast<std::size_t>(count));
    swiglu_forward(ctx, out.data(), in.data(), count);
    return out;
  };
  std::vector<float> dx(x.size(), 0.0f);
  swiglu_backward(ctx, dx.data(), x.data(), r.data(), count);
  EXPECT_EQ(mismatches(f, x, r, dx), 0);
  // Broken: silu'(g) taken as sigmoid(g) (the x * sigmoid' term dropped).
  for (std::int64_t i = 0; i < count; ++i) {
    const float g = x[2 * i], s = 1.0f / (1.0f + std::exp(-g));
    dx[2 * i] = r[i] * x[2 * i + 1] * s;
  }
  EXPECT_GT(mismatches(f, x, r, dx), 0);
}

// Two batch rows of 5 positions, 6 query heads over 2 KV groups, head_dim 4.
AttentionShape gqa_shape() { return {2, 5, 6, 4, 3}; }

TEST(Rope, BackwardMatchesFiniteDifferencesAndLeavesValuesAlone) {
  Context ctx({2});
  const AttentionShape s = gqa_shape();
  const RopeTable table = rope_table(8, s.head_dim, 10000.0f);
  const auto size = static_cast<std::size_t>(s.batch * s.seq * s.qkv_row());
  const auto x = random_vector(size, 6), r = random_vector(size, 7);
  const Forward f = [&](const std::vector<float>& in) {
    std::vector<float> out = in;
    rope_forward(ctx, out.data(), s, table);
    return out;
  };
  std::vector<float> dx = r;
  rope_backward(ctx, dx.data(), s, table);
  EXPECT_EQ(mismatches(f, x, r, dx), 0);
  // Value heads (the last head of each group) pass unchanged; position 0 too.
  const std::vector<float> y = f(x);
  for (std::int64_t row = 0; row < s.batch * s.seq; ++row)
    for (std::int64_t g = 0; g < s.groups(); ++g)
      for (std::int64_t e = 0; e < s.head_dim; ++e) {
        const auto at = static_cast<std::size_t>(row * s.qkv_row() + (g * (s.group + 2) + s.group + 1) * s.head_dim + e);
        EXPECT_EQ(y[at], x[at]);
      }
  for (std::int64_t e = 0; e < s.qkv_row(); ++e) EXPECT_EQ(y[static_cast<std::size_t>(e)], x[static_cast<std::size_t>(e)]);
  // Broken: the forward rotation used as its own gradient.
  std::vector<float> wrong = r;
  rope_forward(ctx, wrong.data(), s, table);
  EXPECT_GT(mismatches(f, x, r, wrong), 0);
}

TEST(Rope, RotatesInterleavedPairsByPositionTimesFrequency) {
  Context ctx({1});
  const AttentionShape s{1, 3, 1, 4, 1};  // one head: q, k, v of 4
  const RopeTable table = rope_table(3, 4, 100.0f);
  std::vector<float> qkv(static_cast<std::size_t>(3 * s.qkv_row()), 0.0f);
  for (int t = 0; t < 3; ++t) {
    qkv[static_cast<std::size_t>(t * 12 + 0)] = 1.0f;  // q pair 0 = (1, 0)
    qkv[static_cast<std::size_t>(t * 12 + 2)] = 1.0f;  // q pair 1 = (1, 0)
  }
  rope_forward(ctx, qkv.data(), s, table);
  // Position 2: pair 0 turns by 2 rad, pair 1 by 2 / 100^(2/4) = 0.2 rad.
  EXPECT_NEAR(qkv[24], std::cos(2.0f), 1e-6);
  EXPECT_NEAR(qkv[25], std::sin(2.0f), 1e-6);
  EXPECT_NEAR(qkv[26], std::cos(0.2f), 1e-6);
  EXPECT_NEAR(qkv[27], std::sin(0.2f), 1e-6);
}

// ---- the SIMD kernels against the plain loops they replaced (tensor::reference)

struct RmsRows {
  std::int64_t n, dim;
  std::vector<float> x, w, dy, out, rstd;
  RmsRows(std::int64_t rows, std::int64_t d)
      : n(rows), dim(d), x(random_vector(static_cast<std::size_t>(rows * d), 11)),
        w(random_vector(static_cast<std::size_t>(d), 12, 1.0f)), dy(random_vector(x.size(), 13)),
        out(x.size()), rstd(static_cast<std::size_t>(rows)) {}
};

TEST(RmsNormKernels, ForwardAndWeightGradientGiveTheReferenceBits) {
  Context ctx({2});
  for (const std::int64_t dim : kDims) {
    RmsRows r(5, dim);
    std::vector<float> ref_out(r.out.size()), ref_rstd(r.rstd.size());
    rmsnorm_forward(ctx, r.out.data(), r.rstd.data(), r.x.data(), r.w.data(), r.n, dim, 1e-5f);
    reference::rmsnorm_forward(ctx, ref_out.data(), ref_rstd.data(), r.x.data(), r.w.data(), r.n, dim, 1e-5f);
    EXPECT_EQ(differing_bits(r.out, ref_out), 0) << dim;
    EXPECT_EQ(differing_bits(r.rstd, ref_rstd), 0) << dim;
    std::vector<float> dx(r.x.size()), dw = random_vector(static_cast<std::size_t>(dim), 14), ref_dx = dx, ref_dw = dw;
    rmsnorm_backward(ctx, dx.data(), dw.data(), r.dy.data(), r.x.data(), r.w.data(), r.rstd.data(), r.n, dim);
    reference::rmsnorm_backward(ctx, ref_dx.data(), ref_dw.data(), r.dy.data(), r.x.data(), r.w.data(),
                                r.rstd.data(), r.n, dim);
    EXPECT_EQ(differing_bits(dw, ref_dw), 0) << dim;
    // The check sees one ulp.
    dw[0] = std::nextafter(dw[0], 1e30f);
    EXPECT_EQ(differing_bits(dw, ref_dw), 1) << dim;
  }
}

// The input gradient's row sum m = mean(w dy x s) runs in 16 lanes instead of
// one chain. The terms t_k are computed alike; any order of a float sum of N
// terms is within gamma(N-1) sum|t_k| of the exact sum (gamma(n) = n u /
// (1 - n u), u = 2^-24), so the two m differ by at most
//   dm = 2 gamma(N-1) sum|t_k| / N + 2 u |m|   (the division rounds once each).
// dx_j = (w_j dy_j - x_j s m) s then differs by s |x_j s| dm, plus the
// roundings of the products and difference that now see another m: at most
// 4 u s (|w_j dy_j| + 2 |x_j s m|). The two bounds add up to the tolerance.
// Returns the elements of `fast` outside it (dx accumulated from zero).
int outside_sum_order_bound(const RmsRows& r, const std::vector<float>& fast, const std::vector<float>& ref) {
  constexpr double u = 0x1p-24;
  int bad = 0;
  for (std::int64_t i = 0; i < r.n; ++i) {
    const double s = r.rstd[static_cast<std::size_t>(i)], N = static_cast<double>(r.dim);
    double abs_terms = 0.0, m = 0.0;
    for (std::int64_t k = 0; k < r.dim; ++k) {
      const auto at = static_cast<std::size_t>(i * r.dim + k);
      const double t = static_cast<double>(r.w[static_cast<std::size_t>(k)]) * r.dy[at] * r.x[at] * s;
      abs_terms += std::abs(t);
      m += t / N;
    }
    const double gamma = (N - 1.0) * u / (1.0 - (N - 1.0) * u);
    const double dm = 2.0 * gamma * abs_terms / N + 2.0 * u * std::abs(m);
    for (std::int64_t j = 0; j < r.dim; ++j) {
      const auto at = static_cast<std::size_t>(i * r.dim + j);
      const double xs = std::abs(static_cast<double>(r.x[at]) * s);
      const double wdy = std::abs(static_cast<double>(r.w[static_cast<std::size_t>(j)]) * r.dy[at]);
      const double tolerance = s * xs * dm + 4.0 * u * s * (wdy + 2.0 * xs * std::abs(m));
      bad += std::abs(static_cast<double>(fast[at]) - ref[at]) > tolerance;
    }
  }
  return bad;
}

TEST(RmsNormKernels, InputGradientIsTheReferenceUpToTheOrderOfItsRowSum) {
  Context ctx({2});
  for (const std::int64_t dim : kDims) {
    RmsRows r(5, dim);
    rmsnorm_forward(ctx, r.out.data(), r.rstd.data(), r.x.data(), r.w.data(), r.n, dim, 1e-5f);
    std::vector<float> dx(r.x.size(), 0.0f), ref_dx = dx, dw(static_cast<std::size_t>(dim)), ref_dw = dw;
    rmsnorm_backward(ctx, dx.data(), dw.data(), r.dy.data(), r.x.data(), r.w.data(), r.rstd.data(), r.n, dim);
    reference::rmsnorm_backward(ctx, ref_dx.data(), ref_dw.data(), r.dy.data(), r.x.data(), r.w.data(),
                                r.rstd.data(), r.n, dim);
    EXPECT_EQ(outside_sum_order_bound(r, dx, ref_dx), 0) << dim;
    // Broken: the row sum missing its last term (what a lane loop that drops
    // the tail would give) moves the elements with a large x_j s outside.
    if (dim < 16) continue;
    std::vector<float> broken = ref_dx;
    for (std::int64_t i = 0; i < r.n; ++i) {
      const auto last = static_cast<std::size_t>(i * dim + dim - 1);
      const float s = r.rstd[static_cast<std::size_t>(i)];
      const float dropped = r.w[static_cast<std::size_t>(dim - 1)] * r.dy[last] * r.x[last] * s / static_cast<float>(dim);
      for (std::int64_t j = 0; j < dim; ++j) {
        const auto at = static_cast<std::size_t>(i * dim + j);
        broken[at] += r.x[at] * s * dropped * s;
      }
    }
    EXPECT_GT(outside_sum_order_bound(r, broken, ref_dx), 0) << dim;
  }
}

TEST(GroupedQueryAttention, BackwardMatchesFiniteDifferences) {
  Context ctx({2});
  const AttentionShape s = gqa_shape();
  const auto rows = s.batch * s.seq;
  const auto x = random_vector(static_cast<std::size_t>(rows * s.qkv_row()), 8);
  const auto r = random_vector(static_cast<std::size_t>(rows * s.heads * s.head_dim), 9);
  std::vector<float> att(static_cast<std::size_t>(s.batch * s.heads * s.seq * s.seq));
  const Forward f = [&](const std::vector<float>& in) {
    std::vector<float> out(r.size());
    attention_forward(ctx, out.data(), att.data(), in.data(), s);
    return out;
  };
  f(x);
  std::vector<float> dx(x.size(), 0.0f);
  attention_backward(ctx, dx.data(), r.data(), x.data(), att.data(), s);
  EXPECT_EQ(mismatches(f, x, r, dx), 0);
  // Broken: the same kernel told the heads do not share keys (group 1 over
  // the same buffer reads other rows as keys).
  AttentionShape wrong_shape = s;
  wrong_shape.group = 1;
  wrong_shape.heads = s.groups() * (s.group + 2) / 3;
  std::vector<float> wrong(x.size(), 0.0f);
  attention_backward(ctx, wrong.data(), r.data(), x.data(), att.data(), wrong_shape);
  EXPECT_GT(mismatches(f, x, r, wrong), 0);
}

TEST(GroupedQueryAttention, GroupOfOneIsMultiHeadAttention) {
  // Query heads of one group read the same key and value: a group of 3 equals
  // 3 ordinary heads whose k and v are copies.
  Context ctx({1});
  const AttentionShape gqa{1, 4, 3, 2, 3};
  const AttentionShape mha{1, 4, 3, 2, 1};
  const auto packed = random_vector(static_cast<std::size_t>(4 * gqa.qkv_row()), 10);
  std::vector<float> expanded(static_cast<std::size_t>(4 * mha.qkv_row()));
  for (int t = 0; t < 4; ++t)
    for (int h = 0; h < 3; ++h)
      for (int e = 0; e < 2; ++e) {
        const float* row = packed.data() + t * gqa.qkv_row();
        float* out = expanded.data() + t * mha.qkv_row() + h * 6;
        out[e] = row[h * 2 + e];
        out[2 + e] = row[6 + e];
        out[4 + e] = row[8 + e];
      }
  std::vector<float> y1(24), y2(24), att(3 * 16);
  attention_forward(ctx, y1.data(), att.data(), packed.data(), gqa);
  attention_forward(ctx, y2.data(), att.data(), expanded.data(), mha);
  EXPECT_EQ(y1, y2);
}

}  // namespace
}  // namespace ntp::tensor
