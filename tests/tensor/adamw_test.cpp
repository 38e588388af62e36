#include "tensor/adamw.h"

#include <gtest/gtest.h>

#include <cmath>
#include <vector>

namespace ntp::tensor {
namespace {

TEST(AdamW, MatchesTheScalarFormulaOverSeveralSteps) {
  Context ctx({2});
  const std::int64_t n = 100000;  // large enough to be split across the pool
  std::vector<float> p(n), g(n), m(n, 0.0f), v(n, 0.0f);
  for (std::int64_t i = 0; i < n; ++i) {
    p[i] = std::sin(0.1f * static_cast<float>(i));
    g[i] = std::cos(0.3f * static_cast<float>(i));
  }
  std::vector<double> rp(p.begin(), p.end()), rm(n, 0.0), rv(n, 0.0);
  AdamWStep s{1e-2f, 0.9f, 0.999f, 1e-8f, 0.1f, 0.5f, 0};
  for (int step = 1; step <= 3; ++step) {
    s.step = step;
    adamw_update(ctx, p.data(), g.data(), m.data(), v.data(), n, s);
    for (std::int64_t i = 0; i < n; ++i) {
      const double gi = 0.5 * g[i];
      rm[i] = 0.9 * rm[i] + 0.1 * gi;
      rv[i] = 0.999 * rv[i] + 0.001 * gi * gi;
      const double mhat = rm[i] / (1 - std::pow(0.9, step));
      const double vhat = rv[i] / (1 - std::pow(0.999, step));
      rp[i] -= 1e-2 * (mhat / (std::sqrt(vhat) + 1e-8) + 0.1 * rp[i]);
    }
  }
  for (std::int64_t i = 0; i < n; i += 997) EXPECT_NEAR(p[i], rp[i], 1e-5) << i;
}

TEST(AdamW, SumSquaresIsExactForSmallIntegers) {
  Context ctx({3});
  std::vector<float> x(70000, 2.0f);
  EXPECT_EQ(sum_squares(ctx, x.data(), static_cast<std::int64_t>(x.size())), 4.0 * 70000);
}

}  // namespace
}  // namespace ntp::tensor
