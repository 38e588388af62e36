#pragma once
// A set of unit ids stored as sorted, disjoint, non-adjacent half-open
// intervals [start, end). Layouts over a 50k vocabulary stay a handful of
// intervals, and "which of my intervals holds this id" is a binary search.
#include <cstdint>
#include <initializer_list>
#include <string>
#include <vector>

namespace ntp::layout {

using Unit = std::int64_t;

struct Interval {
  Unit start = 0;  // first unit
  Unit end = 0;    // one past the last unit
  Unit size() const { return end - start; }
  bool operator==(const Interval&) const = default;
};

class IntervalSet {
 public:
  IntervalSet() = default;
  IntervalSet(std::initializer_list<Interval> intervals);
  static IntervalSet range(Unit start, Unit end);

  // Adds [start, end); merges with neighbours so the representation stays canonical.
  void add(Unit start, Unit end);
  void add(const IntervalSet& other);

  const std::vector<Interval>& intervals() const { return intervals_; }
  bool empty() const { return intervals_.empty(); }
  Unit size() const;  // number of units
  bool contains(Unit unit) const;
  // Position of `unit` in the unit-major storage order of this set (the number
  // of smaller units held), or -1 if the unit is not held.
  Unit offset_of(Unit unit) const;
  // The unit stored at position `offset` of the unit-major order.
  Unit unit_at(Unit offset) const;

  IntervalSet intersect(const IntervalSet& other) const;
  IntervalSet subtract(const IntervalSet& other) const;
  IntervalSet unite(const IntervalSet& other) const;
  // The first `count` units of the set (in increasing order) and the rest.
  IntervalSet prefix(Unit count) const;
  IntervalSet suffix_after(Unit count) const;

  bool operator==(const IntervalSet&) const = default;
  std::string to_string() const;  // "[0,4) [9,12)"

 private:
  std::vector<Interval> intervals_;
};

}  // namespace ntp::layout
