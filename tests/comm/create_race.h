#pragma once
// Racing Store::create: many threads (and, through comm_peer --mode create,
// many processes) create the same keys at once. The outcome of each key says
// who won and what the losers read, so a test can check that exactly one
// caller won and that every loser saw the winner's value.
#include <chrono>
#include <set>
#include <string>
#include <vector>

#include "comm/store.h"

namespace ntp::comm::testing {

struct KeyOutcome {
  int wins = 0;
  std::set<std::string> winners;  // values of the callers that won
  std::set<std::string> seen;     // values the losers read back
};

std::string race_key(int key);

// The race comm_peer runs in each process.
constexpr int kRaceThreads = 8;
constexpr int kRaceKeys = 200;

// `threads` threads each call create(race_key(k), "<who>/t<thread>/k<k>") for
// k = 0..keys-1 in order, then read the key back if they lost. They start at
// the wall-clock time `start`, so that racers in several processes overlap.
std::vector<KeyOutcome> race_create(Store& store, const std::string& who, int threads, int keys,
                                    std::chrono::system_clock::time_point start = {});

// Everything that breaks compare-and-set in `outcome` (a key with no or
// several winners, a stored value that is not the winner's, a loser that read
// something else), one message per problem; empty when the race was clean.
std::vector<std::string> race_problems(Store& store, const std::vector<KeyOutcome>& outcome);

// Adds the outcome of another racer (a process) to `into`.
void merge(std::vector<KeyOutcome>& into, const std::vector<KeyOutcome>& more);

// One line per key, for a process to hand its outcome over the store.
std::string encode(const std::vector<KeyOutcome>& outcome);
std::vector<KeyOutcome> decode(const std::string& text);

}  // namespace ntp::comm::testing
