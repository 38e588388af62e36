#include "train/evaluate.h"

#include <algorithm>

#include <gtest/gtest.h>

namespace ntp::train {
namespace {

TEST(Evaluate, DueEveryNStepsAndAfterTheLast) {
  OptimConfig t;
  t.steps = 7;
  EXPECT_FALSE(eval_due(t, 6));  // eval_every = 0: never
  t.eval_every = 3;
  std::vector<std::int64_t> due;
  for (std::int64_t s = 0; s < t.steps; ++s) {
    if (eval_due(t, s)) due.push_back(s);
  }
  EXPECT_EQ(due, (std::vector<std::int64_t>{2, 5, 6}));
}

TEST(Evaluate, ReplicaSharesCoverTheSequencesOnce) {
  const std::vector<std::int64_t> ids = {0, 1, 2, 3, 4, 5, 6};
  const std::vector<std::int64_t> shares = {3, 0, 5};  // replica 1 sits out
  std::vector<std::int64_t> all;
  for (std::int64_t r = 0; r < 3; ++r) {
    const auto mine = eval_share(ids, shares, r);
    if (r == 1) {
      EXPECT_TRUE(mine.empty());
    }
    all.insert(all.end(), mine.begin(), mine.end());
  }
  std::sort(all.begin(), all.end());
  EXPECT_EQ(all, ids);
  EXPECT_EQ(eval_share(ids, shares, 0), (std::vector<std::int64_t>{0, 2, 4, 6}));
}

}  // namespace
}  // namespace ntp::train
