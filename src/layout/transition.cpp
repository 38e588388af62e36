#include "layout/transition.h"

#include <algorithm>
#include <map>
#include <optional>
#include <stdexcept>
#include <tuple>

#include "layout/errors.h"

namespace ntp::layout {

namespace {

// A replica's layout as a sorted list of (interval, slot): for a training
// replica the pieces partition [0, U), so one sweep finds any unit's holder.
struct Piece {
  Interval units;
  int slot = 0;
};
using Pieces = std::vector<Piece>;

Pieces pieces_of(const ReplicaLayout& layout) {
  Pieces pieces;
  for (size_t slot = 0; slot < layout.slots.size(); ++slot)
    for (const Interval& iv : layout.slots[slot].intervals())
      pieces.push_back({iv, static_cast<int>(slot)});
  std::sort(pieces.begin(), pieces.end(),
            [](const Piece& a, const Piece& b) { return a.units.start < b.units.start; });
  return pieces;
}

// A replica as a source: its old layout, which of its slots serve (alive in
// the new configuration and not stale), and how much it has sent cross-domain
// so far. Its pieces are listed on first use: most replicas are never asked.
class Source {
 public:
  Source(const ReplicaLayout& old, const ReplicaLayout& next)
      : old_(old.dropped ? nullptr : &old), serves_(alive_mask(next)) {
    whole_ = old_ && std::all_of(old.active.begin(), old.active.end(),
                                 [&](int slot) { return serves(slot); });
  }

  // A stale slot missed the last update: its copy may serve nobody, itself
  // included. When it held units, the replica no longer holds every unit.
  void mark_stale(int slot) {
    serves_[static_cast<size_t>(slot)] = 0;
    if (old_ && !old_->slots[static_cast<size_t>(slot)].empty()) whole_ = false;
  }

  bool held_anything() const { return old_ != nullptr; }  // it trained before
  bool serves(int slot) const { return serves_[static_cast<size_t>(slot)] != 0; }
  bool whole() const { return whole_; }
  Unit load() const { return load_; }
  const Pieces& pieces() {
    if (!pieces_) pieces_ = old_ ? pieces_of(*old_) : Pieces{};
    return *pieces_;
  }

  // Calls fn(part, slot) for each part of `want` held by a serving slot.
  template <typename Fn>
  void for_each_held(Interval want, Fn&& fn) {
    const Pieces& all = pieces();
    auto it = std::upper_bound(all.begin(), all.end(), want.start,
                               [](Unit u, const Piece& p) { return u < p.units.end; });
    for (; it != all.end() && it->units.start < want.end; ++it) {
      if (!serves(it->slot)) continue;
      fn(Interval{std::max(want.start, it->units.start), std::min(want.end, it->units.end)},
         it->slot);
    }
  }
  Unit held_size(Interval want) {
    if (whole_) return want.size();  // every old holder serves
    Unit held = 0;
    for_each_held(want, [&](Interval part, int) { held += part.size(); });
    return held;
  }
  void count_sent(Unit units) { load_ += units; }

 private:
  static std::vector<char> alive_mask(const ReplicaLayout& layout) {
    std::vector<char> alive(layout.slots.size(), 0);
    for (int slot : layout.active) alive[static_cast<size_t>(slot)] = 1;
    return alive;
  }

  const ReplicaLayout* old_;  // null when it sat out: holds nothing
  std::vector<char> serves_;  // per slot: alive in the new configuration, not stale
  bool whole_ = false;        // every old holder serves: it can serve any unit
  Unit load_ = 0;             // units sent cross-domain so far
  std::optional<Pieces> pieces_;
};

// Collects transfers, then merges them per (to, from) pair so each pair
// becomes one move. Sorting one flat list is much cheaper than a map of sets.
class MoveBook {
 public:
  void add(SlotRef from, SlotRef to, Interval units) { pieces_.push_back({from, to, units}); }
  std::vector<Move> moves() {
    std::sort(pieces_.begin(), pieces_.end(), [](const RawMove& a, const RawMove& b) {
      return std::tie(a.to, a.from, a.units.start) < std::tie(b.to, b.from, b.units.start);
    });
    std::vector<Move> out;
    for (const RawMove& p : pieces_) {
      if (out.empty() || out.back().to != p.to || out.back().from != p.from)
        out.push_back({p.from, p.to, {}, p.from.replica != p.to.replica});
      out.back().units.add(p.units.start, p.units.end);
    }
    return out;
  }

