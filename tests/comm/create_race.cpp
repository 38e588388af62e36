#include "tests/comm/create_race.h"

#include <mutex>
#include <sstream>
#include <thread>

namespace ntp::comm::testing {

namespace {

std::string join(const std::set<std::string>& values) {
  if (values.empty()) return "-";
  std::string out;
  for (const auto& v : values) out += (out.empty() ? "" : ",") + v;
  return out;
}

std::set<std::string> split(const std::string& text) {
  std::set<std::string> values;
  if (text == "-") return values;
  std::stringstream in(text);
  for (std::string v; std::getline(in, v, ',');) values.insert(v);
  return values;
}

}  // namespace

std::string race_key(int key) { return "test/race/" + std::to_string(key); }

std::vector<KeyOutcome> race_create(Store& store, const std::string& who, int threads, int keys,
                                    std::chrono::system_clock::time_point start) {
  std::vector<KeyOutcome> outcome(static_cast<std::size_t>(keys));
  std::mutex mutex;
  std::vector<std::thread> racers;
  for (int t = 0; t < threads; ++t) {
    racers.emplace_back([&, t] {
      std::this_thread::sleep_until(start);
      for (int k = 0; k < keys; ++k) {
        const std::string mine = who + "/t" + std::to_string(t) + "/k" + std::to_string(k);
        const bool won = store.create(race_key(k), to_bytes(mine));
        const auto read = won ? std::nullopt : store.try_get(race_key(k));
        std::lock_guard lock(mutex);
        auto& o = outcome[static_cast<std::size_t>(k)];
        if (won) {
          ++o.wins;
          o.winners.insert(mine);
        } else {
          o.seen.insert(read ? to_text(*read) : "<missing>");
        }
      }
    });
  }
  for (auto& r : racers) r.join();
  return outcome;
}

std::vector<std::string> race_problems(Store& store, const std::vector<KeyOutcome>& outcome) {
  std::vector<std::string> problems;
  for (std::size_t k = 0; k < outcome.size(); ++k) {
    const auto& o = outcome[k];
    const std::string key = race_key(static_cast<int>(k));
    const auto stored = store.try_get(key);
    const std::string value = stored ? to_text(*stored) : "<missing>";
    if (o.wins != 1) problems.push_back(key + ": " + std::to_string(o.wins) + " winners");
    if (o.winners.count(value) == 0) problems.push_back(key + ": stored value " + value + " is no winner's");
    for (const auto& read : o.seen) {
      if (read != value) problems.push_back(key + ": a loser read " + read + ", stored is " + value);
    }
  }
  return problems;
}

void merge(std::vector<KeyOutcome>& into, const std::vector<KeyOutcome>& more) {
  if (into.size() < more.size()) into.resize(more.size());
  for (std::size_t k = 0; k < more.size(); ++k) {
    into[k].wins += more[k].wins;
    into[k].winners.insert(more[k].winners.begin(), more[k].winners.end());
    into[k].seen.insert(more[k].seen.begin(), more[k].seen.end());
  }
}

std::string encode(const std::vector<KeyOutcome>& outcome) {
  std::ostringstream out;
  for (const auto& o : outcome) out << o.wins << " " << join(o.winners) << " " << join(o.seen) << "\n";
  return out.str();
}

std::vector<KeyOutcome> decode(const std::string& text) {
  std::vector<KeyOutcome> outcome;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) {
    std::istringstream fields(line);
    KeyOutcome o;
    std::string winners, seen;
    fields >> o.wins >> winners >> seen;
    o.winners = split(winners);
    o.seen = split(seen);
    outcome.push_back(std::move(o));
  }
  return outcome;
}

}  // namespace ntp::comm::testing
