#include "tensor/matmul.h"

#include <gtest/gtest.h>

#include <array>
#include <cmath>
#include <cstring>
#include <random>
#include <vector>

namespace ntp::tensor {
namespace {

std::vector<float> random_vector(std::size_t n, std::mt19937& rng) {
  std::normal_distribution<float> d;
  std::vector<float> v(n);
  for (auto& x : v) x = d(rng);
  return v;
}

// W element (o, i) for either storage layout.
float weight_at(const std::vector<float>& w, WeightLayout layout, std::int64_t o, std::int64_t i,
                std::int64_t in, std::int64_t out) {
  return layout == WeightLayout::kOutIn ? w[static_cast<std::size_t>(o * in + i)]
                                        : w[static_cast<std::size_t>(i * out + o)];
}

struct MatmulCase {
  WeightLayout layout;
  GemmBackend backend;
  int threads;
};

class MatmulTest : public ::testing::TestWithParam<MatmulCase> {
 protected:
  Context ctx_{{GetParam().threads, GetParam().backend}};
};

TEST_P(MatmulTest, ForwardAndBackwardMatchNaiveLoops) {
  const WeightLayout layout = GetParam().layout;
  const std::int64_t n = 5, in = 7, out = 3;
  std::mt19937 rng(1);
  const auto x = random_vector(n * in, rng), w = random_vector(in * out, rng);
  const auto b = random_vector(out, rng), dy = random_vector(n * out, rng);
  std::vector<float> y(n * out);
  matmul_forward(ctx_, y.data(), x.data(), w.data(), b.data(), n, in, out, layout);
  for (std::int64_t r = 0; r < n; ++r)
    for (std::int64_t o = 0; o < out; ++o) {
      double ref = b[o];
      for (std::int64_t i = 0; i < in; ++i)
        ref += x[r * in + i] * weight_at(w, layout, o, i, in, out);
      EXPECT_NEAR(y[r * out + o], ref, 1e-5);
    }
  // Backward accumulates onto existing values: start from 1.
  std::vector<float> dx(n * in, 1.0f), dw(in * out, 1.0f), db(out, 1.0f);
  matmul_backward(ctx_, dx.data(), dw.data(), db.data(), dy.data(), x.data(), w.data(), n, in, out,
                  layout);
  for (std::int64_t r = 0; r < n; ++r)
    for (std::int64_t i = 0; i < in; ++i) {
      double ref = 1.0;
      for (std::int64_t o = 0; o < out; ++o) ref += dy[r * out + o] * weight_at(w, layout, o, i, in, out);
      EXPECT_NEAR(dx[r * in + i], ref, 1e-5);
    }
  for (std::int64_t o = 0; o < out; ++o) {
    double refb = 1.0;
    for (std::int64_t r = 0; r < n; ++r) refb += dy[r * out + o];
    EXPECT_NEAR(db[o], refb, 1e-5);
    for (std::int64_t i = 0; i < in; ++i) {
      double ref = 1.0;
      for (std::int64_t r = 0; r < n; ++r) ref += dy[r * out + o] * x[r * in + i];
      EXPECT_NEAR(weight_at(dw, layout, o, i, in, out), ref, 1e-5);
    }
  }
}

// The bias gradient, split by column over the pool, adds each column's rows in
// order: the bits of one serial float loop, at any thread count.
TEST(BiasBackward, GivesTheSerialRowOrderBitsAtAnyThreadCount) {
  const std::int64_t n = 37, dim = 200;  // 200: not a multiple of the column grain
  std::mt19937 rng(3);
  const auto dy = random_vector(n * dim, rng), start = random_vector(dim, rng);
  std::vector<float> serial = start;
  for (std::int64_t i = 0; i < n; ++i)
    for (std::int64_t j = 0; j < dim; ++j) serial[j] += dy[i * dim + j];
  for (const int threads : {1, 2, 3}) {
    Context ctx({threads});
    std::vector<float> db = start;
    bias_backward(ctx, db.data(), dy.data(), n, dim);
    EXPECT_EQ(std::memcmp(db.data(), serial.data(), db.size() * sizeof(float)), 0) << threads << " threads";
    db[dim - 1] = std::nextafter(db[dim - 1], 1e30f);  // the compare sees one ulp
    EXPECT_NE(std::memcmp(db.data(), serial.data(), db.size() * sizeof(float)), 0);
  }
}

// The bias is filled into each thread's block of the output just before its
// GEMM: blocks of rows (more rows than outputs) and of columns (fewer), over a
// stale output that must be overwritten, and a product with no inputs (the
// output is the bias).
TEST_P(MatmulTest, ForwardWithBiasFillsEveryBlockOverAStaleOutput) {
  const WeightLayout layout = GetParam().layout;
  std::mt19937 rng(5);
  for (const auto [n, in, out] : {std::array<std::int64_t, 3>{70, 9, 40}, std::array<std::int64_t, 3>{40, 9, 70},
                                  std::array<std::int64_t, 3>{6, 0, 50}}) {
    const auto x = random_vector(static_cast<std::size_t>(n * in), rng);
    const auto w = random_vector(static_cast<std::size_t>(in * out), rng);
    const auto b = random_vector(static_cast<std::size_t>(out), rng);
    std::vector<float> y(static_cast<std::size_t>(n * out), std::nanf(""));
    matmul_forward(ctx_, y.data(), x.data(), w.data(), b.data(), n, in, out, layout);
    for (std::int64_t r = 0; r < n; ++r)
      for (std::int64_t o = 0; o < out; ++o) {
        double ref = b[o];
        for (std::int64_t i = 0; i < in; ++i) ref += x[r * in + i] * weight_at(w, layout, o, i, in, out);
        ASSERT_NEAR(y[r * out + o], ref, 1e-5) << n << "x" << in << "x" << out << " at " << r << "," << o;
      }
  }
}

TEST_P(MatmulTest, EmptyUnitSetsAreNoOps) {
  // A rank holding no units of a kind has out_dim (or in_dim) 0.
  const std::int64_t n = 4, in = 3;
  std::vector<float> x(n * in, 1.0f), dx(n * in, 2.0f);
  matmul_forward(ctx_, nullptr, x.data(), nullptr, nullptr, n, in, 0, GetParam().layout);
  matmul_backward(ctx_, dx.data(), nullptr, nullptr, nullptr, x.data(), nullptr, n, in, 0,
                  GetParam().layout);
  for (float v : dx) EXPECT_EQ(v, 2.0f);
  std::vector<float> y(n * 2, 5.0f);
  matmul_forward(ctx_, y.data(), nullptr, nullptr, nullptr, n, 0, 2, GetParam().layout);
  for (float v : y) EXPECT_EQ(v, 0.0f);
}

std::vector<MatmulCase> every_case() {
  std::vector<MatmulCase> cases;
  for (auto layout : {WeightLayout::kOutIn, WeightLayout::kInOut})
    for (auto backend : {GemmBackend::kOneDnn, GemmBackend::kOpenBlas})
      for (int threads : {1, 2, 3}) cases.push_back({layout, backend, threads});
  return cases;
}

INSTANTIATE_TEST_SUITE_P(LayoutsBackendsThreads, MatmulTest, ::testing::ValuesIn(every_case()));

}  // namespace
}  // namespace ntp::tensor
