#pragma once
// GPT-2 ties the token embedding to the LM head: one matrix wte, read by the
// embedding lookup on the first pipeline stage and by the LM head on the
// last. With parallel.pp > 1 each of the two stages holds its copy of its
// vocabulary rows and computes only its own part of their gradient; the
// copies stay equal when each adds the other's part before the update
// (Megatron's embedding group), after each stage's DP sync.
//
// Within a replica each stage's TP group partitions the vocabulary rows, but
// the first and the last stage may cut them differently (each has its own
// failed slots, so its own degree and layout). So a rank of one end exchanges
// with every rank of the other end whose rows overlap its own: the plan is the
// pairwise intersections, and every row a rank holds is in exactly one of
// them. Both ends add the same two numbers, a + b and b + a, which IEEE
// addition gives bit for bit alike: the copies never drift.
#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <vector>

#include "comm/group.h"
#include "layout/interval_set.h"
#include "train/job_plan.h"

namespace ntp::train {

// The rows one rank exchanges with one rank of the other end stage.
struct TiedRows {
  int peer = -1;             // global rank
  layout::IntervalSet rows;  // vocabulary rows both hold
  bool operator==(const TiedRows&) const = default;
};

// The rows `rank` exchanges, peer by peer in rank order: empty unless the job
// has several stages, the model ties its embedding (GPT-2; Llama's LM head is
// its own matrix) and `rank` trains in the first or the last stage.
std::vector<TiedRows> tied_embedding_rows(const JobPlan& plan, int rank);

// Checks what tied_embedding_rows promises over every rank of `plan` (for
// tests and for a plan read from elsewhere): peers are ranks of the other
// end stage of the same replica, each pair lists the same rows both ways,
// and a rank's pairs cover each of its vocabulary rows exactly once. ""
// when all hold, else the first violation, naming the rank.
std::string check_tied_rows(const JobPlan& plan,
                            const std::function<std::vector<TiedRows>(int rank)>& rows_of);

// The embedding's part of wte's gradient is sparse: only the rows of the
// tokens the step read can be nonzero (after the DP sync, those of any
// replica). Every rank of both ends computes the same superset of them from
// the step's samples, so the embedding end sends only those rows and the
// head end, which receives them, adds +0 to every other row: the embedding
// end's sum there is 0 + b, so both copies stay bit for bit alike (b + 0
// turns a -0 into +0 as 0 + b does). The dense half, the LM head's part,
// still goes the other way.
struct TiedSparsity {
  layout::IntervalSet embedding_rows;  // a superset of the rows the embedding's gradient touches
  bool embedding_end = false;          // this rank holds the embedding (the first stage)
};

// Adds the other end's part of wte's gradient to this rank's. `grad` holds
// the rank's rows `mine` in unit-major order, `width` floats each. Each
// peer's rows go out and come in within one exchange (every send and receive
// posted before any wait, so two ends never wait on each other), tagged
// `tag`; then they are added. `group_rank` maps a global rank to its rank in
// `group`. Every wait keeps the group's deadline (comm::CommError naming the
// peer). Throws std::invalid_argument when `grad` does not hold `mine` or a
// pair's rows are not all in `mine`. With `sparse`, the embedding's part
// travels as the rows of sparse->embedding_rows only (above).
void sum_tied_embedding(std::span<float> grad, const layout::IntervalSet& mine, std::int64_t width,
                        const std::vector<TiedRows>& rows, comm::Group& group,
                        const std::function<int(int global_rank)>& group_rank, std::uint32_t tag,
                        const TiedSparsity* sparse = nullptr);

}  // namespace ntp::train
