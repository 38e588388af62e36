// The GEMM path of causal attention against the loops (the reference), element
// by element, within the bound derived in src/tensor/attention_gemm.cpp: both
// paths round each dot product of length n to within γ_n = n·u/(1 − n·u)
// (u = 2⁻²⁴) of its magnitude sum, so they differ by at most twice that,
// carried to first order through softmax, its backward and the products
// after them. The bound is computed here in double from the inputs. Shapes:
// GPT-2's head_dim 64 and Llama-small's 32, sequences that are not multiples
// of the 16 vector lanes and that span several 32-row blocks, one head,
// and grouped-query attention with 3 query heads per KV group. The checker is
// shown to reject a perturbed output.
#include <gtest/gtest.h>

#include <chrono>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include "tensor/attention.h"
#include "tensor/context.h"

namespace ntp::tensor {
namespace {

constexpr double kUnit = 0x1p-24;  // float's unit roundoff
constexpr double kExpError = 1e-7;  // relative error of simd's exp (simd/loops.inc)

double gamma(std::int64_t n) { return static_cast<double>(n) * kUnit / (1.0 - static_cast<double>(n) * kUnit); }

std::vector<float> random_vector(std::size_t n, std::uint32_t seed, float spread) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, spread);
  std::vector<float> v(n);
  for (float& x : v) x = normal(rng);
  return v;
}

struct Case {
  AttentionShape s;
  std::vector<float> qkv, dout, dqkv;  // dqkv: the values the backward adds onto
};

Case make_case(const AttentionShape& s, std::uint32_t seed) {
  const auto rows = static_cast<std::size_t>(s.batch * s.seq);
  // Spread 2 makes scores of a few units: peaked rows next to flat ones.
  return {s, random_vector(rows * static_cast<std::size_t>(s.qkv_row()), seed, 2.0f),
          random_vector(rows * static_cast<std::size_t>(s.heads * s.head_dim), seed + 1, 1.0f),
          random_vector(rows * static_cast<std::size_t>(s.qkv_row()), seed + 2, 1.0f)};
}

struct Result {
  std::vector<float> out, att, dqkv;
};

// Forward on `path`; the backward on `path` from `att` (the loops' probabilities
// when given, so that both backwards start from the same values).
Result run(Context& ctx, const Case& c, AttentionPath path, const std::vector<float>* att = nullptr) {
  const AttentionShape& s = c.s;
  Result r;
  r.out.assign(c.dout.size(), std::nanf(""));  // every element must be written
  r.att.assign(static_cast<std::size_t>(s.batch * s.heads * s.seq * s.seq), std::nanf(""));
  attention_forward(ctx, r.out.data(), r.att.data(), c.qkv.data(), s, path);
  r.dqkv = c.dqkv;
  attention_backward(ctx, r.dqkv.data(), c.dout.data(), c.qkv.data(), att != nullptr ? att->data() : r.att.data(),
                     s, path);
  return r;
}

// How far the two paths may differ, element by element.
struct Bounds {
  std::vector<double> out, att, dqkv;
};

// Positions of one (batch, query head) slice, as in the kernels' layout.
struct At {
  const AttentionShape& s;
  std::int64_t b, h;
  std::size_t group(std::int64_t t) const {
    return static_cast<std::size_t>((b * s.seq + t) * s.qkv_row() + (h / s.group) * (s.group + 2) * s.head_dim);
  }
  std::size_t q(std::int64_t t, std::int64_t i) const {
    return group(t) + static_cast<std::size_t>((h % s.group) * s.head_dim + i);
  }
  std::size_t k(std::int64_t t, std::int64_t i) const { return group(t) + static_cast<std::size_t>(s.group * s.head_dim + i); }
  std::size_t v(std::int64_t t, std::int64_t i) const {
    return group(t) + static_cast<std::size_t>((s.group + 1) * s.head_dim + i);
  }
  std::size_t out(std::int64_t t, std::int64_t i) const {
    return static_cast<std::size_t>((b * s.seq + t) * s.heads * s.head_dim + h * s.head_dim + i);
  }
  std::size_t att(std::int64_t t, std::int64_t j) const {
    return static_cast<std::size_t>(((b * s.heads + h) * s.seq + t) * s.seq + j);
  }
};

