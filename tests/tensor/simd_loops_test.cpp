// Every build of the non-GEMM loops this CPU runs gives the bits of the scalar
// build, the reference; the scalar build itself is checked against plain loops
// in double within float rounding.
#include "tensor/simd/loops.h"

#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "tensor/adamw.h"
#include "tensor/gemm_backend.h"

namespace ntp::tensor::simd {
namespace {

std::vector<float> random_vector(std::size_t n, std::uint32_t seed, float spread = 1.0f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> d(0.0f, spread);
  std::vector<float> v(n);
  for (auto& x : v) x = d(rng);
  return v;
}

// Lengths around the 16 lanes and GPT-2's: empty, tails only, one lane block, odd.
const std::int64_t kLengths[] = {0, 1, 7, 16, 17, 64, 100, 768, 1001};

// Runs every loop of `l` on fixed inputs and returns all results, bit for bit.
std::vector<float> run_all(const Loops& l) {
  std::vector<float> out;
  const auto append = [&](const std::vector<float>& v) { out.insert(out.end(), v.begin(), v.end()); };
  for (std::int64_t n : kLengths) {
    const auto size = static_cast<std::size_t>(n);
    const auto a = random_vector(size, 1), b = random_vector(size, 2), c = random_vector(size, 3, 4.0f);
    out.push_back(l.dot(a.data(), b.data(), n));
    out.push_back(l.sum(a.data(), n));
    out.push_back(l.centered_sum_squares(a.data(), 0.25f, n));
    out.push_back(l.max(c.data(), n));
    out.push_back(static_cast<float>(l.sum_squares(a.data(), n)));
    auto e = c;
    out.push_back(l.exp_shifted_sum(e.data(), 3.0f, n));
    append(e);
    auto y = b;
    l.axpy(y.data(), 0.375f, a.data(), n);
    l.scale(y.data(), 1.5f, n);
    append(y);
    auto d = b;
    l.softmax_backward(d.data(), c.data(), 0.125f, 0.7f, n);
    append(d);
    std::vector<float> g(size);
    l.gelu_forward(g.data(), c.data(), n);
    append(g);
    auto dg = b;
    l.gelu_backward(dg.data(), c.data(), n);
    append(dg);
    std::vector<float> pairs(2 * size), sw(size);
    for (std::size_t i = 0; i < size; ++i) {
      pairs[2 * i] = c[i];
      pairs[2 * i + 1] = a[i];
    }
    l.swiglu_forward(sw.data(), pairs.data(), n);
    append(sw);
    auto dpairs = pairs;
    l.swiglu_backward(dpairs.data(), pairs.data(), b.data(), n);
    append(dpairs);
    std::vector<float> normed(size);
    out.push_back(l.rmsnorm_row(normed.data(), a.data(), c.data(), 1e-5f, n));
    append(normed);
    auto dnormed = b;
    l.rmsnorm_backward_row(dnormed.data(), c.data(), a.data(), b.data(), 0.75f, n);
    append(dnormed);
    auto dln = b;
    l.layernorm_backward_row(dln.data(), c.data(), a.data(), b.data(), 0.25f, 0.75f, n);
    append(dln);
    auto dweight = a, dbias = b;
    l.layernorm_param_grads_row(dweight.data(), dbias.data(), c.data(), a.data(), 0.25f, 0.75f, n);
    append(dweight);
    append(dbias);
    auto product = c;
    l.scaled_product_add(product.data(), a.data(), 0.625f, b.data(), n);
    append(product);
    auto param = a, m = b, v = random_vector(size, 4);
    for (auto& x : v) x = x * x;
    AdamWStep step;
    step.lr = 1e-3f;
    step.weight_decay = 0.1f;
    step.grad_scale = 0.5f;
    std::vector<std::uint16_t> rounded(size);
    auto plain = param, plain_m = m, plain_v = v;
    l.adamw(param.data(), c.data(), m.data(), v.data(), rounded.data(), n, step, 1.25f, 1.5f);
    l.adamw(plain.data(), c.data(), plain_m.data(), plain_v.data(), nullptr, n, step, 1.25f, 1.5f);
    // The rounded output changes nothing else, bit for bit.
    for (const auto& [fused, unfused] : {std::pair{&param, &plain}, {&m, &plain_m}, {&v, &plain_v}})
      EXPECT_TRUE(size == 0 || std::memcmp(fused->data(), unfused->data(), size * sizeof(float)) == 0);
    for (std::size_t i = 0; i < size; ++i) EXPECT_EQ(rounded[i], to_bf16(param[i])) << i;
    append(param);
    append(m);
    append(v);
    // bf16 rounding: every fp32 bit pattern class (ties, NaN, inf, subnormals)
    // among random ones, each result widened to a float to compare.
    auto wide = c;
    const float specials[] = {NAN, -INFINITY, INFINITY, 1e-40f, -3e-39f, 1.00390625f, 1.01171875f, 65504.0f};
    for (std::size_t i = 0; i < size; ++i) wide[i] = i % 3 == 0 ? specials[i / 3 % 8] : c[i] * 1e3f;
    std::vector<std::uint16_t> halves(size);
    l.round_bf16(halves.data(), wide.data(), n);
    for (std::uint16_t h : halves) out.push_back(std::bit_cast<float>(static_cast<std::uint32_t>(h) << 16));
  }
  return out;
}

TEST(SimdLoops, EveryInstructionSetGivesTheScalarBits) {
  const auto reference = run_all(loops_for(Isa::kScalar));
  ASSERT_GE(runnable_isas().size(), 2u);  // scalar and sse2 run on every x86-64
  for (Isa isa : runnable_isas()) {
    const auto got = run_all(loops_for(isa));
    ASSERT_EQ(got.size(), reference.size());
    for (std::size_t i = 0; i < got.size(); ++i) {
      // Compare bits (NaN-safe): the builds must round identically.
      ASSERT_EQ(std::bit_cast<std::uint32_t>(got[i]), std::bit_cast<std::uint32_t>(reference[i]))
          << isa_name(isa) << " result " << i << ": " << got[i] << " vs " << reference[i];
    }
  }
  EXPECT_EQ(&loops(), &loops_for(best_isa()));
}

// Four arrays summed side by side give, in double, the bits of each summed
// alone, and of the scalar build's one-array sum: the gradient norm relies on
// the same pieces giving the same bits however they are read.
TEST(SimdLoops, FourArraysSideBySideGiveEachArraysBits) {
  const Loops& scalar = loops_for(Isa::kScalar);
  for (Isa isa : runnable_isas()) {
    const Loops& l = loops_for(isa);
    for (std::int64_t n : {std::int64_t{0}, std::int64_t{5}, std::int64_t{32}, std::int64_t{33},
                           std::int64_t{768}, std::int64_t{4099}}) {
      std::vector<std::vector<float>> arrays;
      const float* at[4];
      for (std::uint32_t a = 0; a < 4; ++a) {
        arrays.push_back(random_vector(static_cast<std::size_t>(n), 20 + a, 1.0f + static_cast<float>(a)));
        at[a] = arrays.back().data();
      }
      double sums[4];
      l.sum_squares_x4(at, n, sums);
      for (int a = 0; a < 4; ++a) {
        EXPECT_EQ(std::bit_cast<std::uint64_t>(sums[a]), std::bit_cast<std::uint64_t>(l.sum_squares(at[a], n)))
            << isa_name(isa) << " n " << n << " array " << a;
        EXPECT_EQ(std::bit_cast<std::uint64_t>(sums[a]), std::bit_cast<std::uint64_t>(scalar.sum_squares(at[a], n)))
            << isa_name(isa) << " n " << n << " array " << a;
      }
      if (n > 0) {  // the comparison sees a sum that misses one term
        EXPECT_NE(std::bit_cast<std::uint64_t>(sums[2]), std::bit_cast<std::uint64_t>(l.sum_squares(at[2], n - 1)))
            << isa_name(isa) << " n " << n;
      }
    }
  }
}

// GELU's backward, in place, against central differences of its forward (in
// double around float inputs; the tanh approximation's error is far below
// the 1e-3 tolerance). A backward that drops the x-dependent term of the
// derivative is rejected.
TEST(SimdLoops, GeluBackwardInPlaceIsTheForwardsDerivative) {
  const auto x = random_vector(200, 30, 2.0f), dy = random_vector(200, 31);
  const Loops& l = loops();
  const auto forward = [&](double v) {
    const float in = static_cast<float>(v);
    float out;
    l.gelu_forward(&out, &in, 1);
    return static_cast<double>(out);
  };
  auto d = dy;
  l.gelu_backward(d.data(), x.data(), 200);
  int wrong_variant_rejected = 0;
  for (std::size_t i = 0; i < 200; ++i) {
    const double h = 1e-2;
    const double slope = (forward(x[i] + h) - forward(x[i] - h)) / (2 * h);
    EXPECT_NEAR(d[i], slope * dy[i], 1e-3 * (1 + std::abs(slope * dy[i]))) << "x = " << x[i];
    const double gate_only = 0.5 * (1 + std::tanh(0.7978845608 * (x[i] + 0.044715 * x[i] * x[i] * x[i])));
    if (std::abs(gate_only * dy[i] - slope * dy[i]) > 1e-3 * (1 + std::abs(slope * dy[i]))) ++wrong_variant_rejected;
  }
  EXPECT_GT(wrong_variant_rejected, 100);
}

TEST(SimdLoops, TheScalarReductionsMatchDoubleLoops) {
  const Loops& l = loops_for(Isa::kScalar);
  for (std::int64_t n : kLengths) {
    const auto a = random_vector(static_cast<std::size_t>(n), 5), b = random_vector(static_cast<std::size_t>(n), 6);
    double dot = 0, sum = 0, mag = 0;
    for (std::int64_t i = 0; i < n; ++i) {
      dot += static_cast<double>(a[i]) * b[i];
      sum += a[i];
      mag += std::abs(static_cast<double>(a[i]) * b[i]) + std::abs(a[i]);
    }
    // Float summation of n terms: error at most about n * 2^-24 of the magnitude.
    const double bound = 1e-7 * static_cast<double>(n + 1) * (mag + 1);
    EXPECT_NEAR(l.dot(a.data(), b.data(), n), dot, bound) << n;
    EXPECT_NEAR(l.sum(a.data(), n), sum, bound) << n;
    auto e = a;
    double exp_sum = 0;
    for (float x : a) exp_sum += std::exp(static_cast<double>(x) - 1.0);
    EXPECT_NEAR(l.exp_shifted_sum(e.data(), 1.0f, n), exp_sum, 1e-6 * (exp_sum + 1)) << n;
  }
}

// Every upper half with the lower halves around its rounding boundary (ties,
// just below and above, the extremes), and every 5th subnormal: each build's
// round_bf16 gives to_bf16's bits, starting one element off alignment so the
// vector loops' tails run too. The set holds subnormals that round to non-zero
// subnormals, so a build that flushed them (AVX512-BF16's conversion alone
// does) would fail here.
TEST(SimdLoops, RoundBf16GivesToBf16sBitsForEveryExponent) {
  std::vector<float> x(1, 0.0f);
  for (std::uint32_t upper = 0; upper < 0x10000u; ++upper)
    for (std::uint32_t lower : {0x0000u, 0x0001u, 0x7fffu, 0x8000u, 0x8001u, 0xffffu})
      x.push_back(std::bit_cast<float>(upper << 16 | lower));
  for (std::uint32_t mantissa = 1; mantissa < 0x800000u; mantissa += 5) {
    x.push_back(std::bit_cast<float>(mantissa));
    x.push_back(std::bit_cast<float>(0x80000000u | mantissa));
  }
  std::vector<std::uint16_t> expected(x.size());
  std::size_t nonzero_subnormals = 0;
  for (std::size_t i = 0; i < x.size(); ++i) {
    expected[i] = to_bf16(x[i]);
    nonzero_subnormals += (expected[i] & 0x7f80u) == 0 && (expected[i] & 0x7fu) != 0;
  }
  ASSERT_GT(nonzero_subnormals, 1000u);
  for (Isa isa : runnable_isas()) {
    std::vector<std::uint16_t> got(x.size(), 0xdeadu);
    loops_for(isa).round_bf16(got.data() + 1, x.data() + 1, static_cast<std::int64_t>(x.size()) - 1);
    for (std::size_t i = 1; i < x.size(); ++i)
      ASSERT_EQ(got[i], expected[i]) << isa_name(isa) << ": input bits " << std::hex
                                     << std::bit_cast<std::uint32_t>(x[i]);
  }
}

TEST(SimdLoops, TheBestRunnableBuildIsChosen) {
  const auto runnable = runnable_isas();
  EXPECT_EQ(runnable.front(), Isa::kScalar);
  EXPECT_EQ(best_isa(), runnable.back());
  for (std::size_t i = 1; i < runnable.size(); ++i) EXPECT_LT(runnable[i - 1], runnable[i]);
}

}  // namespace
}  // namespace ntp::tensor::simd
