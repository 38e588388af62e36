// The 1F1B schedule and the pipeline simulator, over pp 1..8 and m 1..32:
// each op once, forward before backward, 1F1B's shape and in-flight bound
// pp - s, the bubble formula, every simulated start the earliest its
// dependencies allow (and equal to a tick-by-tick reference), and broken
// schedules rejected. Each checker is first shown to fail on a broken input.
#include "train/pipeline_schedule.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include <gtest/gtest.h>

namespace ntp::train {
namespace {

using Kind = PipelineOp::Kind;
constexpr PipelineOp F(int i) {
  return {Kind::kForward, i};
}
constexpr PipelineOp B(int i) {
  return {Kind::kBackward, i};
}

std::string where(int pp, int m) {
  return "pp " + std::to_string(pp) + ", m " + std::to_string(m);
}

// Every (pp, m) of the sweep.
void for_each_shape(const std::function<void(int pp, int m)>& f) {
  for (int pp = 1; pp <= 8; ++pp)
    for (int m = 1; m <= 32; ++m) f(pp, m);
}

StageTimes equal_times(int pp, double tf, double tb, double p2p = 0) {
  return {std::vector<double>(static_cast<size_t>(pp), tf),
          std::vector<double>(static_cast<size_t>(pp), tb), p2p};
}

// GPipe: all forwards, then all backwards. Valid, same bubble, but a stage
// holds every micro-batch's activations.
PipelineSchedule gpipe(int pp, int m) {
  PipelineSchedule s{m, std::vector<std::vector<PipelineOp>>(static_cast<size_t>(pp))};
  for (auto& ops : s.stages) {
    for (int i = 0; i < m; ++i) ops.push_back(F(i));
    for (int i = 0; i < m; ++i) ops.push_back(B(i));
  }
  return s;
}

// One micro-batch at a time through the whole pipeline and back: valid, no
// overlap between micro-batches at all.
PipelineSchedule no_warmup(int pp, int m) {
  PipelineSchedule s{m, std::vector<std::vector<PipelineOp>>(static_cast<size_t>(pp))};
  for (auto& ops : s.stages)
    for (int i = 0; i < m; ++i) ops.insert(ops.end(), {F(i), B(i)});
  return s;
}

// ---- Checkers: each returns "" when the property holds, else the first problem.

std::string once_each_problem(const PipelineSchedule& s) {
  for (int st = 0; st < s.pp(); ++st) {
    const auto& ops = s.stages[static_cast<size_t>(st)];
    if (ops.size() != static_cast<size_t>(2 * s.microbatches))
      return "stage " + std::to_string(st) + " runs " + std::to_string(ops.size()) + " ops";
    for (int i = 0; i < s.microbatches; ++i)
      for (const PipelineOp op : {F(i), B(i)})
        if (std::count(ops.begin(), ops.end(), op) != 1)
          return "stage " + std::to_string(st) + ", micro-batch " + std::to_string(i);
  }
  return "";
}

std::string forward_first_problem(const PipelineSchedule& s) {
  for (int st = 0; st < s.pp(); ++st) {
    const auto& ops = s.stages[static_cast<size_t>(st)];
    for (int i = 0; i < s.microbatches; ++i)
      if (std::find(ops.begin(), ops.end(), F(i)) > std::find(ops.begin(), ops.end(), B(i)))
        return "stage " + std::to_string(st) + " runs B" + std::to_string(i) + " before F";
  }
  return "";
}

// 1F1B's shape: min(pp - s - 1, m) forwards, then forward / backward in turn
// while forwards remain, then backwards; each kind in micro-batch order.
std::string one_f_one_b_shape_problem(const PipelineSchedule& s) {
  for (int st = 0; st < s.pp(); ++st) {
    const int warmup = std::min(s.pp() - st - 1, s.microbatches);
    int forwards = 0, backwards = 0;
    for (size_t k = 0; k < s.stages[static_cast<size_t>(st)].size(); ++k) {
      const PipelineOp op = s.stages[static_cast<size_t>(st)][k];
      const bool forward_turn =
          forwards < s.microbatches && (forwards < warmup || forwards == warmup + backwards);
      const PipelineOp expected = forward_turn ? F(forwards++) : B(backwards++);
      if (!(op == expected)) return "stage " + std::to_string(st) + ", op " + std::to_string(k);
    }
  }
  return "";
}

std::string in_flight_problem(const PipelineRun& run) {
  const int pp = static_cast<int>(run.peak_in_flight.size());
  for (int st = 0; st < pp; ++st)
    if (run.peak_in_flight[static_cast<size_t>(st)] > pp - st)
      return "stage " + std::to_string(st) + " holds " +
             std::to_string(run.peak_in_flight[static_cast<size_t>(st)]);
  return "";
}

// Every op lasts its stage's time and starts exactly when the later of its
// stage's previous op and its dependencies (+ p2p) allows: the dependency
// rules of pipeline_schedule.h, written out again.
std::string timeline_problem(const PipelineSchedule& s, const StageTimes& t,
                             const PipelineRun& run) {
  const auto span_of = [&](int st, PipelineOp op) {
    const auto& ops = s.stages[static_cast<size_t>(st)];
    return run.spans[static_cast<size_t>(st)]
                    [static_cast<size_t>(std::find(ops.begin(), ops.end(), op) - ops.begin())];
  };
  for (int st = 0; st < s.pp(); ++st) {
    double stage_free = 0;
    for (size_t k = 0; k < s.stages[static_cast<size_t>(st)].size(); ++k) {
      const PipelineOp op = s.stages[static_cast<size_t>(st)][k];
      const bool fwd = op.kind == Kind::kForward;
      double ready = stage_free;
      if (fwd && st > 0) ready = std::max(ready, span_of(st - 1, op).finish + t.p2p);
      if (!fwd) ready = std::max(ready, span_of(st, F(op.microbatch)).finish);
      if (!fwd && st < s.pp() - 1) ready = std::max(ready, span_of(st + 1, op).finish + t.p2p);
      const OpSpan span = run.spans[static_cast<size_t>(st)][k];
      const double length = (fwd ? t.forward : t.backward)[static_cast<size_t>(st)];
      if (span.start != ready || span.finish != span.start + length)
        return "stage " + std::to_string(st) + ", op " + std::to_string(k);
      stage_free = span.finish;
    }
  }
  return "";
}

// ---- An independent reference: a clock that ticks one unit at a time over
// integer times (each >= 1); nullopt when no op can ever start.
std::optional<int> tick_makespan(const PipelineSchedule& s, const std::vector<int>& tf,
                                 const std::vector<int>& tb, int p2p) {
  const int pp = s.pp(), m = s.microbatches;
  // finish[stage][kind][i], -1 until done
  std::vector<std::vector<std::vector<int>>> finish(
      static_cast<size_t>(pp),
      std::vector<std::vector<int>>(2, std::vector<int>(static_cast<size_t>(m), -1)));
  const auto done_by = [&](int st, PipelineOp op, int handoff, int now) {
    const int f = finish[static_cast<size_t>(st)][static_cast<size_t>(op.kind)]
                        [static_cast<size_t>(op.microbatch)];
    return f >= 0 && f + handoff <= now;
  };
  std::vector<size_t> next(static_cast<size_t>(pp), 0);
  std::vector<int> busy_until(static_cast<size_t>(pp), 0);
  int left = 2 * m * pp, makespan = 0, horizon = 0;
  for (int st = 0; st < pp; ++st)
    horizon += m * (tf[static_cast<size_t>(st)] + tb[static_cast<size_t>(st)] + 2 * p2p);
  for (int now = 0; left > 0; ++now) {
    if (now > horizon) return std::nullopt;
    for (int st = 0; st < pp; ++st) {
      const auto& ops = s.stages[static_cast<size_t>(st)];
      size_t& k = next[static_cast<size_t>(st)];
      if (k == ops.size() || busy_until[static_cast<size_t>(st)] > now) continue;
      const PipelineOp op = ops[k];
      const bool fwd = op.kind == Kind::kForward;
      const bool ready = fwd ? (st == 0 || done_by(st - 1, op, p2p, now))
                             : (done_by(st, F(op.microbatch), 0, now) &&
                                (st == pp - 1 || done_by(st + 1, op, p2p, now)));
      if (!ready) continue;
      const int end = now + (fwd ? tf : tb)[static_cast<size_t>(st)];
      finish[static_cast<size_t>(st)][static_cast<size_t>(op.kind)]
            [static_cast<size_t>(op.microbatch)] = end;
      busy_until[static_cast<size_t>(st)] = end;
      makespan = std::max(makespan, end);
      ++k;
      --left;
    }
  }
  return makespan;
}

// ---- The checkers fail on broken inputs.

TEST(PipelineCheckers, EachFailsOnABrokenInput) {
  const PipelineSchedule good = one_f_one_b(4, 6);
  const StageTimes times = equal_times(4, 1, 2, 0.5);
  const PipelineRun run = simulate_pipeline(good, times);
  ASSERT_EQ(once_each_problem(good), "");
  ASSERT_EQ(forward_first_problem(good), "");
  ASSERT_EQ(one_f_one_b_shape_problem(good), "");
  ASSERT_EQ(in_flight_problem(run), "");
  ASSERT_EQ(timeline_problem(good, times, run), "");

  PipelineSchedule dropped = good;
  dropped.stages[2].pop_back();
  EXPECT_NE(once_each_problem(dropped), "");
  PipelineSchedule doubled = good;
  doubled.stages[1][3] = doubled.stages[1][2];
  EXPECT_NE(once_each_problem(doubled), "");
  PipelineSchedule backward_first = good;
  std::swap(backward_first.stages[3][0], backward_first.stages[3][1]);  // B0 before F0
  EXPECT_NE(forward_first_problem(backward_first), "");
  EXPECT_NE(one_f_one_b_shape_problem(gpipe(4, 6)), "");
  EXPECT_NE(one_f_one_b_shape_problem(no_warmup(4, 6)), "");
  EXPECT_NE(in_flight_problem(simulate_pipeline(gpipe(4, 6), times)), "");
  for (const auto shift : {-0.5, 0.5}) {
    PipelineRun late = run;
    late.spans[2][4].start += shift;
    late.spans[2][4].finish += shift;
    EXPECT_NE(timeline_problem(good, times, late), "") << shift;
  }
  PipelineRun long_op = run;
  long_op.spans[0].back().finish += 1;
  EXPECT_NE(timeline_problem(good, times, long_op), "");
}

TEST(PipelineCheckers, TheReferenceSeesTheHandOffs) {
  // The comparison with the tick reference is not vacuous: the p2p time moves it.
  const PipelineSchedule s = one_f_one_b(3, 4);
  const std::vector<int> tf{1, 2, 1}, tb{2, 3, 2};
  EXPECT_NE(tick_makespan(s, tf, tb, 0), tick_makespan(s, tf, tb, 1));
  EXPECT_EQ(*tick_makespan(s, tf, tb, 1), simulate_pipeline(s, {{1, 2, 1}, {2, 3, 2}, 1}).makespan);
}

// ---- The schedule.

TEST(OneFOneB, AWrittenOutExample) {
  const PipelineSchedule s = one_f_one_b(3, 4);
  ASSERT_EQ(s.pp(), 3);
  EXPECT_EQ(s.stages[0], (std::vector<PipelineOp>{F(0), F(1), F(2), B(0), F(3), B(1), B(2), B(3)}));
  EXPECT_EQ(s.stages[1], (std::vector<PipelineOp>{F(0), F(1), B(0), F(2), B(1), F(3), B(2), B(3)}));
  EXPECT_EQ(s.stages[2], (std::vector<PipelineOp>{F(0), B(0), F(1), B(1), F(2), B(2), F(3), B(3)}));
  // Fewer micro-batches than the warm-up wants: all forwards, then all backwards.
  EXPECT_EQ(one_f_one_b(4, 2).stages[0], (std::vector<PipelineOp>{F(0), F(1), B(0), B(1)}));
}

TEST(OneFOneB, EveryShapeRunsEachOpOnceForwardFirstIn1F1BOrder) {
  int shapes = 0;
  for_each_shape([&](int pp, int m) {
    const PipelineSchedule s = one_f_one_b(pp, m);
    ASSERT_EQ(s.pp(), pp);
    ASSERT_EQ(s.microbatches, m);
    ASSERT_EQ(once_each_problem(s), "") << where(pp, m);
    ASSERT_EQ(forward_first_problem(s), "") << where(pp, m);
    ASSERT_EQ(one_f_one_b_shape_problem(s), "") << where(pp, m);
    EXPECT_NO_THROW(check_schedule(s));
    ++shapes;
  });
  EXPECT_EQ(shapes, 8 * 32);
}

TEST(OneFOneB, RejectsNonPositiveStagesOrMicrobatches) {
  try {
    one_f_one_b(0, 4);
    ADD_FAILURE() << "pp 0 accepted";
  } catch (const std::invalid_argument& e) {
    EXPECT_EQ(std::string(e.what()), "parallel.pp must be >= 1, got 0");
  }
  try {
    one_f_one_b(2, -1);
    ADD_FAILURE() << "m -1 accepted";
  } catch (const std::invalid_argument& e) {
    EXPECT_EQ(std::string(e.what()), "parallel.microbatches must be >= 1, got -1");
  }
}

// ---- The simulator on 1F1B.

TEST(PipelineSimulator, EqualStagesGiveTheTextbookMakespanAndBubble) {
  for (const auto& [tf, tb] : std::vector<std::pair<double, double>>{{1, 1}, {1, 2}, {2, 3}})
    for_each_shape([&](int pp, int m) {
      const PipelineRun run = simulate_pipeline(one_f_one_b(pp, m), equal_times(pp, tf, tb));
      ASSERT_EQ(run.makespan, (m + pp - 1) * (tf + tb)) << where(pp, m) << ", tf " << tf;
      ASSERT_EQ(run.bubble_fraction, static_cast<double>(pp - 1) / (m + pp - 1)) << where(pp, m);
      for (int s = 0; s < pp; ++s) {
        ASSERT_EQ(run.busy[static_cast<size_t>(s)], m * (tf + tb));
        ASSERT_EQ(run.idle[static_cast<size_t>(s)], (pp - 1) * (tf + tb));
      }
    });
}

TEST(PipelineSimulator, StageSHoldsAtMostPpMinusSMicrobatches) {
  for_each_shape([&](int pp, int m) {
    const PipelineRun run = simulate_pipeline(one_f_one_b(pp, m), equal_times(pp, 1, 2));
    ASSERT_EQ(in_flight_problem(run), "") << where(pp, m);
    for (int s = 0; s < pp; ++s)
      ASSERT_EQ(run.peak_in_flight[static_cast<size_t>(s)], std::min(pp - s, m)) << where(pp, m);
    // GPipe: the same makespan, every stage holding all m.
    const PipelineRun g = simulate_pipeline(gpipe(pp, m), equal_times(pp, 1, 2));
    EXPECT_EQ(g.makespan, run.makespan);
    EXPECT_EQ(g.peak_in_flight, std::vector<int>(static_cast<size_t>(pp), m));
  });
}

TEST(PipelineSimulator, WithoutWarmUpTheMakespanMissesTheFormula) {
  // The makespan check can fail: a schedule that never overlaps micro-batches
  // takes m x pp x (tf + tb).
  for_each_shape([&](int pp, int m) {
    const PipelineRun run = simulate_pipeline(no_warmup(pp, m), equal_times(pp, 1, 1));
    EXPECT_EQ(run.makespan, m * pp * 2.0) << where(pp, m);
    if (pp > 1 && m > 1) {
      EXPECT_GT(run.makespan, (m + pp - 1) * 2.0) << where(pp, m);
    }
  });
}

TEST(PipelineSimulator, UnequalStagesMatchTheTickReference) {
  std::mt19937 rng(34);
  const auto pick = [&](int low, int high) {
    return std::uniform_int_distribution(low, high)(rng);
  };
  for_each_shape([&](int pp, int m) {
    std::vector<int> tf, tb;
    StageTimes times;
    for (int s = 0; s < pp; ++s) {
      tf.push_back(pick(1, 4));
      tb.push_back(pick(1, 8));
      times.forward.push_back(tf.back());
      times.backward.push_back(tb.back());
    }
    const int p2p = pick(0, 2);
    times.p2p = p2p;
    const PipelineSchedule s = one_f_one_b(pp, m);
    const PipelineRun run = simulate_pipeline(s, times);
    ASSERT_EQ(timeline_problem(s, times, run), "") << where(pp, m);
    ASSERT_EQ(std::optional<int>(static_cast<int>(run.makespan)), tick_makespan(s, tf, tb, p2p))
        << where(pp, m);
    const double busiest = *std::max_element(run.busy.begin(), run.busy.end());
    EXPECT_EQ(run.bubble_fraction, (run.makespan - busiest) / run.makespan);
    for (int st = 0; st < pp; ++st)
      EXPECT_EQ(run.busy[static_cast<size_t>(st)] + run.idle[static_cast<size_t>(st)],
                run.makespan);
    // Micro-batch 0 alone must cross every stage and come back.
    double critical = 2.0 * (pp - 1) * p2p;
    for (int st = 0; st < pp; ++st)
      critical += tf[static_cast<size_t>(st)] + tb[static_cast<size_t>(st)];
    EXPECT_GE(run.makespan, critical);
  });
}

TEST(PipelineSimulator, ZeroTimesGiveNoBubble) {
  const PipelineRun run = simulate_pipeline(one_f_one_b(3, 2), equal_times(3, 0, 0));
  EXPECT_EQ(run.makespan, 0);
  EXPECT_EQ(run.bubble_fraction, 0);
}

// ---- Broken schedules are rejected.

// What simulating `s` throws as an Error, or "" when it runs.
template <class Error>
std::string error_of(const PipelineSchedule& s, const StageTimes& t) {
  try {
    return simulate_pipeline(s, t).makespan >= 0 ? "" : "a negative makespan";
  } catch (const Error& e) {
    return e.what();
  }
}
std::string deadlock_message(const PipelineSchedule& s, const StageTimes& t) {
  return error_of<PipelineDeadlock>(s, t);
}

TEST(PipelineSimulator, TwoStagesWaitingOnEachOtherIsADeadlock) {
  // Stage 1 runs micro-batch 1 first; stage 0 reaches micro-batch 1's forward
  // only after micro-batch 0's backward, which stage 1 runs last.
  const PipelineSchedule s{2, {{F(0), B(0), F(1), B(1)}, {F(1), B(1), F(0), B(0)}}};
  EXPECT_EQ(deadlock_message(s, equal_times(2, 1, 1)),
            "pipeline schedule deadlocks: stage 0 waits at its backward of micro-batch 0 (op 1) "
            "for stage 1's backward of micro-batch 0; stage 1 waits at its forward of micro-batch "
            "1 (op 0) for stage 0's forward of micro-batch 1");
  EXPECT_EQ(tick_makespan(s, {1, 1}, {1, 1}, 0), std::nullopt);
}

TEST(PipelineSimulator, ABackwardBeforeItsForwardIsADeadlock) {
  for_each_shape([&](int pp, int m) {
    for (int st = 0; st < pp; ++st)
      for (const int i : {0, m / 2, m - 1}) {
        PipelineSchedule s = one_f_one_b(pp, m);
        auto& ops = s.stages[static_cast<size_t>(st)];
        ops.erase(std::find(ops.begin(), ops.end(), B(i)));
        ops.insert(std::find(ops.begin(), ops.end(), F(i)), B(i));
        ASSERT_NE(deadlock_message(s, equal_times(pp, 1, 1)), "")
            << where(pp, m) << ", stage " << st;
      }
  });
}

TEST(PipelineSimulator, TheLastStageInReverseOrderIsADeadlock) {
  // With m >= 3 stage pp - 2 needs micro-batch 0's gradient before it
  // forwards micro-batch m - 1, which the reversed last stage wants first.
  for_each_shape([&](int pp, int m) {
    if (pp < 2 || m < 3) return;
    PipelineSchedule s = one_f_one_b(pp, m);
    for (PipelineOp& op : s.stages.back()) op.microbatch = m - 1 - op.microbatch;
    ASSERT_EQ(once_each_problem(s), "");
    ASSERT_NE(deadlock_message(s, equal_times(pp, 1, 1)), "") << where(pp, m);
    ASSERT_EQ(tick_makespan(s, std::vector<int>(static_cast<size_t>(pp), 1),
                            std::vector<int>(static_cast<size_t>(pp), 1), 0),
              std::nullopt);
  });
}

TEST(PipelineSimulator, RejectsAnIncompleteScheduleAndBadTimes) {
  const StageTimes t = equal_times(2, 1, 1);
  const auto rejected = error_of<std::invalid_argument>;
  PipelineSchedule missing = one_f_one_b(2, 3);
  missing.stages[1].pop_back();
  EXPECT_EQ(rejected(missing, t),
            "pipeline schedule: stage 1 runs the backward of micro-batch 2 0 times, not once");
  PipelineSchedule twice = one_f_one_b(2, 3);
  twice.stages[0].push_back(F(1));
  EXPECT_EQ(rejected(twice, t),
            "pipeline schedule: stage 0 runs the forward of micro-batch 1 2 times, not once");
  PipelineSchedule outside = one_f_one_b(2, 3);
  outside.stages[0][0] = F(3);
  EXPECT_EQ(rejected(outside, t),
            "pipeline schedule: stage 0 runs the forward of micro-batch 3, outside [0, 3)");
  EXPECT_NE(rejected(PipelineSchedule{1, {}}, equal_times(0, 1, 1)), "");
  EXPECT_NE(rejected(PipelineSchedule{0, {{}, {}}}, t), "");
  const PipelineSchedule ok = one_f_one_b(2, 3);
  EXPECT_EQ(rejected(ok, t), "");
  EXPECT_NE(rejected(ok, equal_times(3, 1, 1)), "");
  EXPECT_NE(rejected(ok, {{1, 1}, {1}, 0}), "");
  EXPECT_NE(rejected(ok, {{1, -1}, {1, 1}, 0}), "");
  EXPECT_NE(rejected(ok, {{1, 1}, {1, std::nan("")}, 0}), "");
  EXPECT_EQ(rejected(ok, equal_times(2, 1, 1, -0.5)),
            "stage times: p2p must be >= 0 and finite, got -0.500000");
}

}  // namespace
}  // namespace ntp::train