// Σ a(i)·b(i) over i < n and its magnitude sum Σ|a(i)·b(i)|, in double.
struct Dot {
  double value = 0.0, magnitude = 0.0;
};

template <typename A, typename B>
Dot dot_of(std::int64_t n, A a, B b) {
  Dot d;
  for (std::int64_t i = 0; i < n; ++i) {
    const double prod = static_cast<double>(a(i)) * b(i);
    d.value += prod;
    d.magnitude += std::abs(prod);
  }
  return d;
}

// The first-order bound of attention_gemm.cpp's comment, in double. The
// backward terms use `att` (the probabilities both backwards read).
Bounds agreement_bounds(const Case& c, const std::vector<float>& att) {
  const AttentionShape& s = c.s;
  const std::int64_t T = s.seq, hd = s.head_dim;
  const double scale = 1.0 / std::sqrt(static_cast<double>(hd));
  const auto& x = c.qkv;
  const auto& dy = c.dout;
  Bounds bd{std::vector<double>(c.dout.size()), std::vector<double>(att.size()), std::vector<double>(x.size())};
  // dK and dV elements: their first-order terms and magnitude sums.
  std::vector<double> kv_err(x.size()), kv_mag(x.size());
  std::vector<char> is_kv(x.size(), 0);
  for (std::int64_t b = 0; b < s.batch; ++b) {
    for (std::int64_t h = 0; h < s.heads; ++h) {
      const At at{s, b, h};
      std::vector<double> dp_err(static_cast<std::size_t>(T)), ds_err(static_cast<std::size_t>(T)),
          ds(static_cast<std::size_t>(T));
      for (std::int64_t t = 0; t < T; ++t) {
        const auto n = static_cast<std::size_t>(t + 1);
        // Forward: scores, their shifted exponentials' relative error, softmax.
        std::vector<double> score(n), score_err(n), p(n), rho(n);
        double top = -INFINITY, denom = 0.0;
        for (std::size_t j = 0; j < n; ++j) {
          const auto key = static_cast<std::int64_t>(j);
          const Dot qk = dot_of(hd, [&](std::int64_t i) { return x[at.q(t, i)]; },
                                [&](std::int64_t i) { return x[at.k(key, i)]; });
          score[j] = scale * qk.value;
          score_err[j] = 2.0 * gamma(hd + 1) * scale * qk.magnitude;
          top = std::max(top, score[j]);
        }
        for (std::size_t j = 0; j < n; ++j) denom += p[j] = std::exp(score[j] - top);
        double mean_rho = 0.0;
        for (std::size_t j = 0; j < n; ++j) {
          p[j] /= denom;
          rho[j] = score_err[j] + 2.0 * kUnit * std::abs(score[j] - top) + 2.0 * kExpError;
          mean_rho += p[j] * rho[j];
        }
        for (std::size_t j = 0; j < n; ++j) {
          bd.att[at.att(t, static_cast<std::int64_t>(j))] = p[j] * (rho[j] + mean_rho + 2.0 * gamma(t + 4));
        }
        for (std::int64_t i = 0; i < hd; ++i) {
          double err = 0.0, mag = 0.0;
          for (std::size_t j = 0; j < n; ++j) {
            const double v = std::abs(static_cast<double>(x[at.v(static_cast<std::int64_t>(j), i)]));
            err += bd.att[at.att(t, static_cast<std::int64_t>(j))] * v;
            mag += p[j] * v;
          }
          bd.out[at.out(t, i)] = err + 2.0 * gamma(T) * mag;
        }
        // Backward from the stored probabilities P: dP = dOut·Vᵀ, the row
        // weight w = Σ P·dP, dS = scale·P·(dP − w).
        double w = 0.0, w_err = 0.0, w_mag = 0.0;
        std::vector<double> dp(n);
        for (std::size_t j = 0; j < n; ++j) {
          const auto key = static_cast<std::int64_t>(j);
          const Dot dyv = dot_of(hd, [&](std::int64_t i) { return dy[at.out(t, i)]; },
                                 [&](std::int64_t i) { return x[at.v(key, i)]; });
          const double pj = att[at.att(t, key)];
          dp[j] = dyv.value;
          dp_err[j] = 2.0 * gamma(hd) * dyv.magnitude;
          w += pj * dp[j];
          w_err += pj * dp_err[j];
          w_mag += pj * std::abs(dp[j]);
        }
        w_err += 2.0 * gamma(t + 1) * w_mag;
        for (std::size_t j = 0; j < n; ++j) {
          const double pj = att[at.att(t, static_cast<std::int64_t>(j))];
          ds[j] = scale * pj * (dp[j] - w);
          ds_err[j] = scale * pj * (dp_err[j] + w_err + 6.0 * kUnit * (std::abs(dp[j]) + std::abs(w)));
        }
        // dQ row t: Σ_j dS_tj K_j (added onto the old value).
        for (std::int64_t i = 0; i < hd; ++i) {
          double err = 0.0, mag = std::abs(static_cast<double>(c.dqkv[at.q(t, i)]));
          for (std::size_t j = 0; j < n; ++j) {
            const double kj = std::abs(static_cast<double>(x[at.k(static_cast<std::int64_t>(j), i)]));
            err += ds_err[j] * kj;
            mag += std::abs(ds[j]) * kj;
          }
          bd.dqkv[at.q(t, i)] = err + 2.0 * gamma(T + 1) * mag;
        }
        // dK_j += dS_tj Q_t and dV_j += P_tj dOut_t, summed over t and the group's heads.
        for (std::size_t j = 0; j < n; ++j) {
          const double pj = att[at.att(t, static_cast<std::int64_t>(j))];
          for (std::int64_t i = 0; i < hd; ++i) {
            const std::size_t kk = at.k(static_cast<std::int64_t>(j), i), vv = at.v(static_cast<std::int64_t>(j), i);
            const double q = std::abs(static_cast<double>(x[at.q(t, i)]));
            kv_err[kk] += ds_err[j] * q;
            kv_mag[kk] += std::abs(ds[j]) * q;
            kv_mag[vv] += pj * std::abs(static_cast<double>(dy[at.out(t, i)]));  // P is exact: no first-order term
            is_kv[kk] = is_kv[vv] = 1;
          }
        }
      }
    }
  }
  const std::int64_t summed = s.group * s.seq + 1;  // terms of one dK or dV element, the old value included
  for (std::size_t e = 0; e < x.size(); ++e) {
    if (is_kv[e]) bd.dqkv[e] = kv_err[e] + 2.0 * gamma(summed) * (kv_mag[e] + std::abs(static_cast<double>(c.dqkv[e])));
  }
  return bd;
}

