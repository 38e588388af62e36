#pragma once
// Membership agreement after a failure, through the job's store.
//
// Every survivor of epoch e registers in epoch e+1 with the last step it
// applied and the epoch whose layout its state is in. A member counts as
// accounted for once it registered, or the launcher marked it dead
// (dead_key: it exited, or was fenced). When every member is accounted for —
// or `wait_for_blocked` has passed since this rank entered, enough for a member
// still blocked in a collective of the failed epoch to reach its deadline and
// register — the census taker waits `settle` (derived_settle: a member that
// registered and died just before the census was complete is not published
// as a survivor), asks the launcher to fence the members still silent
// (fence_key: it SIGKILLs them, so a hung process can never come back with
// stale state), and publishes the registered list by compare-and-set: the
// first publication wins, any later one is dropped, and everyone adopts the
// winner.
//
// Cost: registration is one append to a list; the first rank to register
// takes the census (it reads each registration once and asks only about
// members still silent), and every other rank waits for the publication in
// the server (Redis: a blocking call, cut into a few checks on the census
// taker's death that grow further apart), so a rank makes O(1) store
// operations per recovery — 4 to register and read the list, plus one per
// check — whatever N, and the census taker O(N) bytes. There is no leader to lose:
// if the census taker dies, the others take the census themselves once
// `wait_for_blocked` and the settle time have passed, and any of them may
// publish. The publisher then erases the store keys of epoch e-1 (its groups
// and its registrations), which nobody reads any more.
//
// A rank declared lost (its dead mark is set: fenced, or lost with its host
// while cut off from the store) never registers, and a census taker declared
// lost while it waited fences nobody and publishes nothing: a host back from
// a network partition cannot count the survivors, busy in a later epoch, as
// silent and have them fenced. Both leave with LeftOutError.
//
// Epochs are fencing tokens on the store. Before it registers in epoch E a
// rank claims its seat, seat_key(E, rank), by compare-and-set (Store::create:
// "registered"); before it publishes, the census taker closes the seat of
// every member and candidate it leaves out the same way ("closed"). For each
// rank and epoch exactly one of the two wins: a rank whose seat was closed is
// refused by the store and told so (StaleEpochError) without writing anything
// in that epoch, and one that claimed its seat first is in the census or was
// fenced (it is then left out when it reads the published list). A rank back
// from a cut, its state still in the epoch before E, can therefore never act
// in E or any epoch before it; it comes back, if at all, as a new process
// through the rejoin path (a candidate of a later epoch).
//
// A repaired rank that wants to come back is a candidate: it registers like a
// survivor (nothing applied, no layout), and the list includes it if it
// registered in time; it is never waited for.
//
// Store keys: seat_key(E, rank) ("registered" or "closed"), "ntp/dead/<rank>" (the launcher), "ntp/fence/<rank>" (the
// survivors, for the launcher), list alive_list_key(E) with items "<rank>
// <applied> <held> <pending> <norm bits> <skipped>", list members_list_key(E)
// whose first item is the published list (format_survivors).
#include <chrono>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

#include "comm/store.h"

