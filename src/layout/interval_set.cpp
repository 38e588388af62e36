#include "layout/interval_set.h"

#include <algorithm>
#include <stdexcept>

namespace ntp::layout {

IntervalSet::IntervalSet(std::initializer_list<Interval> intervals) {
  for (const Interval& iv : intervals) add(iv.start, iv.end);
}

IntervalSet IntervalSet::range(Unit start, Unit end) {
  IntervalSet set;
  set.add(start, end);
  return set;
}

void IntervalSet::add(Unit start, Unit end) {
  if (end < start) throw std::invalid_argument("interval end before start");
  if (start == end) return;
  // Find the first interval that ends at or after `start` (could merge), then
  // absorb every interval that starts at or before `end`.
  auto first = std::lower_bound(intervals_.begin(), intervals_.end(), start,
                                [](const Interval& iv, Unit s) { return iv.end < s; });
  auto last = first;
  Interval merged{start, end};
  while (last != intervals_.end() && last->start <= end) {
    merged.start = std::min(merged.start, last->start);
    merged.end = std::max(merged.end, last->end);
    ++last;
  }
  first = intervals_.erase(first, last);
  intervals_.insert(first, merged);
}

void IntervalSet::add(const IntervalSet& other) {
  for (const Interval& iv : other.intervals_) add(iv.start, iv.end);
}

Unit IntervalSet::size() const {
  Unit total = 0;
  for (const Interval& iv : intervals_) total += iv.size();
  return total;
}

bool IntervalSet::contains(Unit unit) const {
  return offset_of(unit) >= 0;
}

Unit IntervalSet::offset_of(Unit unit) const {
  auto it = std::upper_bound(intervals_.begin(), intervals_.end(), unit,
                             [](Unit u, const Interval& iv) { return u < iv.end; });
  if (it == intervals_.end() || unit < it->start) return -1;
  Unit offset = unit - it->start;
  for (auto p = intervals_.begin(); p != it; ++p) offset += p->size();
  return offset;
}

Unit IntervalSet::unit_at(Unit offset) const {
  if (offset < 0) throw std::out_of_range("negative unit offset");
  for (const Interval& iv : intervals_) {
    if (offset < iv.size()) return iv.start + offset;
    offset -= iv.size();
  }
  throw std::out_of_range("unit offset past the end of the set");
}

IntervalSet IntervalSet::intersect(const IntervalSet& other) const {
  IntervalSet out;
  auto a = intervals_.begin();
  auto b = other.intervals_.begin();
  while (a != intervals_.end() && b != other.intervals_.end()) {
    const Unit lo = std::max(a->start, b->start);
    const Unit hi = std::min(a->end, b->end);
    if (lo < hi) out.intervals_.push_back({lo, hi});  // already sorted and disjoint
    (a->end < b->end) ? ++a : ++b;
  }
  return out;
}

IntervalSet IntervalSet::subtract(const IntervalSet& other) const {
  IntervalSet out;
  auto b = other.intervals_.begin();
  for (const Interval& iv : intervals_) {
    Unit cursor = iv.start;
    while (b != other.intervals_.end() && b->end <= cursor) ++b;
    for (auto c = b; c != other.intervals_.end() && c->start < iv.end; ++c) {
      if (c->start > cursor) out.intervals_.push_back({cursor, c->start});
      cursor = std::max(cursor, c->end);
    }
    if (cursor < iv.end) out.intervals_.push_back({cursor, iv.end});
  }
  return out;
}

IntervalSet IntervalSet::unite(const IntervalSet& other) const {
  IntervalSet out = *this;
  out.add(other);
  return out;
}

IntervalSet IntervalSet::prefix(Unit count) const {
  IntervalSet out;
  for (const Interval& iv : intervals_) {
    if (count <= 0) break;
    const Unit take = std::min(count, iv.size());
    out.intervals_.push_back({iv.start, iv.start + take});
    count -= take;
  }
  return out;
}

IntervalSet IntervalSet::suffix_after(Unit count) const {
  return subtract(prefix(count));
}

std::string IntervalSet::to_string() const {
  std::string s;
  for (const Interval& iv : intervals_) {
    if (!s.empty()) s += ' ';
    s += '[' + std::to_string(iv.start) + ',' + std::to_string(iv.end) + ')';
  }
  return s.empty() ? "{}" : s;
}

}  // namespace ntp::layout