// Elements where |a − b| exceeds the bound (NaN counts).
std::int64_t violations(const std::vector<float>& a, const std::vector<float>& b, const std::vector<double>& bound) {
  std::int64_t bad = 0;
  for (std::size_t i = 0; i < a.size(); ++i) {
    const double diff = std::abs(static_cast<double>(a[i]) - b[i]);
    if (!(diff <= bound[i])) ++bad;
  }
  return bad;
}

// The largest |a − b| / bound, printed to show how much of the bound is used.
double worst_ratio(const std::vector<float>& a, const std::vector<float>& b, const std::vector<double>& bound) {
  double worst = 0.0;
  for (std::size_t i = 0; i < a.size(); ++i) {
    const double diff = std::abs(static_cast<double>(a[i]) - b[i]);
    if (diff > 0.0) worst = std::max(worst, bound[i] > 0.0 ? diff / bound[i] : INFINITY);
  }
  return worst;
}

void expect_paths_agree_on(const AttentionShape& s, const ThreadSetup& setup, std::uint32_t seed) {
  Context ctx(setup);
  const Case c = make_case(s, seed);
  const Result ref = run(ctx, c, AttentionPath::kLoops);
  const Result got = run(ctx, c, AttentionPath::kGemm, &ref.att);
  const Bounds bd = agreement_bounds(c, ref.att);
  EXPECT_EQ(violations(got.out, ref.out, bd.out), 0);
  EXPECT_EQ(violations(got.att, ref.att, bd.att), 0);
  EXPECT_EQ(violations(got.dqkv, ref.dqkv, bd.dqkv), 0);
  std::printf("%s, T %lld, heads %lld, head_dim %lld, group %lld: largest difference / bound: out %.3g, att %.3g, "
              "dqkv %.3g\n",
              std::string(gemm_backend_name(setup.gemm)).c_str(), static_cast<long long>(s.seq),
              static_cast<long long>(s.heads), static_cast<long long>(s.head_dim),
              static_cast<long long>(s.group), worst_ratio(got.out, ref.out, bd.out),
              worst_ratio(got.att, ref.att, bd.att), worst_ratio(got.dqkv, ref.dqkv, bd.dqkv));
  // Both paths leave the masked triangle zero (the GEMM backward reads it).
  for (std::int64_t bh = 0; bh < s.batch * s.heads; ++bh)
    for (std::int64_t t = 0; t < s.seq; ++t)
      for (std::int64_t j = t + 1; j < s.seq; ++j) {
        const auto e = static_cast<std::size_t>((bh * s.seq + t) * s.seq + j);
        ASSERT_EQ(ref.att[e], 0.0f);
        ASSERT_EQ(got.att[e], 0.0f);
      }
}