namespace ntp::elastic {

std::string dead_key(int rank);   // set by the launcher when worker `rank` died or was fenced
std::string fence_key(int rank);  // set by survivors: the launcher must kill `rank`
// Set by `rank`'s launcher (wall ms) while its beat is stale but it still gets
// CPU: watchers on other hosts must not take it for lost with its host.
std::string starved_key(int rank);
// List of the ranks declared lost with their host, in order ("<rank>"),
// appended by the fencer beside the dead mark: workers watch it (loss_watch.h).
std::string lost_list_key();
// Created (first writer wins) by the first member of epoch `epoch` to enter a
// recovery after a failure in it, its value that member's rank: every rank's
// watch (loss_watch.h) then aborts its groups of that epoch, so a member
// whose peers' closed sockets never reach it (it waits on a rank that is
// itself still blocked) joins the agreement within one watch interval, not
// at its collective's deadline.
std::string failed_key(std::uint64_t epoch);
std::string alive_list_key(std::uint64_t epoch);    // registrations of epoch `epoch`
std::string members_list_key(std::uint64_t epoch);  // publications of epoch `epoch`; the first wins
// A rank's seat in epoch `epoch`: claimed by the rank before it registers, or
// closed by the publisher of a list that leaves it out; whoever creates it first wins.
std::string seat_key(std::uint64_t epoch, int rank);

struct MembershipOptions {
  int rank = 0;                  // this process's global rank
  std::vector<int> members;      // the global ranks of the failed epoch
  // Ranks that may join (repaired slots): included when registered and not
  // dead by the time the list is published, never waited for.
  std::vector<int> candidates;
  std::uint64_t epoch = 1;       // the epoch being agreed on
  std::int64_t applied = -1;     // the last step this rank applied
  std::uint64_t held_epoch = 0;  // the epoch whose layout this rank's state is in
  std::int64_t pending = -1;     // the step whose commit it entered but did not see complete
  double grad_norm = 0;          // what the commit of `applied` decided
  bool skipped = false;
  // How long the census taker waits, once every member is accounted for,
  // before it reads the deaths again and publishes. 0: derived_settle().
  std::chrono::milliseconds settle{0};
  std::chrono::milliseconds wait_for_blocked{31000};
  std::chrono::milliseconds deadline{60000};
};

// The longest settle wait derived_settle() gives.
inline constexpr std::chrono::milliseconds kMaxDerivedSettle{250};

// The settle wait derived from what it is for: a member that registered and
// then died before the census was complete must not be published as a
// survivor (the new epoch would fail at once, one more reconfiguration).
// Such a death shows as a dead mark within the launcher's reap interval and
// one store write, and the census taker sees it within one more read: so
// kReapInterval (launcher.h) + 2 x the store's round trip, as the taker measured it,
// capped at kMaxDerivedSettle. Deaths after that are a later failure.
std::chrono::milliseconds derived_settle(std::chrono::nanoseconds store_round_trip);

struct Survivor {
  int rank = 0;
  std::int64_t applied = -1;
  std::uint64_t held_epoch = 0;
  std::int64_t pending = -1;
  double grad_norm = 0;  // of the commit of `applied`, exact (sent as bits)
  bool skipped = false;
  bool operator==(const Survivor&) const = default;
};

struct Membership {
  std::uint64_t epoch = 0;
  std::vector<Survivor> survivors;  // ascending rank
  std::vector<int> lost;            // members of the old epoch not among the survivors
  std::vector<int> joined;          // candidates among the survivors
  std::vector<int> ranks() const;   // the survivors' ranks, ascending
};

// This rank registered, but the published membership leaves it out (it was
// too late, or fenced): it must exit without touching the job's state.
class LeftOutError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// The store refused this rank's registration: the epoch it would register in
// was closed without it (its seat is closed), so its state is of an older
// epoch. It must exit without touching the job's state; only a new process,
// through the rejoin path, may come back.
class StaleEpochError : public LeftOutError {
 public:
  using LeftOutError::LeftOutError;
};

// The published list as text: the survivors grouped by their state,
// "<applied>:<held>:<pending>:<norm bits>:<skipped>@<ranks>;..." with the ranks
// as ascending ranges ("0-3,5,7-9"). Survivors of one failure mostly share one
// state, so the list every rank reads is O(distinct states + gaps) bytes, not
// O(N): at 100k ranks, "1:0:-1:3ff8000000000000:0@0-4,6-99999".
std::string format_survivors(const std::vector<Survivor>& survivors);
// Its inverse, ascending rank; throws std::runtime_error on a malformed group.
std::vector<Survivor> parse_survivors(const std::string& text);

// Blocks until the survivors of `options.epoch` are published. Throws
// StaleEpochError when the store refuses its registration (its seat in the
// epoch is closed), LeftOutError when this rank is not among the survivors,
// std::runtime_error when the deadline passes.
Membership agree_membership(comm::Store& store, const MembershipOptions& options);

}  // namespace ntp::elastic
