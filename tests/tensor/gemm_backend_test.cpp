// Both sgemm libraries against one fp64 reference, on the shapes of GPT-2's
// layers (768-long dot products) and on odd shapes that split unevenly across
// the pool, with every transpose combination.
#include "tensor/gemm_backend.h"

#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "tensor/context.h"
#include "tensor/matmul.h"

namespace ntp::tensor {
namespace {

// The documented agreement of a float GEMM with the fp64 product: relative to
// the dot product of magnitudes (sum |a_i b_i|), which bounds float rounding
// at about inner * 2^-24 in the worst case; blocked kernels do far better.
// 2e-6 of that norm leaves room for summation order (both libraries stay below
// 3e-7 here), not for a wrong element.
constexpr double kGemmTolerance = 2e-6;

struct Shape {
  std::int64_t m, k_out, inner;
  bool trans_a, trans_b;
};

struct Operands {
  std::vector<float> a, b, c;
};

Operands random_operands(const Shape& s, std::uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> d;
  Operands o{std::vector<float>(static_cast<std::size_t>(s.m * s.inner)),
             std::vector<float>(static_cast<std::size_t>(s.inner * s.k_out)),
             std::vector<float>(static_cast<std::size_t>(s.m * s.k_out))};
  for (auto* v : {&o.a, &o.b, &o.c})
    for (auto& x : *v) x = d(rng);
  return o;
}

// Element (i, j) of op(x) for a row-major x whose stored rows are `cols` long.
float op_at(const std::vector<float>& x, bool trans, std::int64_t i, std::int64_t j, std::int64_t rows,
            std::int64_t cols) {
  return trans ? x[static_cast<std::size_t>(j * rows + i)] : x[static_cast<std::size_t>(i * cols + j)];
}

std::vector<float> run_gemm(Context& ctx, const Shape& s, const Operands& o, float beta) {
  std::vector<float> c = o.c;
  gemm(ctx, s.trans_a, s.trans_b, s.m, s.k_out, s.inner, 0.5f, o.a.data(),
       s.trans_a ? s.m : s.inner, o.b.data(), s.trans_b ? s.inner : s.k_out, beta, c.data(), s.k_out);
  return c;
}

// The fp64 value and the magnitude (|alpha| sum |a b| + |beta c|) of every
// element of alpha op(a) op(b) + beta c, alpha = 0.5.
struct Reference {
  std::vector<double> value, magnitude;
};

Reference reference(const Shape& s, const Operands& o, float beta) {
  Reference r;
  for (std::int64_t i = 0; i < s.m; ++i)
    for (std::int64_t j = 0; j < s.k_out; ++j) {
      double sum = 0.0, norm = 0.0;
      for (std::int64_t p = 0; p < s.inner; ++p) {
        const double prod = static_cast<double>(op_at(o.a, s.trans_a, i, p, s.m, s.inner)) *
                            op_at(o.b, s.trans_b, p, j, s.inner, s.k_out);
        sum += prod;
        norm += std::abs(prod);
      }
      const double c0 = o.c[static_cast<std::size_t>(i * s.k_out + j)];
      r.value.push_back(0.5 * sum + beta * c0);
      r.magnitude.push_back(0.5 * norm + std::abs(beta * c0));
    }
  return r;
}

// The worst |x - y| / magnitude over every element.
double worst_error(const std::vector<double>& magnitude, const std::vector<float>& x,
                   const std::vector<double>& y) {
  double worst = 0.0;
  for (std::size_t i = 0; i < x.size(); ++i) worst = std::max(worst, std::abs(x[i] - y[i]) / magnitude[i]);
  return worst;
}

double worst_error(const Shape& s, const Operands& o, float beta, const std::vector<float>& c) {
  const Reference r = reference(s, o, beta);
  return worst_error(r.magnitude, c, r.value);
}

std::vector<Shape> shapes() {
  std::vector<Shape> out;
  for (bool ta : {false, true})
    for (bool tb : {false, true}) {
      out.push_back({37, 53, 768, ta, tb});   // GPT-2's 768-long dot products, odd split
      out.push_back({64, 200, 129, ta, tb});  // wider than tall: split by columns
      out.push_back({3, 5, 7, ta, tb});       // smaller than one block
    }
  return out;
}

class GemmBackendTest : public ::testing::TestWithParam<GemmBackend> {};

TEST_P(GemmBackendTest, MatchesTheFp64ReferenceOnEveryThreadCount) {
  for (int threads : {1, 2, 3}) {
    Context ctx({threads, GetParam()});
    std::uint32_t seed = 1;
    for (const Shape& s : shapes()) {
      const Operands o = random_operands(s, seed++);
      for (float beta : {0.0f, 1.0f}) {
        const double err = worst_error(s, o, beta, run_gemm(ctx, s, o, beta));
        EXPECT_LT(err, kGemmTolerance) << "threads " << threads << " shape " << s.m << "x" << s.k_out
                                       << "x" << s.inner << " ta " << s.trans_a << " tb " << s.trans_b
                                       << " beta " << beta;
      }
    }
  }
}

TEST_P(GemmBackendTest, RepeatsBitForBit) {
  // Replicas must hold bit-identical state: the same call gives the same bits.
  Context ctx({2, GetParam()});
  const Shape s{256, 768, 768, false, true};
  const Operands o = random_operands(s, 7);
  EXPECT_EQ(run_gemm(ctx, s, o, 1.0f), run_gemm(ctx, s, o, 1.0f));
}

TEST_P(GemmBackendTest, TheToleranceCatchesOneWrongElement) {
  Context ctx({2, GetParam()});
  const Shape s{37, 53, 768, false, false};
  const Operands o = random_operands(s, 3);
  std::vector<float> c = run_gemm(ctx, s, o, 1.0f);
  // Element (1, 47) loses its largest product term, as a kernel that dropped
  // one step of the inner loop or one row at a block edge would.
  float largest = 0.0f;
  for (std::int64_t p = 0; p < s.inner; ++p) {
    const float term = 0.5f * o.a[static_cast<std::size_t>(s.inner + p)] *
                       o.b[static_cast<std::size_t>(p * s.k_out + 47)];
    if (std::abs(term) > std::abs(largest)) largest = term;
  }
  c[static_cast<std::size_t>(s.k_out + 47)] -= largest;
  EXPECT_GT(worst_error(s, o, 1.0f, c), kGemmTolerance);
}

INSTANTIATE_TEST_SUITE_P(Backends, GemmBackendTest,
                         ::testing::Values(GemmBackend::kOneDnn, GemmBackend::kOpenBlas),
                         [](const auto& param_info) { return std::string(gemm_backend_name(param_info.param)); });

TEST(GemmBackend, TheBackendsAgreeWithinTheTolerance) {
  Context dnnl({2, GemmBackend::kOneDnn}), blas({2, GemmBackend::kOpenBlas});
  const Shape s{256, 300, 768, true, false};
  const Operands o = random_operands(s, 11);
  const auto a = run_gemm(dnnl, s, o, 1.0f), b = run_gemm(blas, s, o, 1.0f);
  const std::vector<double> b64(b.begin(), b.end());
  EXPECT_LT(worst_error(reference(s, o, 1.0f).magnitude, a, b64), kGemmTolerance);
}

TEST(GemmBackend, NamesParseBackAndTheDescriptionNamesTheIsa) {
  for (auto b : {GemmBackend::kOneDnn, GemmBackend::kOpenBlas}) {
    EXPECT_EQ(parse_gemm_backend(gemm_backend_name(b)), b);
  }
  EXPECT_FALSE(parse_gemm_backend("mkl"));
  const std::string text = describe_gemm_backend(GemmBackend::kOneDnn);
  EXPECT_NE(text.find("oneDNN"), std::string::npos) << text;
  EXPECT_NE(text.find(", "), std::string::npos) << text;  // the ISA follows the version
  EXPECT_NE(Context({1, GemmBackend::kOneDnn}).describe().find("gemm oneDNN"), std::string::npos);
}

}  // namespace
}  // namespace ntp::tensor