// On each GEMM backend.
void expect_paths_agree(const AttentionShape& s, int threads, std::uint32_t seed) {
  for (const GemmBackend backend : {GemmBackend::kOneDnn, GemmBackend::kOpenBlas}) {
    SCOPED_TRACE(std::string(gemm_backend_name(backend)));
    expect_paths_agree_on(s, {threads, backend}, seed);
  }
}

TEST(AttentionPaths, GemmAgreesWithLoopsOnGpt2Heads) {
  expect_paths_agree({2, 67, 3, 64, 1}, 2, 1);  // head_dim 64, three 32-row blocks, 67 % 16 != 0
}

TEST(AttentionPaths, GemmAgreesWithLoopsOnLlamaGroupsOfThree) {
  expect_paths_agree({2, 130, 6, 32, 3}, 2, 2);  // 2 KV groups of 3 query heads, five row blocks
}

TEST(AttentionPaths, GemmAgreesWithLoopsOnOneHeadAndShortSequences) {
  expect_paths_agree({1, 33, 1, 16, 1}, 1, 3);
  expect_paths_agree({3, 5, 2, 8, 2}, 2, 4);   // below the automatic rule's threshold, forced
  expect_paths_agree({1, 1, 3, 4, 3}, 3, 5);   // one position: the softmax is 1
}

