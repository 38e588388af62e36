#include "train/tied_embedding.h"

#include <algorithm>
#include <stdexcept>

#include <fmt/format.h>

namespace ntp::train {
namespace {

bool ties(const JobPlan& plan) { return plan.pp() > 1 && !plan.gpt().llama(); }

// The other end stage of `stage`, or -1 when it is neither end.
int other_end(const JobPlan& plan, int stage) {
  if (stage == 0) return plan.pp() - 1;
  if (stage == plan.pp() - 1) return 0;
  return -1;
}

// The float range of each interval of `part` within the unit-major storage of
// `mine`: an interval of a subset lies inside one interval of `mine` (its
// intervals are non-adjacent), so its rows are contiguous there.
template <class Fn>
void for_each_block(const layout::IntervalSet& mine, const layout::IntervalSet& part, std::int64_t width, Fn&& fn) {
  for (const layout::Interval& block : part.intervals()) {
    const layout::Unit at = mine.offset_of(block.start);
    if (at < 0 || mine.offset_of(block.end - 1) != at + block.size() - 1) {
      throw std::invalid_argument(fmt::format("tied embedding: rows [{}, {}) are not all held here ({})", block.start,
                                              block.end, mine.to_string()));
    }
    fn(static_cast<std::size_t>(at * width), static_cast<std::size_t>(block.size() * width));
  }
}

}  // namespace

std::vector<TiedRows> tied_embedding_rows(const JobPlan& plan, int rank) {
  if (!ties(plan) || !plan.is_member(rank)) return {};
  const RankPlace& at = plan.place(rank);
  const int other = other_end(plan, at.stage);
  if (other < 0) return {};
  const layout::IntervalSet& mine = plan.layout(model::UnitKind::kVocab, at.stage).units_of(at.replica, at.slot);
  const layout::JobLayout& theirs = plan.layout(model::UnitKind::kVocab, other);
  std::vector<TiedRows> out;
  for (int peer : plan.tp_group(at.replica, other)) {
    layout::IntervalSet rows = mine.intersect(theirs.units_of(at.replica, plan.place(peer).slot));
    if (!rows.empty()) out.push_back({peer, std::move(rows)});
  }
  return out;
}

std::string check_tied_rows(const JobPlan& plan, const std::function<std::vector<TiedRows>(int rank)>& rows_of) {
  for (int rank = 0; rank < plan.world_size(); ++rank) {
    const std::vector<TiedRows> rows = rows_of(rank);
    const RankPlace& at = plan.place(rank);
    const int other = ties(plan) && plan.is_member(rank) ? other_end(plan, at.stage) : -1;
    if (other < 0) {
      if (!rows.empty()) return fmt::format("rank {}: exchanges tied rows but holds no end of a tied pipeline", rank);
      continue;
    }
    layout::IntervalSet covered;
    for (const TiedRows& pair : rows) {
      if (pair.peer < 0 || pair.peer >= plan.world_size() || !plan.is_member(pair.peer) ||
          plan.place(pair.peer).replica != at.replica || plan.place(pair.peer).stage != other) {
        return fmt::format("rank {}: peer {} is not a rank of stage {} of replica {}", rank, pair.peer, other,
                           at.replica);
      }
      if (!covered.intersect(pair.rows).empty()) {
        return fmt::format("rank {}: rows {} are summed twice", rank, covered.intersect(pair.rows).to_string());
      }
      covered.add(pair.rows);
      const std::vector<TiedRows> back = rows_of(pair.peer);
      const auto it = std::find_if(back.begin(), back.end(), [&](const TiedRows& r) { return r.peer == rank; });
      if (it == back.end() || it->rows != pair.rows) {
        return fmt::format("rank {}: peer {} does not exchange the same rows back", rank, pair.peer);
      }
    }
    const layout::IntervalSet& mine = plan.layout(model::UnitKind::kVocab, at.stage).units_of(at.replica, at.slot);
    if (covered != mine) {
      return fmt::format("rank {}: its rows {} are summed as {}", rank, mine.to_string(), covered.to_string());
    }
  }
  return "";
}

void sum_tied_embedding(std::span<float> grad, const layout::IntervalSet& mine, std::int64_t width,
                        const std::vector<TiedRows>& rows, comm::Group& group,
                        const std::function<int(int global_rank)>& group_rank, std::uint32_t tag,
                        const TiedSparsity* sparse) {
  if (static_cast<std::int64_t>(grad.size()) != mine.size() * width) {
    throw std::invalid_argument(fmt::format("tied embedding: {} floats for {} rows of {}", grad.size(), mine.size(),
                                            width));
  }
  // Per pair: the rows sent and the rows received (the embedding's part only
  // those it may touch).
  const auto part = [&](const layout::IntervalSet& pair, bool embedding_side) {
    return sparse != nullptr && embedding_side ? pair.intersect(sparse->embedding_rows) : pair;
  };
  const bool embedding_end = sparse != nullptr && sparse->embedding_end;
  std::vector<std::vector<float>> out(rows.size()), in(rows.size());
  std::vector<layout::IntervalSet> received(rows.size());
  std::vector<comm::P2POp> ops;
  for (std::size_t p = 0; p < rows.size(); ++p) {
    for_each_block(mine, part(rows[p].rows, embedding_end), width, [&](std::size_t at, std::size_t n) {
      out[p].insert(out[p].end(), grad.begin() + static_cast<std::ptrdiff_t>(at),
                    grad.begin() + static_cast<std::ptrdiff_t>(at + n));
    });
    received[p] = part(rows[p].rows, !embedding_end);
    in[p].resize(static_cast<std::size_t>(received[p].size() * width));
    const int peer = group_rank(rows[p].peer);
    ops.push_back(comm::P2POp::send(comm::ConstView(out[p].data(), out[p].size()), peer, tag));
    ops.push_back(comm::P2POp::recv(comm::View(in[p].data(), in[p].size()), peer, tag));
  }
  if (ops.empty()) return;
  group.exchange(ops);
  for (std::size_t p = 0; p < rows.size(); ++p) {
    std::vector<float> dense;  // the pair's rows, +0 where nothing came
    if (received[p] != rows[p].rows) {
      dense.assign(static_cast<std::size_t>(rows[p].rows.size() * width), 0.0f);
      std::size_t next = 0;
      for_each_block(rows[p].rows, received[p], width, [&](std::size_t at, std::size_t n) {
        std::copy_n(in[p].begin() + static_cast<std::ptrdiff_t>(next), n, dense.begin() + static_cast<std::ptrdiff_t>(at));
        next += n;
      });
    }
    const std::vector<float>& add = received[p] != rows[p].rows ? dense : in[p];
    std::size_t next = 0;
    for_each_block(mine, rows[p].rows, width, [&](std::size_t at, std::size_t n) {
      for (std::size_t k = 0; k < n; ++k) grad[at + k] += add[next + k];
      next += n;
    });
  }
}

}  // namespace ntp::train
