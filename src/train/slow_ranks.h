#pragma once
// Ranks slower than their TP peers, found from the commit record step by
// step, and the slot speeds their replica should be laid out with instead
// (elastic.relayout; docs/train.md, "Slow ranks"). Pure: every rank feeds it
// the same commit totals in the same order and gets the same answer, so the
// whole job decides to re-lay out after the same step without a message.
//
// A rank's rate is its units' work (JobPlan::work_of, FLOPs) over its busy
// time (CommitRecord::busy_s: its passes without the TP all-reduces, which a
// slower peer would stretch); its measured speed is its rate over the
// fastest rate of its replica. The layout assumed speeds (parallel.speeds,
// scaled so that the fastest is 1). A rank whose measured speed is off the
// assumed one by more than `threshold` (relative) in `steps` consecutive
// steps is due: its replica's speeds become, for each due rank, the mean of
// those measurements rounded to kSpeedQuantum (1 when within the threshold
// of 1), the others' kept. A replica
// whose speeds all come to 1.0 is dropped from the map (no entry = equal).
// The first step after a start or a new epoch is not measured (cold caches).
//
// Why a rate in FLOPs and not busy times alone: whole heads and aligned
// blocks leave healthy slots unequal work (128 heads at TP 30: 5 or 4), so
// equal speeds do not give equal busy times; the rate does not depend on the
// layout. A layout that already follows a slow rank's speed gives it fewer
// units, and its rate still says its speed, so a balanced replica is left
// alone; a rank whose speed came back shows a rate above the assumed speed
// and is laid out back. What the rate leaves out is compute no layout shares
// (norms, residuals, per-call costs): it makes a rank with few units look a
// little slower than it is. For a model of real size that is a few percent,
// well inside the threshold; for a toy model it can cut a slow rank's share
// once more before the threshold stops it.
#include <cstdint>
#include <map>
#include <optional>
#include <vector>

#include "layout/slot_speeds.h"
#include "train/job_plan.h"

namespace ntp::train {

struct SlowRankOptions {
  double threshold = 0.2;   // elastic.slow_threshold
  std::int64_t steps = 3;   // elastic.slow_steps
};

// Speeds are rounded to this step: the layouts of 0.5 and 0.5013 would differ
// by a unit or two for nothing, and a relayout costs a state move.
constexpr double kSpeedQuantum = 0.05;

struct SpeedChange {
  int rank = 0;
  int replica = 0;
  int slot = 0;
  double assumed = 1;   // in the current layout (the fastest slot = 1)
  double measured = 1;  // the new speed, rounded
};

struct Relayout {
  layout::SlotSpeeds speeds;         // the job's speeds from the next epoch on
  std::vector<SpeedChange> changes;  // the ranks whose speed changes
};

class SlowRanks {
 public:
  explicit SlowRanks(SlowRankOptions options) : options_(options) {}

  // After the commit of a step of `plan`'s epoch: every member's busy
  // seconds, members ascending. The job's next speeds when a replica is due.
  std::optional<Relayout> observe(const JobPlan& plan, const std::vector<double>& busy_s);
  // A new epoch: what was measured against the old layout is dropped.
  void reset() {
    off_.clear();
    warm_up_ = true;
  }

 private:
  SlowRankOptions options_;
  std::map<int, std::vector<double>> off_;  // rank -> its measured speeds while off, consecutive
  bool warm_up_ = true;                     // the next step is an epoch's first
};

}  // namespace ntp::train
