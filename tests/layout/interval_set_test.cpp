#include "layout/interval_set.h"

#include <gtest/gtest.h>

#include <random>
#include <set>

namespace ntp::layout {
namespace {

std::set<Unit> to_set(const IntervalSet& s) {
  std::set<Unit> out;
  for (const Interval& iv : s.intervals())
    for (Unit u = iv.start; u < iv.end; ++u) out.insert(u);
  return out;
}

IntervalSet random_set(std::mt19937_64& rng, Unit universe) {
  IntervalSet s;
  std::uniform_int_distribution<Unit> pos(0, universe);
  const int pieces = static_cast<int>(rng() % 5);
  for (int i = 0; i < pieces; ++i) {
    Unit a = pos(rng), b = pos(rng);
    s.add(std::min(a, b), std::max(a, b));
  }
  return s;
}

TEST(IntervalSet, AddMergesAdjacentAndOverlapping) {
  IntervalSet s;
  s.add(5, 8);
  s.add(0, 2);
  s.add(2, 3);
  s.add(7, 10);
  EXPECT_EQ(s, (IntervalSet{{0, 3}, {5, 10}}));
  EXPECT_EQ(s.size(), 8);
  EXPECT_EQ(s.to_string(), "[0,3) [5,10)");
}

TEST(IntervalSet, OffsetsFollowUnitMajorOrder) {
  IntervalSet s{{2, 4}, {10, 13}};
  EXPECT_EQ(s.offset_of(2), 0);
  EXPECT_EQ(s.offset_of(3), 1);
  EXPECT_EQ(s.offset_of(10), 2);
  EXPECT_EQ(s.offset_of(12), 4);
  EXPECT_EQ(s.offset_of(4), -1);
  EXPECT_EQ(s.offset_of(0), -1);
  for (Unit i = 0; i < s.size(); ++i) EXPECT_EQ(s.offset_of(s.unit_at(i)), i);
  EXPECT_THROW(s.unit_at(5), std::out_of_range);
}

TEST(IntervalSet, SetAlgebraMatchesStdSetOnRandomCases) {
  std::mt19937_64 rng(42);
  for (int trial = 0; trial < 3000; ++trial) {
    IntervalSet a = random_set(rng, 60), b = random_set(rng, 60);
    std::set<Unit> sa = to_set(a), sb = to_set(b), expect;
    std::set_intersection(sa.begin(), sa.end(), sb.begin(), sb.end(),
                          std::inserter(expect, expect.begin()));
    ASSERT_EQ(to_set(a.intersect(b)), expect);
    expect.clear();
    std::set_difference(sa.begin(), sa.end(), sb.begin(), sb.end(),
                        std::inserter(expect, expect.begin()));
    ASSERT_EQ(to_set(a.subtract(b)), expect);
    expect = sa;
    expect.insert(sb.begin(), sb.end());
    ASSERT_EQ(to_set(a.unite(b)), expect);
    // Canonical form: sorted, disjoint, never touching.
    const IntervalSet u = a.unite(b);
    const auto& ivs = u.intervals();
    for (size_t i = 1; i < ivs.size(); ++i) ASSERT_LT(ivs[i - 1].end, ivs[i].start);
    const Unit k = a.size() ? static_cast<Unit>(rng() % (a.size() + 1)) : 0;
    ASSERT_EQ(a.prefix(k).size(), k);
    ASSERT_EQ(a.prefix(k).unite(a.suffix_after(k)), a);
    ASSERT_TRUE(a.prefix(k).intersect(a.suffix_after(k)).empty());
  }
}

}  // namespace
}  // namespace ntp::layout
