// comm_peer: one rank of a multi-process comm test.
//
//   comm_peer --mode collectives|loop|create --store SPEC --rank R --world N
//             [--timeout-ms T] [--name NAME] [--elements E]
//
// collectives: builds a group of N and runs every collective check.
// create: sets "test/ready/<rank>", waits for "test/go" (a wall-clock start
//   time in ms), races Store::create on the keys of tests/comm/create_race.h
//   from several threads and writes its outcome to "test/create/<rank>".
// loop: beats a heartbeat and all-reduces until a peer fails (the test kills
//   or stops one); then lists the stale ranks, builds epoch 2 of the
//   survivors and all-reduces once. Results go to store keys "test/...".
// Exit: 0 ok, 1 wrong result or unexpected error, 3 no failure seen in 30 s,
// 4 no stale rank found after the failure.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include "comm/group.h"
#include "comm/heartbeat.h"
#include "tests/comm/collective_checks.h"
#include "tests/comm/create_race.h"

namespace {

using namespace ntp::comm;
using namespace std::chrono_literals;

struct Args {
  std::string mode, store, name = "peer";
  int rank = -1, world = 0;
  std::size_t elements = 1 << 16;  // of the loop's all-reduce
  bool stream = false;              // loop: rank 1 sends to rank 0 instead of all-reducing
  std::chrono::milliseconds timeout{2000};
};

Args parse(int argc, char** argv) {
  std::map<std::string, std::string> kv;
  for (int i = 1; i + 1 < argc; i += 2) kv[argv[i]] = argv[i + 1];
  Args a;
  a.mode = kv["--mode"];
  a.store = kv["--store"];
  if (kv.count("--name")) a.name = kv["--name"];
  a.rank = std::stoi(kv.at("--rank"));
  a.world = std::stoi(kv.at("--world"));
  a.stream = kv.count("--stream") && kv["--stream"] == "1";
  if (kv.count("--elements")) a.elements = std::stoull(kv["--elements"]);
  if (kv.count("--timeout-ms")) a.timeout = std::chrono::milliseconds(std::stoll(kv["--timeout-ms"]));
  return a;
}

long long wall_ms() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::system_clock::now().time_since_epoch())
      .count();
}

GroupOptions options(const std::vector<int>& ranks, const Args& a, std::uint64_t epoch) {
  GroupOptions o;
  o.ranks = ranks;
  o.global_rank = a.rank;
  o.epoch = epoch;
  o.name = a.name;
  o.timeout = a.timeout;
  o.world_size = a.world;
  return o;
}

std::string join(const std::vector<int>& v) {
  std::string s;
  for (int x : v) s += (s.empty() ? "" : ",") + std::to_string(x);
  return s;
}

int run_collectives(const std::shared_ptr<Store>& store, const Args& a) {
  std::vector<int> all;
  for (int r = 0; r < a.world; ++r) all.push_back(r);
  auto g = create_group(store, options(all, a, 1));
  ntp::comm::testing::check_every_collective(*g);
  return 0;
}

// All-reduces (or, with --stream, rank 1 sends to rank 0) until the group
// fails; returns false on a wrong result.
bool loop_until_failure(Group& g, Store& store, const Args& a) {
  std::vector<float> data(a.elements);
  const float want = static_cast<float>(a.world * (a.world + 1) / 2);
  const auto limit = std::chrono::steady_clock::now() + 30s;
  store.set("test/ready/" + std::to_string(a.rank), to_bytes("1"));
  while (std::chrono::steady_clock::now() < limit) {
    std::fill(data.begin(), data.end(), static_cast<float>(a.rank + 1));
    try {
      if (!a.stream) g.all_reduce(data.data(), data.size());
      else if (a.rank == 1) g.send(ConstView(data.data(), data.size()), 0, 7);
      else if (a.rank == 0) g.recv(View(data.data(), data.size()), 1, 7);
    } catch (const CommError& e) {
      const std::string report = std::to_string(wall_ms()) + " " + std::to_string(static_cast<int>(e.kind())) + " " +
                                 std::to_string(e.peer()) + "\n" + e.what();
      store.set("test/error/" + std::to_string(a.rank), to_bytes(report));
      std::fprintf(stderr, "rank %d: %s\n", a.rank, e.what());
      return true;
    }
    if (!a.stream && (data[0] != want || data.back() != want)) {
      std::fprintf(stderr, "rank %d: wrong all-reduce result %f, want %f\n", a.rank, data[0], want);
      return false;
    }
  }
  std::fprintf(stderr, "rank %d: no failure within 30 s\n", a.rank);
  std::exit(3);
}

int run_create(const std::shared_ptr<Store>& store, const Args& a) {
  namespace t = ntp::comm::testing;
  store->set("test/ready/" + std::to_string(a.rank), to_bytes("1"));
  // "test/go" holds the wall-clock ms at which every racer starts.
  const auto start = std::chrono::system_clock::time_point(
      std::chrono::milliseconds(std::stoll(to_text(store->get("test/go", 30s)))));
  const auto outcome =
      t::race_create(*store, "p" + std::to_string(a.rank), t::kRaceThreads, t::kRaceKeys, start);
  store->set("test/create/" + std::to_string(a.rank), to_bytes(t::encode(outcome)));
  return 0;
}

int run_loop(const std::shared_ptr<Store>& store, const Args& a) {
  Heartbeat heartbeat(store, a.rank, 100ms);
  std::vector<int> all;
  for (int r = 0; r < a.world; ++r) all.push_back(r);
  {
    auto g = create_group(store, options(all, a, 1));
    if (!loop_until_failure(*g, *store, a)) return 1;
  }
  // Who is gone? The heartbeat answers for both a dead and a stopped rank.
  std::vector<int> stale;
  const auto limit = std::chrono::steady_clock::now() + 10s;
  while (stale.empty() && std::chrono::steady_clock::now() < limit) {
    stale = stale_ranks(*store, all, 1000ms);
    if (stale.empty()) std::this_thread::sleep_for(50ms);
  }
  if (stale.empty()) return 4;
  std::vector<int> survivors;
  for (int r : all) {
    if (std::find(stale.begin(), stale.end(), r) == stale.end()) survivors.push_back(r);
  }
  store->set("test/stale/" + std::to_string(a.rank), to_bytes(join(stale)));
  auto g2 = create_group(store, options(survivors, a, 2));
  std::vector<double> ones(1000, 1.0);
  g2->all_reduce(ones.data(), ones.size());
  store->set("test/epoch2/" + std::to_string(a.rank), to_bytes(std::to_string(static_cast<int>(ones[999]))));
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    const Args a = parse(argc, argv);
    auto store = open_store(a.store);
    if (a.mode == "collectives") return run_collectives(store, a);
    if (a.mode == "loop") return run_loop(store, a);
    if (a.mode == "create") return run_create(store, a);
    std::fprintf(stderr, "comm_peer: unknown --mode '%s'\n", a.mode.c_str());
    return 2;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "comm_peer: %s\n", e.what());
    return 1;
  }
}
