#include "tensor/adamw.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
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

// One pass over several ranges gives each range the bits of its own update,
// with its own weight decay, at any thread count; elements outside every
// range are left alone. A decay taken from the wrong range is seen.
TEST(AdamW, OnePassOverRangesEqualsAnUpdatePerRange) {
  const std::int64_t n = 150001;
  std::vector<float> p0(n), g(n);
  for (std::int64_t i = 0; i < n; ++i) {
    p0[i] = std::sin(0.1f * static_cast<float>(i));
    g[i] = std::cos(0.3f * static_cast<float>(i));
  }
  const std::vector<AdamWSegment> segments = {{0, 7, 0.0f}, {7, 70000, 0.1f}, {70010, 3, 0.0f}, {70013, 79988, 0.5f}};
  AdamWStep s{1e-2f, 0.9f, 0.999f, 1e-8f, 0.0f, 0.5f, 2};
  Context one({1});
  std::vector<float> rp = p0, rm(n, 0.1f), rv(n, 0.2f);
  for (const AdamWSegment& seg : segments) {
    AdamWStep per = s;
    per.weight_decay = seg.weight_decay;
    adamw_update(one, rp.data() + seg.offset, g.data() + seg.offset, rm.data() + seg.offset,
                 rv.data() + seg.offset, seg.count, per);
  }
  for (int threads : {1, 2, 3}) {
    Context ctx({threads});
    std::vector<float> p = p0, m(n, 0.1f), v(n, 0.2f);
    adamw_update(ctx, p.data(), g.data(), m.data(), v.data(), segments, s);
    for (std::int64_t i = 0; i < n; ++i) {
      ASSERT_EQ(std::bit_cast<std::uint32_t>(p[i]), std::bit_cast<std::uint32_t>(rp[i])) << i << ", " << threads << " threads";
      ASSERT_EQ(std::bit_cast<std::uint32_t>(m[i]), std::bit_cast<std::uint32_t>(rm[i])) << i;
      ASSERT_EQ(std::bit_cast<std::uint32_t>(v[i]), std::bit_cast<std::uint32_t>(rv[i])) << i;
    }
    EXPECT_EQ(p[70008], p0[70008]);  // between two ranges
  }
  std::vector<float> p = p0, m(n, 0.1f), v(n, 0.2f);
  std::vector<AdamWSegment> swapped = segments;
  std::swap(swapped[1].weight_decay, swapped[3].weight_decay);
  adamw_update(one, p.data(), g.data(), m.data(), v.data(), swapped, s);
  EXPECT_NE(std::bit_cast<std::uint32_t>(p[100]), std::bit_cast<std::uint32_t>(rp[100]));
}

TEST(AdamW, SumSquaresIsExactForSmallIntegers) {
  Context ctx({3});
  std::vector<float> x(70000, 2.0f);
  EXPECT_EQ(sum_squares(ctx, x.data(), static_cast<std::int64_t>(x.size())), 4.0 * 70000);
}

// Each piece's sum has the bits of the serial sum of that piece, at any thread
// count, whether its thread read it alongside three others or alone (the
// pieces that do not fill four quarters, the short last one).
TEST(AdamW, SumSquaresPiecesGiveTheSerialBitsOfEachPiece) {
  std::vector<float> x(1'000'003);
  for (std::size_t i = 0; i < x.size(); ++i) x[i] = std::sin(0.37f * static_cast<float>(i)) * 3.0f;
  const auto count = static_cast<std::int64_t>(x.size());
  for (const std::int64_t piece : {std::int64_t{768}, std::int64_t{4096}, std::int64_t{147456}}) {
    const std::int64_t pieces = (count + piece - 1) / piece;
    for (int threads : {1, 2, 3}) {
      Context ctx({threads});
      std::vector<double> out(static_cast<std::size_t>(pieces), -1.0);
      sum_squares_pieces(ctx, x.data(), count, piece, out.data());
      for (std::int64_t p = 0; p < pieces; ++p) {
        const double serial = sum_squares_serial(x.data() + p * piece, std::min(piece, count - p * piece));
        ASSERT_EQ(std::bit_cast<std::uint64_t>(out[static_cast<std::size_t>(p)]), std::bit_cast<std::uint64_t>(serial))
            << "piece " << p << " of " << pieces << " (" << piece << " elements), " << threads << " threads";
      }
      // The comparison tells pieces apart: a result filed under its neighbour's index is seen.
      EXPECT_NE(std::bit_cast<std::uint64_t>(out[1]), std::bit_cast<std::uint64_t>(out[0]));
    }
  }
}

TEST(AdamW, SumSquaresHasTheSameBitsAtAnyThreadCount) {
  std::vector<float> x(300'001);
  for (std::size_t i = 0; i < x.size(); ++i) x[i] = std::cos(0.11f * static_cast<float>(i)) * 1e-3f;
  Context one({1});
  const double reference = sum_squares(one, x.data(), static_cast<std::int64_t>(x.size()));
  double exact = 0.0;
  for (float v : x) exact += static_cast<double>(v) * v;
  EXPECT_NEAR(reference, exact, 1e-12 * exact);
  for (int threads : {2, 3, 5}) {
    Context ctx({threads});
    EXPECT_EQ(std::bit_cast<std::uint64_t>(sum_squares(ctx, x.data(), static_cast<std::int64_t>(x.size()))),
              std::bit_cast<std::uint64_t>(reference))
        << threads << " threads";
  }
}

}  // namespace
}  // namespace ntp::tensor
