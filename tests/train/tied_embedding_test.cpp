// The tied GPT-2 embedding across pipeline stages (train/tied_embedding.h):
// the rows each rank of the first and the last stage exchange, checked over
// many plans, the checker shown to reject each broken variant, and the sum
// run over Gloo by thread ranks: both copies end with the same sum, bit for
// bit, and a peer that never comes fails the others by the deadline.
#include "train/tied_embedding.h"

#include <algorithm>
#include <bit>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <functional>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "comm/error.h"
#include "comm/store.h"

#include "tests/comm/thread_ranks.h"
#include "tests/model/model_test_util.h"

namespace ntp::train {
namespace {

using namespace std::chrono_literals;
using Failed = std::map<ReplicaStage, std::vector<std::int64_t>>;

// GPT-2 (tied) or Llama (untied) with `layers` blocks, vocabulary 61 padded
// to 64; align 1, so each stage's TP degree cuts the rows its own way.
JobPlan plan_of(std::int64_t dp, std::int64_t pp, std::int64_t tp, Failed failed, bool llama = false,
                std::int64_t layers = 5) {
  Config c;
  c.parallel.dp = dp;
  c.parallel.pp = pp;
  c.parallel.tp = tp;
  c.parallel.align = 1;
  c.parallel.failed = std::move(failed);
  c.train.global_batch = 4;
  model::GptConfig gpt = llama ? model::testing::llama_test_config() : model::testing::small_test_config();
  gpt.layers = layers;
  return JobPlan::build(c, {gpt, 8, 100});
}

std::vector<TiedRows> planned(const JobPlan& plan, int rank) { return tied_embedding_rows(plan, rank); }

TEST(TiedEmbedding, EveryRowOfEitherEndIsSummedOnceWithItsTwin) {
  std::mt19937 rng(35);
  int checked = 0;
  for (std::int64_t pp : {2, 3, 4}) {
    for (std::int64_t tp : {1, 2, 3, 4}) {
      for (std::int64_t dp : {1, 2}) {
        for (int pattern = 0; pattern < 6; ++pattern) {
          Failed failed;
          for (std::int64_t r = 0; r < dp && pattern > 0; ++r) {
            for (std::int64_t s : {std::int64_t{0}, pp - 1}) {
              std::vector<std::int64_t> slots(static_cast<std::size_t>(tp));
              std::iota(slots.begin(), slots.end(), 0);
              std::shuffle(slots.begin(), slots.end(), rng);
              slots.resize(rng() % static_cast<unsigned>(tp));
              std::sort(slots.begin(), slots.end());
              if (!slots.empty()) failed[{r, s}] = slots;
            }
          }
          const JobPlan plan = plan_of(dp, pp, tp, failed);
          ASSERT_EQ(check_tied_rows(plan, [&](int rank) { return planned(plan, rank); }), "")
              << "pp " << pp << " tp " << tp << " dp " << dp << " pattern " << pattern;
          ++checked;
        }
      }
    }
  }
  EXPECT_EQ(checked, 3 * 4 * 2 * 6);
}

TEST(TiedEmbedding, NothingIsExchangedWithoutATiedPipeline) {
  const JobPlan whole = plan_of(2, 1, 2, {});
  const JobPlan llama = plan_of(1, 2, 2, {}, /*llama=*/true);
  const JobPlan three = plan_of(1, 3, 2, {});
  for (int rank = 0; rank < whole.world_size(); ++rank) EXPECT_TRUE(planned(whole, rank).empty()) << rank;
  for (int rank = 0; rank < llama.world_size(); ++rank) EXPECT_TRUE(planned(llama, rank).empty()) << rank;
  EXPECT_TRUE(planned(three, 2).empty());  // stage 1 of 3: neither end
  EXPECT_FALSE(planned(three, 0).empty());
  EXPECT_EQ(check_tied_rows(llama, [&](int rank) { return planned(llama, rank); }), "");
}

TEST(TiedEmbedding, UnequalCutsPairEveryOverlap) {
  // Stage 0 at TP 2 (slot 2 failed), the last at TP 3: 64 rows cut 32 | 32
  // and 22 | 21 | 21, so rank 0 meets the first two and rank 1 the last two.
  const JobPlan plan = plan_of(1, 2, 3, {{{0, 0}, {2}}});
  ASSERT_EQ(plan.tp_group(0, 1), (std::vector<int>{2, 3, 4}));
  const std::vector<TiedRows> first = planned(plan, 0);
  ASSERT_EQ(first.size(), 2u);
  EXPECT_EQ(first[0].peer, 2);
  EXPECT_EQ(first[1].peer, 3);
  EXPECT_EQ(first[0].rows.size() + first[1].rows.size(), 32);
  EXPECT_EQ(planned(plan, 3).size(), 2u);  // the middle slot of the last stage straddles both
}

// A rank's pairs with one thing wrong, to show the checker sees it.
enum class Break { kDroppedRow, kSamePeerStage, kOneSided, kTwice, kMiddleStage };

TEST(TiedEmbedding, TheCheckerRejectsEveryBrokenVariant) {
  const JobPlan plan = plan_of(2, 3, 3, {{{1, 2}, {1}}});
  ASSERT_EQ(check_tied_rows(plan, [&](int rank) { return planned(plan, rank); }), "");
  for (const Break b : {Break::kDroppedRow, Break::kSamePeerStage, Break::kOneSided, Break::kTwice, Break::kMiddleStage}) {
    const auto broken = [&](int rank) {
      std::vector<TiedRows> rows = planned(plan, rank);
      if (rank == 0 && !rows.empty()) {
        layout::IntervalSet& r = rows[0].rows;
        if (b == Break::kDroppedRow) r = r.suffix_after(1);
        if (b == Break::kSamePeerStage) rows[0].peer = 1;
        if (b == Break::kTwice) rows.push_back(rows[0]);
      }
      if (b == Break::kOneSided && rank == planned(plan, 0).front().peer) {
        rows.erase(std::remove_if(rows.begin(), rows.end(), [](const TiedRows& r) { return r.peer == 0; }), rows.end());
      }
      if (b == Break::kMiddleStage && rank == 3) rows.push_back({6, layout::IntervalSet::range(0, 1)});
      return rows;
    };
    EXPECT_NE(check_tied_rows(plan, broken), "") << static_cast<int>(b);
  }
}

// ---- The sum over Gloo ----

// Rank `rank`'s part of wte's gradient: a value per (stage, row, column)
// that no other stage shares, so the sum shows both parts.
float part(int stage, layout::Unit row, std::int64_t col) {
  return std::ldexp(static_cast<float>((row * 131 + col * 17 + stage * 7919) % 1009) - 504.0f, -7 - stage);
}

constexpr std::int64_t kWidth = 5;

std::vector<float> grad_of(const JobPlan& plan, int rank) {
  const RankPlace& at = plan.place(rank);
  const layout::IntervalSet& mine = plan.layout(model::UnitKind::kVocab, at.stage).units_of(at.replica, at.slot);
  std::vector<float> g;
  for (layout::Unit k = 0; k < mine.size(); ++k) {
    for (std::int64_t c = 0; c < kWidth; ++c) g.push_back(part(at.stage, mine.unit_at(k), c));
  }
  return g;
}

struct SumRun {
  std::vector<std::vector<float>> grads;    // per rank, after the sum
  std::vector<std::exception_ptr> errors;   // per rank
};

// Every rank of a one-replica plan on its own thread and a group over all of
// them; `absent` (a rank or -1) never calls. With `sparse`, the sum runs
// sparse with its rows (the embedding end's flag set per rank).
SumRun run_sum(const JobPlan& plan, std::chrono::milliseconds timeout, int absent = -1,
               const layout::IntervalSet* sparse = nullptr,
               const std::function<void(int rank, std::vector<float>&)>& shape = {}) {
  const int n = plan.world_size();
  comm::testing::TempStoreDir dir;
  auto store = comm::open_store(dir.spec());
  SumRun out{std::vector<std::vector<float>>(static_cast<std::size_t>(n)),
             std::vector<std::exception_ptr>(static_cast<std::size_t>(n))};
  comm::testing::rethrow_first(comm::testing::run_threads(n, [&](int rank) {
    auto group = comm::create_group(store, comm::testing::group_options(n, rank, "embedding", 1, timeout));
    const RankPlace& at = plan.place(rank);
    std::vector<float> grad = grad_of(plan, rank);
    if (shape) shape(rank, grad);
    const TiedSparsity sparsity{sparse != nullptr ? *sparse : layout::IntervalSet{}, at.stage == 0};
    try {
      if (rank != absent) {
        sum_tied_embedding(grad, plan.layout(model::UnitKind::kVocab, at.stage).units_of(at.replica, at.slot), kWidth,
                           tied_embedding_rows(plan, rank), *group, [](int r) { return r; }, 7,
                           sparse != nullptr ? &sparsity : nullptr);
      }
    } catch (...) {
      out.errors[static_cast<std::size_t>(rank)] = std::current_exception();
    }
    out.grads[static_cast<std::size_t>(rank)] = std::move(grad);
  }));
  return out;
}

// The copies of every row of a one-replica pp 3 plan are the same bits.
bool copies_equal(const JobPlan& plan, const SumRun& run, std::string* first_difference) {
  for (int a : plan.tp_group(0, 0)) {
    for (const TiedRows& pair : tied_embedding_rows(plan, a)) {
      const auto& mine_a = plan.layout(model::UnitKind::kVocab, 0).units_of(0, plan.place(a).slot);
      const auto& mine_b = plan.layout(model::UnitKind::kVocab, 2).units_of(0, plan.place(pair.peer).slot);
      for (const layout::Interval& block : pair.rows.intervals()) {
        for (layout::Unit row = block.start; row < block.end; ++row) {
          for (std::int64_t c = 0; c < kWidth; ++c) {
            const float x = run.grads[static_cast<std::size_t>(a)][static_cast<std::size_t>(mine_a.offset_of(row) * kWidth + c)];
            const float y =
                run.grads[static_cast<std::size_t>(pair.peer)][static_cast<std::size_t>(mine_b.offset_of(row) * kWidth + c)];
            if (std::bit_cast<std::uint32_t>(x) != std::bit_cast<std::uint32_t>(y)) {
              *first_difference = "row " + std::to_string(row) + " column " + std::to_string(c) + ": " +
                                  std::to_string(x) + " against " + std::to_string(y);
              return false;
            }
          }
        }
      }
    }
  }
  return true;
}

TEST(TiedEmbedding, BothCopiesEndWithTheSameSumBitForBit) {
  // Stage 0 at TP 2, stage 1 (middle, nothing to do) at 3, stage 2 at TP 3
  // and at TP 1: unequal cuts at both ends.
  for (const Failed& failed : {Failed{{{0, 0}, {2}}}, Failed{{{0, 0}, {0}}, {{0, 2}, {0, 2}}}}) {
    const JobPlan plan = plan_of(1, 3, 3, failed);
    const SumRun run = run_sum(plan, 10s);
    for (int rank = 0; rank < plan.world_size(); ++rank) {
      if (run.errors[static_cast<std::size_t>(rank)]) std::rethrow_exception(run.errors[static_cast<std::size_t>(rank)]);
      const RankPlace& at = plan.place(rank);
      const layout::IntervalSet& mine = plan.layout(model::UnitKind::kVocab, at.stage).units_of(at.replica, at.slot);
      const std::vector<float>& got = run.grads[static_cast<std::size_t>(rank)];
      for (layout::Unit k = 0; k < mine.size(); ++k) {
        for (std::int64_t c = 0; c < kWidth; ++c) {
          const layout::Unit row = mine.unit_at(k);
          const float own = part(at.stage, row, c);
          // The middle stage keeps its own; an end adds the other end's part
          // (own + other: the order each end adds in).
          const float expected = at.stage == 1 ? own : own + part(2 - at.stage, row, c);
          ASSERT_EQ(got[static_cast<std::size_t>(k * kWidth + c)], expected)
              << "rank " << rank << " row " << row << " column " << c;
        }
      }
    }
    std::string difference;
    EXPECT_TRUE(copies_equal(plan, run, &difference)) << difference;  // the same bits
  }
}

// The sparse sum: the embedding's part (stage 0) is zero outside a few rows
// and the LM head's part (stage 2) holds some -0s. Stage 0 sends only those
// rows; both copies still end bit for bit alike, each the exact sum (a -0 of
// the head's part becomes +0 on both ends). A row set that misses a row the
// embedding touched is shown to break the copies: the superset matters.
TEST(TiedEmbedding, TheSparseSumKeepsTheCopiesBitForBitAlike) {
  const JobPlan plan = plan_of(1, 3, 3, Failed{{{0, 0}, {2}}});  // stage 0 at TP 2, stage 2 at TP 3
  const layout::IntervalSet touched{{3, 5}, {17, 18}, {40, 44}};
  const auto shape = [&](const layout::IntervalSet& nonzero) {
    return [&plan, nonzero](int rank, std::vector<float>& grad) {
      const RankPlace& at = plan.place(rank);
      const layout::IntervalSet& mine = plan.layout(model::UnitKind::kVocab, at.stage).units_of(0, at.slot);
      for (layout::Unit k = 0; k < mine.size(); ++k) {
        const layout::Unit row = mine.unit_at(k);
        for (std::int64_t c = 0; c < kWidth; ++c) {
          float& g = grad[static_cast<std::size_t>(k * kWidth + c)];
          if (at.stage == 0 && !nonzero.contains(row)) g = 0.0f;
          if (at.stage == 2 && row % 5 == 0 && c == 0) g = -0.0f;
        }
      }
    };
  };
  const SumRun run = run_sum(plan, 10s, -1, &touched, shape(touched));
  for (const std::exception_ptr& e : run.errors) {
    if (e) std::rethrow_exception(e);
  }
  std::string difference;
  EXPECT_TRUE(copies_equal(plan, run, &difference)) << difference;
  for (int rank : plan.tp_group(0, 2)) {  // the head end: head + embedding, +0 for a -0 head part
    const layout::IntervalSet& mine = plan.layout(model::UnitKind::kVocab, 2).units_of(0, plan.place(rank).slot);
    for (layout::Unit k = 0; k < mine.size(); ++k) {
      const layout::Unit row = mine.unit_at(k);
      for (std::int64_t c = 0; c < kWidth; ++c) {
        const float head = row % 5 == 0 && c == 0 ? -0.0f : part(2, row, c);
        const float embedding = touched.contains(row) ? part(0, row, c) : 0.0f;
        const float got = run.grads[static_cast<std::size_t>(rank)][static_cast<std::size_t>(k * kWidth + c)];
        ASSERT_EQ(std::bit_cast<std::uint32_t>(got), std::bit_cast<std::uint32_t>(head + embedding))
            << "rank " << rank << " row " << row << " column " << c;
      }
    }
  }
  // Broken: row 17 touched by the embedding but left out of the sparse rows.
  const layout::IntervalSet missing{{3, 5}, {40, 44}};
  const SumRun broken = run_sum(plan, 10s, -1, &missing, shape(touched));
  EXPECT_FALSE(copies_equal(plan, broken, &difference));
}

TEST(TiedEmbedding, APeerThatNeverComesFailsTheOthersByTheDeadline) {
  const JobPlan plan = plan_of(1, 2, 2, {});
  const auto start = std::chrono::steady_clock::now();
  const SumRun run = run_sum(plan, 1000ms, /*absent=*/2);
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_TRUE(run.errors[0]) << "rank 0 exchanges with the absent rank 2 and did not fail";
  try {
    std::rethrow_exception(run.errors[0]);
  } catch (const comm::CommError& e) {
    // The deadline, or the absent rank's connections closing as its thread ends.
    EXPECT_TRUE(e.info().kind == comm::CommErrorKind::kTimeout ||
                e.info().kind == comm::CommErrorKind::kConnectionClosed)
        << e.what();
  } catch (const std::exception& e) {
    ADD_FAILURE() << "not a CommError: " << e.what();
  }
  EXPECT_LT(seconds, 6.0) << "a rank waited past its deadline";
}

TEST(TiedEmbedding, BadBuffersAreRefusedNamingTheRows) {
  const JobPlan plan = plan_of(1, 2, 1, {});
  comm::testing::run_group(1, "one", [&](comm::Group& group) {
    const layout::IntervalSet mine = layout::IntervalSet::range(0, 4);
    std::vector<float> grad(4 * kWidth - 1);
    EXPECT_THROW(sum_tied_embedding(grad, mine, kWidth, {}, group, [](int r) { return r; }, 0), std::invalid_argument);
    grad.resize(4 * kWidth);
    try {
      sum_tied_embedding(grad, mine, kWidth, {{0, layout::IntervalSet::range(3, 6)}}, group, [](int r) { return r; }, 0);
      ADD_FAILURE() << "rows outside the buffer were accepted";
    } catch (const std::invalid_argument& e) {
      EXPECT_NE(std::string(e.what()).find("[3, 6)"), std::string::npos) << e.what();
    }
  });
}

}  // namespace
}  // namespace ntp::train