 private:
  struct RawMove {
    SlotRef from;
    SlotRef to;
    Interval units;
  };
  std::vector<RawMove> pieces_;
};

// A piece a new holder needs from another replica.
struct Need {
  SlotRef to;
  Interval units;
};

// Extends the last need when `units` continue it, so a slot whose old holders
// are all gone or stale asks its peers for one piece, not one per old holder.
void add_need(std::vector<Need>& needs, SlotRef to, Interval units) {
  if (!needs.empty() && needs.back().to == to && needs.back().units.end == units.start)
    needs.back().units.end = units.end;
  else
    needs.push_back({to, units});
}

// Sweeps the old and new pieces of replica r together: a unit stays when its
// old holder is its new holder and serves, moves inside the replica when its
// old holder is another serving slot, else (holder gone or stale) becomes a need.
void plan_inside_replica(int replica, Source& own, const Pieces& new_pieces, MoveBook& book,
                         std::vector<Need>& needs) {
  const Pieces& old_pieces = own.pieces();
  size_t i = 0;
  for (const Piece& np : new_pieces) {
    const SlotRef to{replica, np.slot};
    for (Unit lo = np.units.start; lo < np.units.end;) {
      while (i < old_pieces.size() && old_pieces[i].units.end <= lo) ++i;
      if (i == old_pieces.size()) {  // the replica held nothing (it sat out)
        add_need(needs, to, {lo, np.units.end});
        break;
      }
      const Piece& op = old_pieces[i];
      const Unit hi = std::min(np.units.end, op.units.end);
      if (!own.serves(op.slot)) {
        add_need(needs, to, {lo, hi});
      } else if (op.slot != np.slot) {
        book.add({replica, op.slot}, to, {lo, hi});
      }  // else it stays on a slot that serves: nothing moves
      lo = hi;
    }
  }
}

// The peer that serves `want`: one holding all of it if any, least loaded,
// lowest id; -1 if no peer holds any of it.
int pick_source(std::vector<Source>& sources, int needing_replica, Interval want) {
  int best = -1;
  std::tuple<bool, Unit, int> best_key{};
  for (int p = 0; p < static_cast<int>(sources.size()); ++p) {
    Source& s = sources[static_cast<size_t>(p)];
    if (p == needing_replica || !s.held_anything()) continue;
    const Unit held = s.held_size(want);
    if (held == 0) continue;
    const std::tuple<bool, Unit, int> key{held < want.size(), s.load(), p};
    if (best < 0 || key < best_key) best = p, best_key = key;
  }
  return best;
}

// Serves one need from peers, splitting it when no single peer holds all of
// it; what no peer holds is lost.
void serve_from_peers(const Need& need, std::vector<Source>& sources, MoveBook& book,
                      std::map<int, IntervalSet>& lost) {
  std::vector<Interval> work{need.units};
  while (!work.empty()) {
    const Interval want = work.back();
    work.pop_back();
    const int p = pick_source(sources, need.to.replica, want);
    if (p < 0) {
      lost[need.to.replica].add(want.start, want.end);
      continue;
    }
    Source& source = sources[static_cast<size_t>(p)];
    Unit cursor = want.start;
    source.for_each_held(want, [&](Interval part, int slot) {
      if (cursor < part.start) work.push_back({cursor, part.start});
      book.add({p, slot}, need.to, part);
      source.count_sent(part.size());
      cursor = part.end;
    });
    if (cursor < want.end) work.push_back({cursor, want.end});
  }
}

void check_same_job(const JobLayout& from, const JobLayout& to) {
  if (from.units != to.units || from.tp != to.tp || from.num_replicas() != to.num_replicas())
    throw std::invalid_argument("transition between different jobs: units/tp/replicas " +
                                std::to_string(from.units) + "/" + std::to_string(from.tp) + "/" +
                                std::to_string(from.num_replicas()) + " vs " +
                                std::to_string(to.units) + "/" + std::to_string(to.tp) + "/" +
                                std::to_string(to.num_replicas()));
}

// Every replica as a source, with its stale slots marked.
std::vector<Source> sources_of(const JobLayout& from, const JobLayout& to,
                               const std::vector<SlotRef>& stale) {
  std::vector<Source> sources;
  sources.reserve(static_cast<size_t>(from.num_replicas()));
  for (int r = 0; r < from.num_replicas(); ++r)
    sources.emplace_back(from.replica(r), to.replica(r));
  for (const SlotRef& s : stale) {
    if (s.replica < 0 || s.replica >= to.num_replicas() || s.slot < 0 || s.slot >= to.tp)
      throw std::invalid_argument("stale slot (replica " + std::to_string(s.replica) + ", slot " +
                                  std::to_string(s.slot) +
                                  ") outside the job: " + std::to_string(to.num_replicas()) +
                                  " replicas of tp " + std::to_string(to.tp));
    sources[static_cast<size_t>(s.replica)].mark_stale(s.slot);
  }
  return sources;
}

}  // namespace

TransitionPlan plan_transition(const JobLayout& from, const JobLayout& to) {
  return plan_transition(from, to, {});
}

TransitionPlan plan_transition(const JobLayout& from, const JobLayout& to,
                               const std::vector<SlotRef>& stale) {
  check_same_job(from, to);
  std::vector<Source> sources = sources_of(from, to, stale);
  MoveBook book;
  std::vector<Need> needs;
  for (int r = 0; r < to.num_replicas(); ++r) {
    const ReplicaLayout& next = to.replica(r);
    if (next.dropped) continue;  // sits out: needs nothing
    Source& own = sources[static_cast<size_t>(r)];
    // Same layout and every holder serves (none is stale): all stays.
    if (own.whole() && next.slots == from.replica(r).slots) continue;
    plan_inside_replica(r, own, pieces_of(next), book, needs);
  }
  std::map<int, IntervalSet> lost;
  for (const Need& need : needs) serve_from_peers(need, sources, book, lost);

  TransitionPlan plan;
  plan.moves = book.moves();
  for (const Move& m : plan.moves)
    (m.cross_domain ? plan.cross_units : plan.intra_units) += m.units.size();
  for (auto& [replica, units] : lost) plan.lost.push_back({replica, std::move(units)});
  return plan;
}

std::string TransitionPlan::lost_summary() const {
  std::string out;
  for (const LostUnits& l : lost) {
    if (!out.empty()) out += "; ";
    out += "replica " + std::to_string(l.replica) + " would lose " +
           std::to_string(l.units.size()) + " units " + l.units.to_string();
  }
  return out;
}

void TransitionPlan::require_recoverable() const {
  if (!recoverable())
    throw UnitsLostError("in-job recovery impossible, no surviving slot holds them: " +
                         lost_summary());
}

std::vector<Move> TransitionPlan::receives_of(SlotRef slot) const {
  std::vector<Move> out;
  for (const Move& m : moves)
    if (m.to == slot) out.push_back(m);
  return out;
}

std::vector<Move> TransitionPlan::sends_of(SlotRef slot) const {
  std::vector<Move> out;
  for (const Move& m : moves)
    if (m.from == slot) out.push_back(m);
  return out;
}

}  // namespace ntp::layout
