#include "elastic/membership.h"

#include <algorithm>
#include <cstring>
#include <map>
#include <optional>
#include <set>
#include <sstream>
#include <thread>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "comm/group.h"
#include "comm/heartbeat.h"
#include "elastic/launcher.h"

namespace ntp::elastic {
namespace {

using Clock = std::chrono::steady_clock;
// The census taker's look for registrations and deaths: every kPoll at
// first (a killed member's dead mark comes within kReapInterval), then less
// often, doubling up to kPollMax (a stopped member takes heartbeat_s to be
// fenced): its store operations grow with the log of the wait, not its length.
constexpr auto kPoll = std::chrono::milliseconds(20);
constexpr auto kPollMax = std::chrono::milliseconds(250);
// How long past the census taker's longest legitimate wait the others give it.
constexpr auto kTakeover = std::chrono::milliseconds(2000);
// How often the others ask whether the census taker died: doubling from
// kTakerCheck up to kTakerCheckMax, so that a rank makes a handful of store
// calls per agreement however long it waits (the wait for the publication
// is one blocking call in the server).
constexpr auto kTakerCheck = std::chrono::milliseconds(250);
constexpr auto kTakerCheckMax = std::chrono::milliseconds(4000);

// Doubles `wait` up to `cap`.
std::chrono::milliseconds backoff(std::chrono::milliseconds wait, std::chrono::milliseconds cap) {
  return std::min(2 * wait, cap);
}

std::string epoch_key(std::uint64_t epoch, const std::string& leaf) {
  return fmt::format("ntp/e{}/{}", epoch, leaf);
}

// A survivor's state as text, separated by `sep`; the norm as its bits, so
// every rank gets exactly the value the commit decided.
std::string format_state(const Survivor& s, char sep) {
  std::uint64_t bits = 0;
  std::memcpy(&bits, &s.grad_norm, sizeof bits);
  return fmt::format("{}{}{}{}{}{}{:x}{}{}", s.applied, sep, s.held_epoch, sep, s.pending, sep, bits, sep,
                     s.skipped ? 1 : 0);
}

void parse_state(std::stringstream& in, Survivor& s) {
  std::uint64_t bits = 0;
  int skipped = 0;
  char sep = 0;
  in >> s.applied >> std::noskipws >> sep >> std::skipws >> s.held_epoch >> std::noskipws >> sep >> std::skipws >>
      s.pending >> std::noskipws >> sep >> std::skipws >> std::hex >> bits >> std::dec >> std::noskipws >> sep >>
      std::skipws >> skipped;
  std::memcpy(&s.grad_norm, &bits, sizeof bits);
  s.skipped = skipped != 0;
}

}  // namespace

std::vector<Survivor> parse_survivors(const std::string& text) {
  std::vector<Survivor> out;
  std::stringstream groups(text);
  for (std::string group; std::getline(groups, group, ';');) {
    const std::size_t at = group.find('@');
    if (at == std::string::npos) throw std::runtime_error("membership list: no '@' in \"" + group + "\"");
    Survivor s;
    std::stringstream state(group.substr(0, at));
    parse_state(state, s);
    std::stringstream ranges(group.substr(at + 1));
    for (std::string range; std::getline(ranges, range, ',');) {
      const std::size_t dash = range.find('-');
      const int first = std::stoi(range.substr(0, dash));
      const int last = dash == std::string::npos ? first : std::stoi(range.substr(dash + 1));
      for (int r = first; r <= last; ++r) {
        s.rank = r;
        out.push_back(s);
      }
    }
  }
  std::sort(out.begin(), out.end(), [](const Survivor& a, const Survivor& b) { return a.rank < b.rank; });
  return out;
}

std::string format_survivors(const std::vector<Survivor>& survivors) {
  std::map<std::string, std::vector<int>> by_state;  // the ranks of each state, ascending
  for (const Survivor& s : survivors) by_state[format_state(s, ':')].push_back(s.rank);
  std::string text;
  for (auto& [state, ranks] : by_state) {
    std::sort(ranks.begin(), ranks.end());
    text += (text.empty() ? "" : ";") + state + "@";
    for (std::size_t i = 0; i < ranks.size();) {
      std::size_t j = i;
      while (j + 1 < ranks.size() && ranks[j + 1] == ranks[j] + 1) ++j;
      text += fmt::format("{}{}", i == 0 ? "" : ",", ranks[i]);
      if (j > i) text += fmt::format("-{}", ranks[j]);
      i = j + 1;
    }
  }
  return text;
}

namespace {

// The census taker's running view: each registration is read once, and only
// members still silent are asked about.
class Census {
 public:
  Census(comm::Store& store, const MembershipOptions& o) : store_(store), o_(o) {}

