// A job over several hosts, each running its ranks under its own `ntp train`
// and meeting on a shared store: the ranks each host runs (Host), node 0's
// announcement of the run, the checks of --nnodes/--node-rank/--store, and
// node I > 0's whole part (run_train_node), including the cases a single
// host never meets: a host cut off from the store, and the summary written
// by the lowest host left when the hosts before it were lost.
#include "elastic/multi_host.h"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>
#include <memory>
#include <stdexcept>
#include <string>
#include <thread>

#include <nlohmann/json.hpp>

#include "comm/error.h"
#include "comm/job_store.h"
#include "comm/redis_store.h"
#include "comm/store.h"
#include "elastic/fencer.h"
#include "elastic/membership.h"
#include "elastic/preflight.h"
#include "elastic/run_summary.h"
#include "elastic/worker.h"
#include "elastic/worker_launch.h"
#include "train/model_setup.h"
#include "train/ntp_trainer.h"

namespace ntp::elastic {
namespace {

// Set by a host that lost every rank and leaves the job to the hosts that
// went on without them (leave_if_others_went_on): the lowest host left then
// writes the run's summary, as for a host lost whole.
std::string host_left_key(int node) { return "ntp/host_left/" + std::to_string(node); }

// Whether every host before `node` was lost whole: it said it left the job
// (host_left_key), or each of its ranks has a dead mark and one at least
// was set by another host's watcher ("lost with its host"), which happens
// only when no launcher there reports its ranks.
// The lowest host left then writes the run's summary in node 0's place.
bool lower_hosts_lost(comm::Store& store, const train::Config& config, const NodeOptions& node) {
  if (node.node_rank == 0) return false;
  const std::vector<train::HostPlacement> hosts = train::JobPlan::place_hosts(config.parallel, node.nnodes);
  for (int h = 0; h < node.node_rank; ++h) {
    if (store.try_get(host_left_key(h))) continue;  // it said it leaves the job to the others
    const train::HostPlacement& host = hosts.at(static_cast<std::size_t>(h));
    std::vector<std::string> keys;
    for (int r = host.first_rank; r < host.first_rank + host.ranks; ++r) keys.push_back(dead_key(r));
    const auto marks = store.get_many(keys);
    bool by_watcher = false;
    for (const auto& mark : marks) {
      if (!mark) return false;
      by_watcher = by_watcher || comm::to_text(*mark) == kLostWithHost;
    }
    if (!by_watcher) return false;
  }
  return true;
}

// Node 0's announcement to the other nodes: the run directory (they must
// see it) and the number of hosts it placed the replicas on.
const char* const kRunKey = "ntp/run";

// Does this host's part of a job count as done? Every local worker that
// ended on its own exited 0; with elastic.recover, the killed ones are the
// failures the survivors recovered from.
bool host_done(const LaunchResult& result, bool recover) {
  if (!recover) return result.ok();
  return std::all_of(result.ranks.begin(), result.ranks.end(), [](const RankExit& r) { return r.ok() || r.lost(); });
}

// The ranks of this host that another host's watcher declared lost with
// their host (fence mark kLostWithHost): this host was cut off from the store.
std::vector<int> declared_lost_with_host(comm::Store& store, const Host& host) {
  std::vector<std::string> keys;
  for (int r = host.place.first_rank; r < host.place.first_rank + host.place.ranks; ++r) keys.push_back(fence_key(r));
  const auto marks = store.get_many(keys);
  std::vector<int> lost;
  for (std::size_t i = 0; i < marks.size(); ++i) {
    if (marks[i] && comm::to_text(*marks[i]) == kLostWithHost) lost.push_back(host.place.first_rank + static_cast<int>(i));
  }
  return lost;
}

// A membership_agreed event since `since` whose survivors include none of
// this host's ranks: the others went on without it.
std::optional<nlohmann::json> agreed_without(const train::RunDir& run, const Host& host, double since) {
  const auto ours = [&](int r) { return r >= host.place.first_rank && r < host.place.first_rank + host.place.ranks; };
  try {
    for (const nlohmann::json& e : run.read_events()) {
      if (e.value("event", "") != "membership_agreed" || e.value("time", 0.0) < since) continue;
      const std::vector<int> survivors = e.value("survivors", std::vector<int>{});
      if (std::none_of(survivors.begin(), survivors.end(), ours)) return e;
    }
  } catch (const std::exception&) {  // a line being written: looked at again on the next poll
  }
  return std::nullopt;
}

// Throws HostCutOff when another host's watcher declared this host's ranks
// lost with their host.
void leave_if_cut_off(comm::Store& store, const Host& host) {
  if (const std::vector<int> lost = declared_lost_with_host(store, host); !lost.empty()) {
    // Cut off for less than the store deadline: the others declared its
    // ranks lost and went on; back on the network, it must not train again.
    throw HostCutOff(fmt::format("node {} was cut off from the job's store {} for longer than "
                                 "deadline.heartbeat_s: the hosts that reach the store declared its ranks "
                                 "[{}] lost and train on without them; it stopped them and leaves the job",
                                 host.node.node_rank, comm::without_job(host.node.store), fmt::join(lost, ",")));
  }
}

}  // namespace

std::optional<nlohmann::json> agreement_without(const train::RunDir& run, const Host& host, double since,
                                                double wait_s) {
  const auto until = std::chrono::steady_clock::now() + std::chrono::duration<double>(wait_s);
  spdlog::info("ntp train: node {} looks up to {:.0f} s in the run for the other hosts to go on without its ranks",
               host.node.node_rank, wait_s);
  for (;;) {
    if (std::optional<nlohmann::json> agreed = agreed_without(run, host, since)) return agreed;
    if (std::chrono::steady_clock::now() >= until) return std::nullopt;
    std::this_thread::sleep_for(std::chrono::milliseconds(250));
  }
}

// This host's store calls fail only after failing for kRedisReconnectWithin,
// so it lost the store at least that long ago. The others declare its ranks
// lost once their leases end (lease_s after the cut at most) and agree
// within rendezvous_s of that; a second more lets the event reach
// events.jsonl.
double store_loss_wait_s(const train::Config& config) {
  const double reconnect_s = std::chrono::duration<double>(comm::kRedisReconnectWithin).count();
  return std::max(0.0, train::lease_seconds(config.deadline) + config.deadline.rendezvous_s - reconnect_s) + 1.0;
}

void leave_if_others_went_on(comm::Store& store, const train::Config& config, const train::RunDir& run,
                             const Host& host, const LaunchResult& result, double since) {
  leave_if_cut_off(store, host);
  const auto lost = [](const RankExit& r) { return r.lost(); };
  const bool all_lost = !result.ranks.empty() && std::all_of(result.ranks.begin(), result.ranks.end(), lost);
  if (host.node.nnodes < 2 || !config.elastic.recover || !all_lost) return;
  const bool fenced = std::all_of(result.ranks.begin(), result.ranks.end(),
                                  [](const RankExit& r) { return r.exited && r.code == kExitSelfFenced; });
  // Its ranks were lost when the others declared them so: their agreement
  // follows within rendezvous_s.
  const std::optional<nlohmann::json> agreed = agreement_without(run, host, since, config.deadline.rendezvous_s + 1.0);
  if (!agreed) return;
  try {
    store.create(host_left_key(host.node.node_rank), comm::to_bytes(fmt::format("epoch {}", agreed->value("epoch", -1))));
  } catch (const comm::CommError& e) {  // then the others' watcher marks its ranks lost with their host
    spdlog::warn("ntp train: node {} could not say in the store that it leaves the job: {}", host.node.node_rank,
                 e.what());
  }
  const std::string store_name = comm::without_job(host.node.store);
  throw HostCutOff(fmt::format(
      "node {} lost every rank, ranks {}-{} ({}); the hosts that reach the job's store {} agreed epoch {} without "
      "them (survivors {}) and train on; it leaves the job to them",
      host.node.node_rank, host.place.first_rank, host.place.first_rank + host.place.ranks - 1,
      fenced ? "they fenced themselves: cut off from the store for longer than deadline.lease_s"
             : "killed from outside or fenced",
      store_name, agreed->value("epoch", -1), agreed->value("survivors", nlohmann::json::array()).dump()));
}


Host host_of(const train::Config& config, const NodeOptions& node) {
  const std::vector<train::HostPlacement> hosts = train::JobPlan::place_hosts(config.parallel, node.nnodes);
  int world = 0;
  for (const train::HostPlacement& h : hosts) world += h.ranks;
  return {node, hosts.at(static_cast<std::size_t>(node.node_rank)), world, hosts};
}

void start_hosts(const train::Config& config, const train::RunDir& run, NodeOptions& node, std::FILE* out) {
  node.store = comm::start_job(node.store);
  const std::vector<train::HostPlacement> hosts = train::JobPlan::place_hosts(config.parallel, node.nnodes);
  const std::string placement = train::describe_placement(hosts);
  const std::string job = comm::job_of(node.store);
  run.event("job_placed", {{"job_id", job}, {"nnodes", node.nnodes}, {"placement", placement},
                           {"store", comm::without_job(node.store)}});
  std::fprintf(out, "job %s on %d host%s: %s\n", job.c_str(), node.nnodes, node.nnodes == 1 ? "" : "s",
               placement.c_str());
  if (node.nnodes > 1) {
    std::fprintf(out, "start node I of the others with: ntp train --nnodes %d --node-rank I --store %s%s\n",
                 node.nnodes, node.store.c_str(), node.iface.empty() ? "" : " --iface <its address>");
  }
  std::fflush(out);
  const nlohmann::json announcement = {{"run_dir", std::filesystem::absolute(run.path()).string()},
                                       {"nnodes", node.nnodes}};
  comm::open_store(node.store)->append(kRunKey, comm::to_bytes(announcement.dump()));
}

void validate(const NodeOptions& node) {
  if (node.nnodes < 1) throw std::invalid_argument(fmt::format("--nnodes {}: must be >= 1", node.nnodes));
  if (node.node_rank < 0 || node.node_rank >= node.nnodes) {
    throw std::invalid_argument(
        fmt::format("--node-rank {} is outside [0, --nnodes = {})", node.node_rank, node.nnodes));
  }
  if (node.nnodes > 1 && node.store.empty()) {
    throw std::invalid_argument(fmt::format("--nnodes {}: several hosts meet through a shared store: give --store "
                                            "redis://HOST:PORT",
                                            node.nnodes));
  }
  if (!node.store.empty() && !node.store.starts_with("redis://")) {
    throw std::invalid_argument(fmt::format("--store '{}': expected redis://HOST:PORT[?job=ID] (one host uses a "
                                            "file store in the run directory without --store)",
                                            node.store));
  }
  if (node.node_rank > 0 && comm::job_of(node.store).empty()) {
    throw std::invalid_argument(fmt::format("--store '{}': node {} must name the job node 0 printed ('{}?job=<id>')",
                                            node.store, node.node_rank, node.store));
  }
}

void run_train_node(const NodeOptions& node, std::chrono::milliseconds wait, std::FILE* out) {
  validate(node);
  if (node.node_rank == 0) throw std::invalid_argument("--node-rank 0 starts the job (run_train_job)");
  std::shared_ptr<comm::Store> store;
  try {
    store = comm::open_store(node.store);
  } catch (const comm::CommError& e) {
    if (e.kind() != comm::CommErrorKind::kBadInput) throw;
    throw std::invalid_argument(fmt::format("--store: {}", e.detail()));
  }
  const auto announced = store->wait_first(kRunKey, wait);
  if (!announced) {
    throw std::runtime_error(fmt::format("node 0 of job {} published no run within {} s", comm::job_of(node.store),
                                         wait.count() / 1000.0));
  }
  const nlohmann::json run_info = nlohmann::json::parse(comm::to_text(*announced));
  const std::filesystem::path run_dir = run_info["run_dir"].get<std::string>();
  if (run_info["nnodes"].get<int>() != node.nnodes) {
    throw std::invalid_argument(fmt::format("--nnodes {}: node 0 started job {} with --nnodes {}", node.nnodes,
                                            comm::job_of(node.store), run_info["nnodes"].get<int>()));
  }
  if (!std::filesystem::exists(run_dir / "config.toml")) {
    throw std::invalid_argument(fmt::format("node 0's run directory {} is not visible on node {}: several hosts need "
                                            "the run directory (run.dir or --run-dir) on a file system they share",
                                            run_dir.string(), node.node_rank));
  }
  const train::Config config = train::load_config((run_dir / "config.toml").string(), {});
  const Host host = host_of(config, node);
  train::check_device(config.model);  // this host's GPUs, as node 0 checked its own
  check_power(config, host.place.ranks);
  train::warn_if_oversubscribed(config.model, host.place.ranks);
  const train::RunDir run = train::RunDir::open(run_dir);
  std::fprintf(out, "ntp train: node %d of %d in job %s: ranks %d-%d; run directory %s\n", node.node_rank,
               node.nnodes, comm::job_of(node.store).c_str(), host.place.first_rank,
               host.place.first_rank + host.place.ranks - 1, run_dir.string().c_str());
  std::fflush(out);
  const double started = train::unix_time_s();
  const LaunchResult result = launch_or_lose_store(config, run, node, [](const train::StepMetrics&) {});
  leave_if_others_went_on(*store, config, run, host, result, started);
  const bool units_lost = std::any_of(result.ranks.begin(), result.ranks.end(), [](const RankExit& r) {
    return r.exited && r.code == kExitUnitsLost;
  });
  if (units_lost) {
    throw UnsupportedRequest(fmt::format("in-job recovery is impossible (logs in {})", run.log_dir().string()));
  }
  if (!host_done(result, config.elastic.recover)) {
    throw std::runtime_error(fmt::format("the workers of node {} failed (logs in {}):\n{}", node.node_rank,
                                         run.log_dir().string(), result.report()));
  }
  if (lower_hosts_lost(*store, config, node)) {
    // Node 0 would have written the summary; its host is gone.
    std::fprintf(out, "ntp train: node %d writes the run's summary: the hosts before it were lost\n",
                 node.node_rank);
    double start = 0;
    for (const nlohmann::json& e : run.read_events()) {
      if (e.value("event", "") == "run_started") start = e.value("time", start);  // this launch: the last one
    }
    finish_run(config, run, run.read_metrics(), start, out);
  }
  std::fprintf(out, "ntp train: node %d done\n", node.node_rank);
}

}  // namespace ntp::elastic
