// bf16 GEMMs (model.precision = "bf16"): the rounding (nearest even), and
// gemm() / matmul / the attention against an fp64 reference computed from the
// bf16-rounded inputs. A product of two bf16 values is exact in fp32, so the
// only error left is the fp32 sums': within γ_n·Σ|aᵢbᵢ| (plus one rounding of
// the value a GEMM adds onto). The same bound fails a GEMM that skips the
// rounding (fp32 inputs) or rounds its output, so it separates the two.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "tensor/attention.h"
#include "tensor/context.h"
#include "tensor/gemm_backend.h"
#include "tensor/matmul.h"

namespace ntp::tensor {
namespace {

float of_bits(std::uint32_t b) {
  float x = 0;
  std::memcpy(&x, &b, sizeof x);
  return x;
}
float round_bf16(float x) { return from_bf16(to_bf16(x)); }

TEST(Bf16Rounding, NearestEvenWithNaNInfAndSubnormalsKept) {
  EXPECT_EQ(to_bf16(1.0f), 0x3f80);
  EXPECT_EQ(to_bf16(of_bits(0x3f808000)), 0x3f80);  // tie, down to even
  EXPECT_EQ(to_bf16(of_bits(0x3f818000)), 0x3f82);  // tie, up to even
  EXPECT_EQ(to_bf16(of_bits(0x3f808001)), 0x3f81);  // above the tie
  EXPECT_EQ(to_bf16(of_bits(0x3f807fff)), 0x3f80);  // below it
  EXPECT_EQ(to_bf16(-1.5f), 0xbfc0);
  EXPECT_EQ(to_bf16(of_bits(0x7f7fffff)), 0x7f80);  // the largest float rounds to inf
  EXPECT_EQ(to_bf16(std::numeric_limits<float>::infinity()), 0x7f80);
  EXPECT_TRUE(std::isnan(from_bf16(to_bf16(std::numeric_limits<float>::quiet_NaN()))));
  EXPECT_TRUE(std::isnan(from_bf16(to_bf16(of_bits(0x7f800001)))));  // a NaN whose payload would round to inf
  EXPECT_EQ(to_bf16(of_bits(0x00018000)), 0x0002);  // a subnormal, rounded, not flushed
  // The block rounding is the element rounding.
  std::vector<float> x = {1.0f, of_bits(0x3f818000), 3.14159f, -2.71828f, 0, 0, 7.0f, 1e-3f};
  std::vector<Bf16> out(6);
  round_to_bf16(x.data(), 2, 3, 4, out.data());  // rows [0..3) and [4..7) of a [2, 4] matrix
  for (int i = 0; i < 2; ++i)
    for (int j = 0; j < 3; ++j) EXPECT_EQ(out[i * 3 + j], to_bf16(x[i * 4 + j]));
  // A dense block runs the vectorised loop: the same bits on every class of
  // value, ties and NaN payloads among them, past its 16 lanes.
  std::vector<float> dense;
  for (std::uint32_t b : {0x3f808000u, 0x3f818000u, 0x3f808001u, 0x7f7fffffu, 0x7f800001u, 0xff800000u,
                          0x00018000u, 0x80018000u, 0xffc00001u, 0x7f800000u})
    for (std::uint32_t d = 0; d < 7; ++d) dense.push_back(of_bits(b + d * 0x10000u));
  std::vector<Bf16> rounded(dense.size());
  round_to_bf16(dense.data(), 1, static_cast<std::int64_t>(dense.size()), static_cast<std::int64_t>(dense.size()),
                rounded.data());
  for (std::size_t i = 0; i < dense.size(); ++i) EXPECT_EQ(rounded[i], to_bf16(dense[i])) << i;
}

struct Shape {
  std::int64_t m, n, k;
  bool ta, tb;
};

std::vector<float> random_vector(std::size_t n, std::mt19937& rng) {
  std::normal_distribution<float> d;
  std::vector<float> v(n);
  for (auto& x : v) x = d(rng);
  return v;
}

// How far `c` is from alpha·op(â)·op(b̂) + beta·c0 (â, b̂ rounded to bf16,
// fp64) in units of the bound γ_k·(|alpha|·Σ|âb̂| + |beta·c0|) + u·|ref|:
// the largest ratio over the elements (<= 1: within the bound).
double worst_ratio(const Shape& s, float alpha, const std::vector<float>& a, const std::vector<float>& b,
                   float beta, const std::vector<float>& c0, const std::vector<float>& c, bool round_inputs) {
  const double u = std::ldexp(1.0, -24);
  const double gamma = static_cast<double>(s.k + 2) * u / (1 - static_cast<double>(s.k + 2) * u);
  double worst = 0;
  for (std::int64_t i = 0; i < s.m; ++i)
    for (std::int64_t j = 0; j < s.n; ++j) {
      double ref = 0, mag = 0;
      for (std::int64_t p = 0; p < s.k; ++p) {
        float x = s.ta ? a[p * s.m + i] : a[i * s.k + p];
        float y = s.tb ? b[j * s.k + p] : b[p * s.n + j];
        if (round_inputs) x = round_bf16(x), y = round_bf16(y);
        ref += static_cast<double>(x) * y;
        mag += std::abs(static_cast<double>(x) * y);
      }
      const double old = static_cast<double>(beta) * c0[i * s.n + j];
      ref = alpha * ref + old;
      const double bound = gamma * (std::abs(alpha) * mag + std::abs(old)) + u * std::abs(ref);
      worst = std::max(worst, std::abs(c[i * s.n + j] - ref) / bound);
    }
  return worst;
}

struct Bf16Case {
  int threads;
  bool emulate;
};

class Bf16GemmTest : public ::testing::TestWithParam<Bf16Case> {
 protected:
  Context ctx_{{.threads = GetParam().threads,
                .precision = Precision::kBf16,
                .emulate_bf16 = GetParam().emulate}};
};

// Every transpose, beta 0 and 1 (the backward's overwrite and add), alpha not
// 1, shapes that split unevenly over the pool by rows and by columns.
TEST_P(Bf16GemmTest, MatchesTheProductOfTheRoundedInputs) {
  if (!GetParam().emulate) {
    ASSERT_EQ(ctx_.bf16_path(), cpu_has_bf16() ? Bf16Path::kNative : Bf16Path::kEmulated);
  }
  std::mt19937 rng(7);
  for (const Shape& s : {Shape{37, 50, 768, false, true}, Shape{70, 19, 64, true, false},
                         Shape{33, 65, 200, false, false}, Shape{20, 90, 31, true, true}}) {
    const auto a = random_vector(static_cast<std::size_t>(s.m * s.k), rng);
    const auto b = random_vector(static_cast<std::size_t>(s.k * s.n), rng);
    // c0 with bits below bf16's: adding onto it must keep them (fp32, not bf16).
    auto c0 = random_vector(static_cast<std::size_t>(s.m * s.n), rng);
    for (float& x : c0) x = 1.0f + x * 1e-3f;
    for (const float beta : {0.0f, 1.0f}) {
      std::vector<float> c = c0;
      gemm(ctx_, s.ta, s.tb, s.m, s.n, s.k, 0.5f, a.data(), s.ta ? s.m : s.k, b.data(), s.tb ? s.k : s.n, beta,
           c.data(), s.n);
      EXPECT_LE(worst_ratio(s, 0.5f, a, b, beta, c0, c, true), 1.0) << s.m << "x" << s.n << "x" << s.k;
      // The bound tells the rounding apart: the product of the unrounded inputs is far outside it.
      EXPECT_GT(worst_ratio(s, 0.5f, a, b, beta, c0, c, false), 3.0);
    }
  }
}

// matmul_forward (the bias as each row's start) and matmul_backward (adding
// onto fp32 gradients) through the bf16 path.
TEST_P(Bf16GemmTest, MatmulForwardAndBackwardRoundOnlyTheirInputs) {
  const std::int64_t n = 40, in = 96, out = 48;
  std::mt19937 rng(3);
  const auto x = random_vector(n * in, rng), w = random_vector(out * in, rng), bias = random_vector(out, rng);
  const auto dy = random_vector(n * out, rng);
  std::vector<float> y(n * out);
  matmul_forward(ctx_, y.data(), x.data(), w.data(), bias.data(), n, in, out, WeightLayout::kOutIn);
  std::vector<float> bias_rows(n * out);
  for (std::int64_t r = 0; r < n; ++r)
    for (std::int64_t o = 0; o < out; ++o) bias_rows[r * out + o] = bias[o];
  EXPECT_LE(worst_ratio({n, out, in, false, true}, 1.0f, x, w, 1.0f, bias_rows, y, true), 1.0);
  std::vector<float> dw0(out * in);
  for (float& g : dw0) g = 1.0f + 1e-6f * static_cast<float>(&g - dw0.data());  // below bf16's precision
  std::vector<float> dw = dw0;
  matmul_backward(ctx_, nullptr, dw.data(), nullptr, dy.data(), x.data(), w.data(), n, in, out,
                  WeightLayout::kOutIn);
  EXPECT_LE(worst_ratio({out, in, n, true, false}, 1.0f, dy, x, 1.0f, dw0, dw, true), 1.0);
}

// Both backward GEMMs in one call share dOut's rounding (one scratch buffer)
// while the weight and the input take the other: each result is still the
// product of its own rounded inputs, in both layouts. Unrounded inputs fall
// far outside the bound, so a GEMM that read the wrong buffer or unrounded
// values would fail.
TEST_P(Bf16GemmTest, BackwardRoundsDoutOnceForBothGemms) {
  const std::int64_t n = 40, in = 96, out = 48;
  std::mt19937 rng(9);
  const auto x = random_vector(n * in, rng), w = random_vector(out * in, rng), dy = random_vector(n * out, rng);
  for (WeightLayout layout : {WeightLayout::kOutIn, WeightLayout::kInOut}) {
    const bool out_in = layout == WeightLayout::kOutIn;
    auto dx0 = random_vector(n * in, rng), dw0 = random_vector(out * in, rng);
    for (float& g : dx0) g = 1.0f + 1e-3f * g;  // bits below bf16's: added onto in fp32
    for (float& g : dw0) g = 1.0f + 1e-3f * g;
    auto dx = dx0, dw = dw0;
    matmul_backward(ctx_, dx.data(), dw.data(), nullptr, dy.data(), x.data(), w.data(), n, in, out, layout);
    const Shape dinp{n, in, out, false, !out_in};
    const Shape dweight = out_in ? Shape{out, in, n, true, false} : Shape{in, out, n, true, false};
    const auto& a = out_in ? dy : x;
    const auto& b = out_in ? x : dy;
    EXPECT_LE(worst_ratio(dinp, 1.0f, dy, w, 1.0f, dx0, dx, true), 1.0) << out_in;
    EXPECT_LE(worst_ratio(dweight, 1.0f, a, b, 1.0f, dw0, dw, true), 1.0) << out_in;
    EXPECT_GT(worst_ratio(dinp, 1.0f, dy, w, 1.0f, dx0, dx, false), 3.0) << out_in;
    EXPECT_GT(worst_ratio(dweight, 1.0f, a, b, 1.0f, dw0, dw, false), 3.0) << out_in;
  }
}

// An operand inside the context's rounded copy is read from it: the same bits
// as rounding it per call, for forward and the backward's dinp, in both
// layouts, and for a weight block that starts inside the copy. The copy is
// really read (a weight changed behind it is not seen, which is why Model
// rounds again whenever params() is taken), and an operand that reaches past
// its end is rounded per call.
TEST_P(Bf16GemmTest, AnOperandInsideTheRoundedCopyIsReadFromIt) {
  const std::int64_t n = 24, in = 80, out = 40, lead = 16;
  std::mt19937 rng(5);
  const auto x = random_vector(n * in, rng), dy = random_vector(n * out, rng);
  auto block = random_vector(lead + out * in, rng);  // the weight starts `lead` elements in
  float* w = block.data() + lead;
  for (WeightLayout layout : {WeightLayout::kOutIn, WeightLayout::kInOut}) {
    const auto run = [&](std::vector<float>& y, std::vector<float>& dx) {
      matmul_forward(ctx_, y.data(), x.data(), w, nullptr, n, in, out, layout);
      matmul_backward(ctx_, dx.data(), nullptr, nullptr, dy.data(), x.data(), w, n, in, out, layout,
                      {Into::kOverwrite, Into::kAdd});
    };
    std::vector<float> y0(n * out), dx0(n * in), y1(n * out), dx1(n * in);
    run(y0, dx0);  // no copy: rounded per call
    std::vector<Bf16> copy(block.size());
    round_to_bf16(ctx_, block.data(), static_cast<std::int64_t>(block.size()), copy.data());
    ctx_.set_rounded_copy(block.data(), static_cast<std::int64_t>(block.size()), copy.data());
    run(y1, dx1);
    EXPECT_EQ(y1, y0);
    EXPECT_EQ(dx1, dx0);

    for (float& v : block) v *= 2.0f;  // exact in bf16 too: every result would double
    run(y1, dx1);
    EXPECT_EQ(y1, y0) << "the copy, not the changed weight, is read";
    ctx_.set_rounded_copy(block.data(), static_cast<std::int64_t>(block.size()) - 1, copy.data());
    run(y1, dx1);  // the weight's last element lies outside: rounded per call
    for (std::size_t i = 0; i < y0.size(); ++i) ASSERT_EQ(y1[i], 2.0f * y0[i]) << i;
    for (std::size_t i = 0; i < dx0.size(); ++i) ASSERT_EQ(dx1[i], 2.0f * dx0[i]) << i;
    ctx_.clear_rounded_copy(block.data());
    for (float& v : block) v *= 0.5f;
  }
}

// A weight operand narrower than its rows (leading dimension 2n: the left
// half of a wider block, as a column slice of a stored matrix is) is read
// from the copy at that leading dimension; one that starts before the copy is
// rounded per call.
TEST_P(Bf16GemmTest, TheCopyIsReadAtTheOperandsLeadingDimensionAndOnlyInsideIt) {
  const std::int64_t m = 12, n = 20, k = 36;
  std::mt19937 rng(13);
  const auto a = random_vector(m * k, rng);
  auto block = random_vector(k * 2 * n + 1, rng);
  float* b = block.data() + 1;  // [k, n] at leading dimension 2n, one element into the block
  const auto product = [&] {
    std::vector<float> c(m * n);
    gemm(ctx_, false, false, m, n, k, 1.0f, a.data(), k, b, 2 * n, 0.0f, c.data(), n);
    return c;
  };
  const std::vector<float> c0 = product();
  std::vector<Bf16> copy(block.size());
  round_to_bf16(ctx_, block.data(), static_cast<std::int64_t>(block.size()), copy.data());
  ctx_.set_rounded_copy(block.data(), static_cast<std::int64_t>(block.size()), copy.data());
  for (float& v : block) v *= 2.0f;  // exact in bf16: a result read from the fp32 values doubles
  EXPECT_EQ(product(), c0) << "read from the copy, at leading dimension 2n";
  ctx_.set_rounded_copy(block.data() + 2, static_cast<std::int64_t>(block.size()) - 2, copy.data() + 2);
  const std::vector<float> c1 = product();  // b starts one element before this copy
  for (std::size_t i = 0; i < c0.size(); ++i) ASSERT_EQ(c1[i], 2.0f * c0[i]) << i;
  ctx_.clear_rounded_copy(block.data() + 2);
}

// Roundings the caller keeps (KeptBf16): the forward writes inp's rounding,
// bit for bit to_bf16's, and gives the bits of a call without it; a backward
// that reads the kept inp and a dOut rounded by its producer gives the bits of
// one that rounds both itself, in both layouts. The kept copies are really
// read: one changed behind the GEMMs (doubled, exact in bf16) doubles dW, and
// dOut's doubles dInp as well. An fp32 context ignores them.
TEST_P(Bf16GemmTest, KeptRoundingsGiveTheBitsOfRoundingPerCallAndAreRead) {
  const std::int64_t n = 24, in = 40, out = 56;
  std::mt19937 rng(17);
  const auto x = random_vector(n * in, rng), dy = random_vector(n * out, rng);
  for (WeightLayout layout : {WeightLayout::kOutIn, WeightLayout::kInOut}) {
    const auto w = random_vector(out * in, rng);
    std::vector<float> y0(n * out), y1(n * out);
    matmul_forward(ctx_, y0.data(), x.data(), w.data(), nullptr, n, in, out, layout);
    std::vector<Bf16> kept_x(n * in), kept_dy(n * out);
    matmul_forward(ctx_, y1.data(), x.data(), w.data(), nullptr, n, in, out, layout, {kept_x.data()});
    EXPECT_EQ(y1, y0);
    for (std::int64_t i = 0; i < n * in; ++i) ASSERT_EQ(kept_x[i], to_bf16(x[i])) << i;
    for (std::int64_t i = 0; i < n * out; ++i) kept_dy[i] = to_bf16(dy[i]);
    const auto backward = [&](KeptBf16 kept) {
      std::vector<float> dx(n * in), dw(out * in);
      matmul_backward(ctx_, dx.data(), dw.data(), nullptr, dy.data(), x.data(), w.data(), n, in, out, layout,
                      {Into::kOverwrite, Into::kOverwrite}, kept);
      return std::pair{dx, dw};
    };
    const auto [dx0, dw0] = backward({});
    const auto [dx1, dw1] = backward({kept_x.data(), kept_dy.data()});
    EXPECT_EQ(dx1, dx0);
    EXPECT_EQ(dw1, dw0);
    const auto doubled = [](std::vector<Bf16> h) {
      for (Bf16& v : h) v = to_bf16(2.0f * from_bf16(v));
      return h;
    };
    const auto twice_x = doubled(kept_x), twice_dy = doubled(kept_dy);
    const auto [dx2, dw2] = backward({const_cast<Bf16*>(twice_x.data()), kept_dy.data()});
    EXPECT_EQ(dx2, dx0) << "dInp does not read inp";
    for (std::size_t i = 0; i < dw0.size(); ++i) ASSERT_EQ(dw2[i], 2.0f * dw0[i]) << i;
    const auto [dx3, dw3] = backward({kept_x.data(), twice_dy.data()});
    for (std::size_t i = 0; i < dx0.size(); ++i) ASSERT_EQ(dx3[i], 2.0f * dx0[i]) << i;
    for (std::size_t i = 0; i < dw0.size(); ++i) ASSERT_EQ(dw3[i], 2.0f * dw0[i]) << i;
  }
  Context fp32{{.threads = GetParam().threads}};
  std::vector<float> y_plain(n * out), y_kept(n * out), dx_plain(n * in), dx_kept(n * in), dw_plain(out * in),
      dw_kept(out * in);
  std::vector<Bf16> untouched(n * in, 0x7fc1), wrong_dy(n * out, 0);
  const auto w = random_vector(out * in, rng);
  matmul_forward(fp32, y_plain.data(), x.data(), w.data(), nullptr, n, in, out, WeightLayout::kOutIn);
  matmul_forward(fp32, y_kept.data(), x.data(), w.data(), nullptr, n, in, out, WeightLayout::kOutIn,
                 {untouched.data()});
  EXPECT_EQ(y_kept, y_plain);
  for (Bf16 h : untouched) ASSERT_EQ(h, 0x7fc1) << "an fp32 context wrote a rounding";
  matmul_backward(fp32, dx_plain.data(), dw_plain.data(), nullptr, dy.data(), x.data(), w.data(), n, in, out,
                  WeightLayout::kOutIn, {Into::kOverwrite, Into::kOverwrite});
  matmul_backward(fp32, dx_kept.data(), dw_kept.data(), nullptr, dy.data(), x.data(), w.data(), n, in, out,
                  WeightLayout::kOutIn, {Into::kOverwrite, Into::kOverwrite}, {untouched.data(), wrong_dy.data()});
  EXPECT_EQ(dx_kept, dx_plain);
  EXPECT_EQ(dw_kept, dw_plain);
}

// The native path (oneDNN's bf16 matmul) and the emulated one (fp32 sgemm on
// the rounded inputs) agree within twice the bound: the same exact products.
TEST(Bf16Paths, NativeAndEmulatedAgree) {
  if (!cpu_has_bf16()) GTEST_SKIP() << "no avx512_bf16: only the emulated path runs here";
  Context native({.threads = 2, .precision = Precision::kBf16});
  Context emulated({.threads = 2, .precision = Precision::kBf16, .emulate_bf16 = true});
  EXPECT_NE(native.describe().find("bf16 (oneDNN matmul"), std::string::npos) << native.describe();
  EXPECT_NE(emulated.describe().find("bf16 emulated"), std::string::npos) << emulated.describe();
  std::mt19937 rng(11);
  const Shape s{64, 128, 512, false, true};
  const auto a = random_vector(s.m * s.k, rng), b = random_vector(s.k * s.n, rng);
  std::vector<float> c1(s.m * s.n), c2(s.m * s.n);
  gemm(native, false, true, s.m, s.n, s.k, 1.0f, a.data(), s.k, b.data(), s.k, 0.0f, c1.data(), s.n);
  gemm(emulated, false, true, s.m, s.n, s.k, 1.0f, a.data(), s.k, b.data(), s.k, 0.0f, c2.data(), s.n);
  EXPECT_LE(worst_ratio(s, 1.0f, a, b, 0.0f, c1, c1, true), 1.0);
  EXPECT_LE(worst_ratio(s, 1.0f, a, b, 0.0f, c2, c2, true), 1.0);
}

// The attention's per-head GEMMs round their inputs too: bf16 attention
// differs from fp32 attention by about bf16's precision, not fp32's, and
// both paths of bf16 agree to fp32's.
TEST(Bf16Paths, AttentionGemmsRunInBf16) {
  const AttentionShape shape{.batch = 2, .seq = 64, .heads = 4, .head_dim = 16};
  std::mt19937 rng(5);
  const auto qkv = random_vector(static_cast<std::size_t>(shape.batch * shape.seq * shape.qkv_row()), rng);
  const auto run = [&](Context& ctx) {
    std::vector<float> out(static_cast<std::size_t>(shape.batch * shape.seq * shape.heads * shape.head_dim));
    std::vector<float> att(static_cast<std::size_t>(shape.batch * shape.heads * shape.seq * shape.seq));
    attention_forward(ctx, out.data(), att.data(), qkv.data(), shape, AttentionPath::kGemm);
    return out;
  };
  Context fp32({.threads = 2});
  Context native({.threads = 2, .precision = Precision::kBf16});
  Context emulated({.threads = 2, .precision = Precision::kBf16, .emulate_bf16 = true});
  const auto y32 = run(fp32), y16 = run(native), y16e = run(emulated);
  double vs_fp32 = 0, between = 0;
  for (std::size_t i = 0; i < y32.size(); ++i) {
    vs_fp32 = std::max(vs_fp32, static_cast<double>(std::abs(y16[i] - y32[i])));
    between = std::max(between, static_cast<double>(std::abs(y16[i] - y16e[i])));
  }
  EXPECT_GT(vs_fp32, 1e-3);  // bf16 inputs: errors of ~2^-9 of the terms
  EXPECT_LT(vs_fp32, 5e-2);
  EXPECT_LT(between, 1e-5);  // the same rounded inputs, summed in another order
}

INSTANTIATE_TEST_SUITE_P(ThreadsAndPaths, Bf16GemmTest,
                         ::testing::Values(Bf16Case{1, false}, Bf16Case{3, false}, Bf16Case{1, true},
                                           Bf16Case{3, true}),
                         [](const ::testing::TestParamInfo<Bf16Case>& p) {
                           return std::to_string(p.param.threads) + "threads" +
                                  (p.param.emulate ? "Emulated" : "Native");
                         });

}  // namespace
}  // namespace ntp::tensor