  void read_registrations() {
    const auto fresh = store_.items(alive_list_key(o_.epoch), read_);
    read_ += fresh.size();
    for (const auto& item : fresh) {
      Survivor s;
      std::stringstream in(comm::to_text(item));
      if (!(in >> s.rank)) continue;
      parse_state(in, s);
      registered_.emplace(s.rank, s);  // a reissued append repeats an item: the first counts
    }
  }

  // Asks about the dead marks of `everyone` (members and candidates), or only
  // of the members still silent.
  void read_deaths(bool everyone) {
    std::vector<int> ask = everyone ? o_.members : silent();
    if (everyone) ask.insert(ask.end(), o_.candidates.begin(), o_.candidates.end());
    std::vector<std::string> keys;
    for (int r : ask) keys.push_back(dead_key(r));
    const auto sent = Clock::now();
    const auto marks = store_.get_many(keys);
    round_trip_ = Clock::now() - sent;
    for (std::size_t i = 0; i < ask.size(); ++i) {
      if (marks[i]) dead_.insert(ask[i]);
    }
  }

  bool dead(int rank) const { return dead_.count(rank) != 0; }
  // The last batched read's duration: the store's round trip as seen here.
  std::chrono::nanoseconds round_trip() const { return round_trip_; }

  // The census asked the launcher to fence `rank` (fence_key): it is left
  // out even should it register after all.
  void fenced(int rank) { fenced_.insert(rank); }
  bool asked_to_fence(int rank) const { return fenced_.count(rank) != 0; }

  // Members still silent whose lease the store still holds (comm/heartbeat.h):
  // the census may not go on without them yet. One batched read.
  std::vector<int> holding_lease(const std::vector<int>& silent) {
    std::vector<std::string> keys;
    for (int r : silent) keys.push_back(comm::lease_key(r));
    const auto leases = store_.get_many(keys);
    std::vector<int> out;
    for (std::size_t i = 0; i < silent.size(); ++i) {
      if (leases[i]) out.push_back(silent[i]);
    }
    return out;
  }

  // Members neither registered nor dead.
  std::vector<int> silent() const {
    std::vector<int> out;
    for (int m : o_.members) {
      if (!registered_.count(m) && !dead_.count(m)) out.push_back(m);
    }
    return out;
  }

  // Registered members and candidates that are not dead, ascending rank.
  std::vector<Survivor> survivors() const {
    std::vector<Survivor> out;
    for (const auto& [rank, s] : registered_) {
      const bool known = std::find(o_.members.begin(), o_.members.end(), rank) != o_.members.end() ||
                         std::find(o_.candidates.begin(), o_.candidates.end(), rank) != o_.candidates.end();
      if (known && !dead_.count(rank) && !fenced_.count(rank)) out.push_back(s);
    }
    return out;
  }

