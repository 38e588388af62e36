#pragma once
// The sync partition S(U, K): units [0, U) cut into K contiguous intervals by
// the share rule of shares.h at equal speeds: in blocks of the kind's
// effective block, sizes within one block (the larger parts first, the
// U mod block units left over on the last part); with block 1 the sizes
// differ by at most one unit (the first U % K intervals hold one more).
// Core slot j of every training replica holds exactly S_j during the DP
// all-reduce of group j.
#include <vector>

#include "layout/interval_set.h"
#include "layout/shares.h"

namespace ntp::layout {

// S_j of S(units, degree) in blocks of `block`. Requires 1 <= degree,
// 0 <= j < degree, block >= 1.
Interval sync_interval(Unit units, int degree, int j, Unit block = 1);

// All K intervals of S(units, degree), in order.
std::vector<IntervalSet> sync_partition(Unit units, int degree, Unit block = 1);

}  // namespace ntp::layout