TEST(AttentionPaths, TheCheckerRejectsAPerturbedOutput) {
  Context ctx({2});
  const Case c = make_case({1, 37, 3, 32, 3}, 6);
  const Result ref = run(ctx, c, AttentionPath::kLoops);
  const Result got = run(ctx, c, AttentionPath::kGemm, &ref.att);
  const Bounds bd = agreement_bounds(c, ref.att);
  ASSERT_EQ(violations(got.out, ref.out, bd.out), 0);
  ASSERT_EQ(violations(got.dqkv, ref.dqkv, bd.dqkv), 0);
  // One element of each result moved by twice its bound: caught.
  Result bad = got;
  bad.out[100] += static_cast<float>(2.0 * bd.out[100]) + 1e-30f;
  bad.dqkv[40] -= static_cast<float>(2.0 * bd.dqkv[40]) + 1e-30f;
  bad.att[37 * 20 + 3] += static_cast<float>(2.0 * bd.att[37 * 20 + 3]) + 1e-30f;
  EXPECT_EQ(violations(bad.out, ref.out, bd.out), 1);
  EXPECT_EQ(violations(bad.dqkv, ref.dqkv, bd.dqkv), 1);
  EXPECT_EQ(violations(bad.att, ref.att, bd.att), 1);
  // A kernel bug of the kind the bound must see: the backward fed another
  // batch's probabilities.
  const Result other = run(ctx, make_case(c.s, 16), AttentionPath::kLoops);
  const Result stale = run(ctx, c, AttentionPath::kGemm, &other.att);
  EXPECT_GT(violations(stale.dqkv, ref.dqkv, bd.dqkv), static_cast<std::int64_t>(ref.dqkv.size() / 2));
}

TEST(AttentionPaths, GemmBitsDoNotDependOnTheThreadCount) {
  const Case c = make_case({3, 45, 4, 16, 2}, 8);
  Context one({1}), three({3});
  const Result a = run(one, c, AttentionPath::kGemm), b = run(three, c, AttentionPath::kGemm);
  EXPECT_EQ(a.out, b.out);
  EXPECT_EQ(a.att, b.att);
  EXPECT_EQ(a.dqkv, b.dqkv);
}

// The context's GEMM time takes the per-head sgemm calls (their thread-seconds
// over the pool's threads), never more than the attention's wall time; the
// loops path adds none.
TEST(AttentionPaths, ThePerHeadGemmsCountAsGemmTime) {
  Context ctx({2});
  const Case c = make_case({4, 128, 8, 32, 2}, 9);
  const double before = ctx.gemm_seconds();
  run(ctx, c, AttentionPath::kLoops);
  EXPECT_EQ(ctx.gemm_seconds(), before);
  const auto start = std::chrono::steady_clock::now();
  run(ctx, c, AttentionPath::kGemm);
  const double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  const double gemm = ctx.gemm_seconds() - before;
  EXPECT_GT(gemm, 0.0);
  EXPECT_LE(gemm, wall);
}

TEST(AttentionPaths, TheRuleDependsOnTheSequenceOnly) {
  // Every TP degree of a model (whatever heads and groups it holds) and every
  // micro-batch size take the same path.
  for (std::int64_t seq : {1, 5, 15, 16, 17, 64, 128, 1024}) {
    const AttentionPath path = attention_path_for({4, seq, 12, 64, 1});
    EXPECT_NE(path, AttentionPath::kAuto);
    EXPECT_EQ(attention_path_for({1, seq, 1, 32, 1}), path);
    EXPECT_EQ(attention_path_for({3, seq, 6, 16, 3}), path);
  }
  EXPECT_EQ(attention_path_for({4, 64, 12, 64, 1}), AttentionPath::kGemm);   // GPT-2 124M, B4 x T64
  EXPECT_EQ(attention_path_for({4, 128, 8, 32, 2}), AttentionPath::kGemm);   // llama-small, B4 x T128
}

TEST(AttentionPaths, AutoRunsTheRulesPath) {
  Context ctx({2});
  for (const AttentionShape& s : {AttentionShape{2, 4, 2, 8, 1}, AttentionShape{2, 40, 4, 8, 2}}) {
    const Case c = make_case(s, 7);
    const Result chosen = run(ctx, c, attention_path_for(s));
    const Result automatic = run(ctx, c, AttentionPath::kAuto);
    EXPECT_EQ(automatic.out, chosen.out);
    EXPECT_EQ(automatic.dqkv, chosen.dqkv);
  }
}

}  // namespace
}  // namespace ntp::tensor
