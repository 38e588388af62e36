// LayerNorm's backward through the SIMD loops against the plain loops it
// replaced (tensor::reference): the parameter gradients bit for bit, the input
// gradient within the bound that the order of its two row sums allows, and
// each check shown to reject a broken variant.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <vector>

#include "tensor/context.h"
#include "tensor/layernorm.h"
#include "reference_checks.h"

namespace ntp::tensor {
namespace {

using testing::differing_bits;
using testing::kDims;
using testing::random_vector;

struct LnRows {
  std::int64_t n, dim;
  std::vector<float> x, w, b, dy, out, mean, rstd;
  LnRows(Context& ctx, std::int64_t rows, std::int64_t d)
      : n(rows), dim(d), x(random_vector(static_cast<std::size_t>(rows * d), 21, 0.5f)),
        w(random_vector(static_cast<std::size_t>(d), 22, 1.0f)), b(random_vector(static_cast<std::size_t>(d), 23)),
        dy(random_vector(x.size(), 24)), out(x.size()), mean(static_cast<std::size_t>(rows)),
        rstd(static_cast<std::size_t>(rows)) {
    layernorm_forward(ctx, out.data(), mean.data(), rstd.data(), x.data(), w.data(), b.data(), n, dim);
  }
  std::size_t at(std::int64_t i, std::int64_t j) const { return static_cast<std::size_t>(i * dim + j); }
  float xhat(std::int64_t i, std::int64_t j) const {
    return (x[at(i, j)] - mean[static_cast<std::size_t>(i)]) * rstd[static_cast<std::size_t>(i)];
  }
  float g(std::int64_t i, std::int64_t j) const { return w[static_cast<std::size_t>(j)] * dy[at(i, j)]; }
};

TEST(LayerNormKernels, ParameterGradientsGiveTheReferenceBits) {
  Context ctx({2});
  for (const std::int64_t dim : kDims) {
    LnRows r(ctx, 5, dim);
    std::vector<float> dx(r.x.size()), dw = random_vector(static_cast<std::size_t>(dim), 25), db = dw;
    std::vector<float> ref_dx = dx, ref_dw = dw, ref_db = db;
    layernorm_backward(ctx, dx.data(), dw.data(), db.data(), r.dy.data(), r.x.data(), r.w.data(), r.mean.data(),
                       r.rstd.data(), r.n, dim);
    reference::layernorm_backward(ctx, ref_dx.data(), ref_dw.data(), ref_db.data(), r.dy.data(), r.x.data(),
                                  r.w.data(), r.mean.data(), r.rstd.data(), r.n, dim);
    EXPECT_EQ(differing_bits(dw, ref_dw), 0) << dim;
    EXPECT_EQ(differing_bits(db, ref_db), 0) << dim;
    // The check sees one ulp.
    db[0] = std::nextafter(db[0], 1e30f);
    EXPECT_EQ(differing_bits(db, ref_db), 1) << dim;
  }
}

// The input gradient dx_j = (g_j - a - xhat_j b) s, with g = w dy,
// xhat = (x - mean) s, a = mean(g) and b = mean(g xhat), sums its two row
// means in 16 lanes instead of one chain. The terms are computed alike; any
// two orders of a float sum of N terms differ by at most 2 gamma(N-1) sum|t_k|
// (gamma(n) = n u / (1 - n u), u = 2^-24), and the division by N rounds once
// in each, so
//   da = 2 gamma(N-1) sum|g_k| / N + 2 u |a|,  db likewise over g_k xhat_k.
// dx_j then moves by s (da + |xhat_j| db), plus the roundings of the
// difference, product and scaling that now see another a and b: at most four
// roundings in each of the two results, 8 u s (|g_j| + |a| + |xhat_j b|).
// Returns the elements of `fast` outside that bound (dx accumulated from zero).
int outside_sum_order_bound(const LnRows& r, const std::vector<float>& fast, const std::vector<float>& ref) {
  constexpr double u = 0x1p-24;
  int bad = 0;
  for (std::int64_t i = 0; i < r.n; ++i) {
    const double s = r.rstd[static_cast<std::size_t>(i)], N = static_cast<double>(r.dim);
    double abs_g = 0.0, abs_gx = 0.0, a = 0.0, b = 0.0;
    for (std::int64_t k = 0; k < r.dim; ++k) {
      const double g = r.g(i, k), gx = static_cast<double>(r.g(i, k) * r.xhat(i, k));
      abs_g += std::abs(g);
      abs_gx += std::abs(gx);
      a += g / N;
      b += gx / N;
    }
    const double gamma = (N - 1.0) * u / (1.0 - (N - 1.0) * u);
    const double da = 2.0 * gamma * abs_g / N + 2.0 * u * std::abs(a);
    const double db = 2.0 * gamma * abs_gx / N + 2.0 * u * std::abs(b);
    for (std::int64_t j = 0; j < r.dim; ++j) {
      const double xhat = std::abs(static_cast<double>(r.xhat(i, j)));
      const double tolerance =
          s * (da + xhat * db) + 8.0 * u * s * (std::abs(static_cast<double>(r.g(i, j))) + std::abs(a) + xhat * std::abs(b));
      bad += std::abs(static_cast<double>(fast[r.at(i, j)]) - ref[r.at(i, j)]) > tolerance;
    }
  }
  return bad;
}

TEST(LayerNormKernels, InputGradientIsTheReferenceUpToTheOrderOfItsRowSums) {
  Context ctx({2});
  for (const std::int64_t dim : kDims) {
    LnRows r(ctx, 5, dim);
    std::vector<float> dx(r.x.size(), 0.0f), dw(static_cast<std::size_t>(dim)), db = dw;
    std::vector<float> ref_dx = dx, ref_dw = dw, ref_db = db;
    layernorm_backward(ctx, dx.data(), dw.data(), db.data(), r.dy.data(), r.x.data(), r.w.data(), r.mean.data(),
                       r.rstd.data(), r.n, dim);
    reference::layernorm_backward(ctx, ref_dx.data(), ref_dw.data(), ref_db.data(), r.dy.data(), r.x.data(),
                                  r.w.data(), r.mean.data(), r.rstd.data(), r.n, dim);
    EXPECT_EQ(outside_sum_order_bound(r, dx, ref_dx), 0) << dim;
    if (dim < 16) continue;
    // Broken: either row sum missing its last term (what a lane loop that
    // drops the tail would give).
    std::vector<float> no_last_g = ref_dx, no_last_gx = ref_dx;
    for (std::int64_t i = 0; i < r.n; ++i) {
      const float s = r.rstd[static_cast<std::size_t>(i)], N = static_cast<float>(dim);
      const float g_last = r.g(i, dim - 1), gx_last = g_last * r.xhat(i, dim - 1);
      for (std::int64_t j = 0; j < dim; ++j) {
        no_last_g[r.at(i, j)] += g_last / N * s;
        no_last_gx[r.at(i, j)] += r.xhat(i, j) * gx_last / N * s;
      }
    }
    EXPECT_GT(outside_sum_order_bound(r, no_last_g, ref_dx), 0) << dim;
    EXPECT_GT(outside_sum_order_bound(r, no_last_gx, ref_dx), 0) << dim;
  }
}

}  // namespace
}  // namespace ntp::tensor