 private:
  comm::Store& store_;
  const MembershipOptions& o_;
  std::size_t read_ = 0;
  std::map<int, Survivor> registered_;
  std::set<int> dead_;
  std::set<int> fenced_;
  std::chrono::nanoseconds round_trip_{0};
};

Membership result(const MembershipOptions& o, std::vector<Survivor> survivors) {
  Membership m{o.epoch, std::move(survivors), {}, {}};
  const std::vector<int> ranks = m.ranks();
  for (int r : o.members) {
    if (!std::binary_search(ranks.begin(), ranks.end(), r)) m.lost.push_back(r);
  }
  for (int r : o.candidates) {
    if (std::binary_search(ranks.begin(), ranks.end(), r)) m.joined.push_back(r);
  }
  return m;
}

}  // namespace

std::string dead_key(int rank) { return fmt::format("ntp/dead/{}", rank); }
std::string fence_key(int rank) { return fmt::format("ntp/fence/{}", rank); }
std::string starved_key(int rank) { return fmt::format("ntp/starved/{}", rank); }
std::string lost_list_key() { return "ntp/lost"; }

std::chrono::milliseconds derived_settle(std::chrono::nanoseconds store_round_trip) {
  return std::min(kReapInterval + 2 * std::chrono::ceil<std::chrono::milliseconds>(store_round_trip),
                  kMaxDerivedSettle);
}

std::vector<int> Membership::ranks() const {
  std::vector<int> out;
  for (const Survivor& s : survivors) out.push_back(s.rank);
  return out;
}

std::string alive_list_key(std::uint64_t epoch) { return epoch_key(epoch, "alive"); }
std::string failed_key(std::uint64_t epoch) { return epoch_key(epoch, "failed"); }
std::string members_list_key(std::uint64_t epoch) { return epoch_key(epoch, "members"); }
std::string seat_key(std::uint64_t epoch, int rank) { return epoch_key(epoch, fmt::format("seat/{}", rank)); }

namespace {

Membership adopt(const MembershipOptions& o, const std::vector<char>& published) {
  Membership m = result(o, parse_survivors(comm::to_text(published)));
  const std::vector<int> ranks = m.ranks();
  if (!std::binary_search(ranks.begin(), ranks.end(), o.rank)) {
    throw LeftOutError(fmt::format("rank {}: left out of epoch {} (survivors {}): it was declared lost", o.rank,
                                   o.epoch, fmt::join(ranks, ",")));
  }
  return m;
}

// The rank whose registration came first.
int census_taker(comm::Store& store, std::uint64_t epoch) {
  const auto first = store.wait_first(alive_list_key(epoch), std::chrono::milliseconds(1));
  int rank = -1;
  if (first) std::stringstream(comm::to_text(*first)) >> rank;
  return rank;
}

// Keys of the epoch before the failed one: its groups were all built or
// abandoned, and its agreement is over.
void erase_finished_epoch(comm::Store& store, std::uint64_t epoch) {
  if (epoch < 2) return;
  store.erase_prefix(comm::group_keys_prefix(epoch - 2));
  store.erase_prefix(alive_list_key(epoch - 2));
  store.erase(failed_key(epoch - 2));
}

// A rank declared lost (a dead mark: fenced, or lost with its host while cut
// off from the store) is out of the job for good. Come back after a network
// partition, it must neither register nor take a census: it would count the
// survivors, busy in a later epoch, as silent and have them fenced.
LeftOutError declared_lost(const MembershipOptions& o, const std::vector<char>& mark) {
  return LeftOutError(fmt::format("rank {}: declared lost ({}) before it could register in epoch {}", o.rank,
                                  comm::to_text(mark), o.epoch));
}

constexpr const char* kSeatTaken = "registered";
constexpr const char* kSeatClosed = "closed";

// Claims this rank's seat in the epoch (compare-and-set): refused when the
// publisher of a list without it closed the seat first. A reissued create
// (a reconnect) finds the seat it took itself: only this rank writes "registered" there.
void claim_seat(comm::Store& store, const MembershipOptions& o) {
  if (store.create(seat_key(o.epoch, o.rank), comm::to_bytes(kSeatTaken))) return;
  const auto seat = store.try_get(seat_key(o.epoch, o.rank));
  if (seat && comm::to_text(*seat) == kSeatClosed) {
    throw StaleEpochError(fmt::format("rank {}: the store refused its registration in epoch {}: the epoch was agreed "
                                      "without it ({} is closed), so its state is of an older epoch; it leaves, "
                                      "and only a new process may come back, through the rejoin path",
                                      o.rank, o.epoch, seat_key(o.epoch, o.rank)));
  }
}

// Closes the seat of every member and candidate that `survivors` leaves out,
// before the list is published: none of them can register in this epoch
// afterwards. A seat its rank claimed first stays claimed; that rank is dead
// or was asked to be fenced, and learns it was left out from the list.
void close_seats(comm::Store& store, const MembershipOptions& o, const std::vector<Survivor>& survivors) {
  std::set<int> in;
  for (const Survivor& s : survivors) in.insert(s.rank);
  for (const std::vector<int>* ranks : {&o.members, &o.candidates}) {
    for (int r : *ranks) {
      if (!in.contains(r)) store.create(seat_key(o.epoch, r), comm::to_bytes(kSeatClosed));
    }
  }
}

}  // namespace

Membership agree_membership(comm::Store& store, const MembershipOptions& o) {
  if (const auto mark = store.try_get(dead_key(o.rank))) throw declared_lost(o, *mark);
  claim_seat(store, o);
  const std::string members_key = members_list_key(o.epoch);
  Survivor me;
  me.applied = o.applied;
  me.held_epoch = o.held_epoch;
  me.pending = o.pending;
  me.grad_norm = o.grad_norm;
  me.skipped = o.skipped;
  const std::size_t position =
      store.append(alive_list_key(o.epoch), comm::to_bytes(fmt::format("{} {}", o.rank, format_state(me, ' '))));
  const auto start = Clock::now();
  const auto deadline = start + o.deadline;
  // The first to register takes the census; the others take it over when
  // the launcher reports it dead, or when it stays silent past the longest
  // wait it may have.
  auto census_from = position == 0 ? start : start + o.wait_for_blocked + 2 * o.settle + kTakeover;
  const int taker = position == 0 ? o.rank : census_taker(store, o.epoch);
  Census census(store, o);
  bool settled = false;
  auto taker_check = kTakerCheck;
  auto poll = kPoll;
  const auto published = [&](std::chrono::nanoseconds wait) {
    return store.wait_first(members_key, std::chrono::ceil<std::chrono::milliseconds>(wait));
  };
  while (Clock::now() < deadline) {
    const auto now = Clock::now();
    if (now < census_from) {
      if (const auto list = published(std::min({census_from, deadline, now + taker_check}) - now)) {
        return adopt(o, *list);
      }
      if (store.try_get(dead_key(taker))) census_from = Clock::now();
      taker_check = backoff(taker_check, kTakerCheckMax);
      continue;
    }
    if (const auto list = published(std::chrono::milliseconds(0))) return adopt(o, *list);
    census.read_registrations();
    census.read_deaths(false);
    const bool waited_out = Clock::now() - start >= o.wait_for_blocked;
    if (!census.silent().empty() && !waited_out) {
      if (const auto list = published(poll)) return adopt(o, *list);
      poll = backoff(poll, kPollMax);
      continue;
    }
    if (!settled) {
      // Let deaths that happened before the census was complete reach the store.
      std::this_thread::sleep_for(o.settle.count() > 0 ? o.settle : derived_settle(census.round_trip()));
      settled = true;
      continue;
    }
    census.read_deaths(true);  // a member may have died after registering
    if (census.dead(o.rank)) {
      // Declared lost while it waited: it fences nobody and publishes nothing.
      throw LeftOutError(fmt::format("rank {}: declared lost while it took the census of epoch {}", o.rank, o.epoch));
    }
    // Members still silent are fenced before anyone goes on without them:
    // their launcher SIGKILLs them and sets their dead mark.
    const std::vector<int> silent = census.silent();
    for (int m : silent) {
      if (census.asked_to_fence(m)) continue;
      store.set(fence_key(m), comm::to_bytes("silent in the agreement"));
      census.fenced(m);
    }
    // And nobody goes on without a silent member before its dead mark is set
    // or its lease has ended on the store. A member cut off from the store
    // (its launcher with it) stops at (last renewal sent) + lease_s - guard;
    // the store drops its lease no earlier than (last renewal sent) +
    // lease_s; so once the lease is gone it has stopped, and cannot commit a
    // step or write the run's logs beside the epoch published here. The
    // wait ends with the agreement's deadline (deadline.rendezvous_s >=
    // max(collective_s, lease_s) + 2 x settle_s leaves room for it).
    if (!census.holding_lease(silent).empty()) {
      if (const auto list = published(poll)) return adopt(o, *list);
      poll = backoff(poll, kPollMax);
      continue;
    }
    const std::vector<Survivor> survivors = census.survivors();
    close_seats(store, o, survivors);
    if (store.append(members_key, comm::to_bytes(format_survivors(survivors))) == 0) {
      erase_finished_epoch(store, o.epoch);
    }
    // The next look reads back whichever publication won.
  }
  throw std::runtime_error(fmt::format("rank {}: no membership for epoch {} within {} ms (deadline.rendezvous_s)",
                                       o.rank, o.epoch, o.deadline.count()));
}

}  // namespace ntp::elastic
