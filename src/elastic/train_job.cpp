#include "elastic/train_job.h"

#include <signal.h>
#include <unistd.h>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <limits>
#include <map>
#include <optional>
#include <set>

#include <net/if.h>

#include "comm/heartbeat.h"
#include "comm/port_budget.h"

#include "comm/error.h"
#include "comm/job_store.h"
#include "comm/store.h"
#include "elastic/crash_report.h"
#include "elastic/fencer.h"
#include "elastic/placement.h"
#include "elastic/job.h"
#include "elastic/world.h"
#include "power/rank_power.h"
#include "train/local_trainer.h"
#include "train/model_setup.h"
#include "elastic/membership.h"
#include "elastic/worker.h"
#include "elastic/recovery.h"
#include "train/checkpoint.h"
#include "train/checkpoint_saver.h"
#include "train/ntp_trainer.h"
#include "train/power_setup.h"
#include "train/progress.h"
#include "train/run_dir.h"
#include "train/schedule.h"

namespace ntp::elastic {
namespace {

// The job in one line. The model is named by its source and shape: the
// preset's name alone called a GPT-2 124M checkpoint "tiny".
std::string describe_job(const train::Config& c) {
  std::string failed;
  for (const auto& [replica, slots] : c.parallel.failed) {
    failed += fmt::format(" replica {} without slots [{}];", replica, fmt::join(slots, ","));
  }
  // The device only when it is a GPU: a CPU run's line stays as it was.
  const std::string device = c.model.device == tensor::Device::kCuda ? " on cuda" : "";
  return fmt::format("model {}{}, dp {} x tp {},{} batch {} ({}), {} steps, data {}",
                     train::describe_model(c.model), device, c.parallel.dp, c.parallel.tp,
                     failed.empty() ? " all healthy;" : failed, c.train.global_batch, train::to_string(c.parallel.batch_policy), c.train.steps,
                     c.data.path.empty() ? "built-in corpus" : c.data.path);
}

void print_summary(std::FILE* out, const nlohmann::json& s, const std::filesystem::path& run_dir) {
  if (s.value("steps", 0) == 0) return;
  std::fprintf(out,
               "done: %d steps, loss %.4f -> %.4f, %.0f tokens/s, %.3f s/step, exposed sync %.1f%% "
               "of step time\n",
               s["steps"].get<int>(), s["first_loss"].get<double>(), s["last_loss"].get<double>(),
               s["tokens_per_s"].get<double>(), s["mean_step_time_s"].get<double>(),
               100.0 * s["exposed_sync_fraction"].get<double>());
  const auto tp = s["final_tp"].get<std::vector<std::int64_t>>();
  const auto samples = s["final_samples"].get<std::vector<std::int64_t>>();
  std::string replicas;
  for (std::size_t r = 0; r < tp.size(); ++r) {
    replicas += fmt::format("{}replica {}: TP {}, {} sequences/step", r == 0 ? "" : "; ", r, tp[r],
                            samples[r]);
    if (s.contains("final_power")) {
      const nlohmann::json& p = s["final_power"][r];
      replicas += fmt::format(" ({:.0f} W/GPU, modelled speed-up {:.3f})",
                              p["limit_w"].get<double>(), p["speedup"].get<double>());
    }
  }
  std::fprintf(out, "%s\n", replicas.c_str());
  const double allreduce = s["allreduce_bytes_per_step"].get<double>();
  if (allreduce > 0) {
    std::fprintf(out, "gradient sync per step: %.0f KiB all-reduced, %.0f KiB resharded\n",
                 allreduce / 1024, s["reshard_bytes_per_step"].get<double>() / 1024);
  }
  std::fprintf(out, "metrics, events, trace and summary in %s\n", run_dir.string().c_str());
  std::fflush(out);  // said even if a signal ends the process during --verify
}

// With elastic.recover: the job succeeded when every step was committed and
// every worker that ended on its own exited 0 — the dead (killed by a
// signal) are the failures the survivors recovered from.
bool recovered(const LaunchResult& result, const train::RunDir& run, std::int64_t steps) {
  if (!std::filesystem::exists(run.file("metrics.jsonl"))) return false;
  const std::vector<train::StepMetrics> metrics = run.read_metrics();
  if (static_cast<std::int64_t>(metrics.size()) != steps) return false;
  for (std::int64_t s = 0; s < steps; ++s) {
    if (metrics[static_cast<std::size_t>(s)].step != s) return false;  // one row per step, in order
  }
  if (!std::filesystem::exists(run.file("model.bin"))) return false;
  return std::all_of(result.ranks.begin(), result.ranks.end(), [](const RankExit& r) { return r.ok() || r.lost(); });
}

// The first `name` event logged at or after `since` (unix seconds).
std::optional<nlohmann::json> first_event(const train::RunDir& run, const std::string& name, double since) {
  try {
    for (const nlohmann::json& e : run.read_events()) {
      if (e.value("event", "") == name && e.value("time", 0.0) >= since) return e;
    }
  } catch (const std::exception&) {
  }
  return std::nullopt;
}

// Why the workers stopped, from the first run_stopped event since `since`; empty if none.
std::string last_stop_reason(const train::RunDir& run, double since) {
  const std::optional<nlohmann::json> e = first_event(run, "run_stopped", since);
  return e ? e->value("reason", "") : "";
}

// Makes the run directory ready to continue from a checkpoint after N steps:
// every byte of the checkpoint is checked once; rows of steps >= N, the hash
// files, trace fragments and store of the previous workers and abandoned
// partial saves go; complete checkpoints past N (a future that is now
// redone) are renamed step-M.discarded, not deleted.
void prepare_restart(const train::RunDir& run, const std::filesystem::path& checkpoint_dir) {
  const train::Checkpoint checkpoint = train::Checkpoint::open(checkpoint_dir);
  const std::int64_t step = checkpoint.info().step;
  try {
    checkpoint.verify_checksums();
  } catch (const train::CheckpointError& e) {
    // A damaged byte shows only here: name where the run can go on from instead.
    std::optional<std::filesystem::path> older;
    for (const std::filesystem::path& c : train::complete_checkpoints(run.path() / "checkpoints")) {
      if (train::checkpoint_step(c) < step) older = c;  // in step order: the last one before it
    }
    if (!older) throw;
    throw train::CheckpointError(fmt::format("{}; an older checkpoint: ntp train --resume {}", e.what(),
                                             older->string()));
  }
  run.truncate_jsonl_from_step("metrics.jsonl", step);
  run.truncate_jsonl_from_step("schedule.jsonl", step);
  for (const char* folder : {"hashes", "trace"}) std::filesystem::remove_all(run.path() / folder);
  std::filesystem::remove_all(run.store_dir());
  std::filesystem::create_directories(run.store_dir());
  const std::filesystem::path root = run.path() / "checkpoints";
  for (const std::filesystem::path& later : train::complete_checkpoints(root)) {
    if (later.filename() == checkpoint_dir.filename()) continue;
    if (train::checkpoint_step(later) > step) {  // by name: a damaged one cannot be opened
      std::filesystem::rename(later, later.string() + ".discarded");
    }
  }
  train::prune_checkpoints(root, std::numeric_limits<std::int64_t>::max(), std::numeric_limits<std::int64_t>::max());
  run.event("run_resumed", {{"checkpoint", checkpoint_dir.string()}, {"step", step}});
}

// The configuration the workers restart with when in-job recovery is
// impossible (elastic.fallback = "checkpoint"): the slots of workers lost to a
// signal join parallel.failed (unless `keep_layout`: every rank was lost, so
// no slot is singled out), training starts from the newest checkpoint and
// the injected failures are not injected again. Throws UnsupportedRequest
// when no checkpoint exists or no replica can train.
train::Config fallback_config(const train::Config& config, const LaunchResult& result, const train::RunDir& run,
                              const std::string& reason, bool keep_layout, std::FILE* out) {
  std::vector<std::string> damaged;
  const std::optional<std::filesystem::path> checkpoint =
      train::newest_intact_checkpoint(run.path() / "checkpoints", &damaged);
  for (const std::string& why : damaged) std::fprintf(out, "ntp train: skipping a damaged checkpoint, %s\n", why.c_str());
  if (!checkpoint) {
    throw UnsupportedRequest(fmt::format("in-job recovery is impossible ({}) and there is no checkpoint to restart "
                                         "from (logs in {})",
                                         reason, run.log_dir().string()));
  }
  train::Config next = config;
  const std::vector<train::RankPlace> places = train::job_places(config.parallel);
  std::vector<int> lost;
  for (const RankExit& r : result.ranks) {
    if (r.exited || r.stopped_by_launcher) continue;  // ended on its own or stopped by us: healthy
    lost.push_back(r.rank);
    if (keep_layout) continue;
    std::vector<std::int64_t>& failed = next.parallel.failed[places.at(static_cast<std::size_t>(r.rank)).replica];
    failed.push_back(places.at(static_cast<std::size_t>(r.rank)).slot);
    std::sort(failed.begin(), failed.end());
  }
  next.run.resume = checkpoint->string();
  train::drop_injected_failures(next);
  try {
    if (train::job_places(next.parallel).empty()) throw train::ConfigError("no replica keeps parallel.min_tp slots");
    train::validate(next);
    train::check_job(next, run.path());  // the checkpoint's data included
  } catch (const std::exception& e) {
    throw UnsupportedRequest(fmt::format("in-job recovery is impossible ({}) and a restart from {} is too: {}",
                                         reason, checkpoint->string(), e.what()));
  }
  prepare_restart(run, *checkpoint);
  run.write_config(train::to_toml(next));
  const std::vector<std::int64_t> tp = train::split_input(next.parallel, next.train.global_batch).active;
  run.event("fallback_restart", {{"reason", reason}, {"lost", lost}, {"checkpoint", checkpoint->string()},
                                 {"ranks", train::job_places(next.parallel).size()}, {"tp", tp}});
  std::fprintf(out, "in-job recovery impossible (%s): restarting from %s with TP %s\n", reason.c_str(),
               checkpoint->string().c_str(), nlohmann::json(tp).dump().c_str());
  return next;
}

// Each in-job recovery as the survivors logged it: the step redone, the new
// epoch, the ranks lost (and any that rejoined with it), the time from the
// first failure_detected to the last step_resumed of that epoch (the slowest
// survivor) and its phases. Epochs that only took repaired ranks back go to
// `rejoins` (epoch, joined, step, tp, rejoin_s from the restart).
nlohmann::json recoveries(const train::RunDir& run, nlohmann::json& rejoins) {
  // Per epoch, what every survivor logged; an epoch whose recovery broke off
  // (a death during it) folds into the next one that completed.
  struct Epoch {
    double detected = 0;  // first failure_detected
    double agreed = 0;    // last membership_agreed
    double transfer_s = 0;
    double resumed = 0;   // last step_resumed
    nlohmann::json lost = nlohmann::json::array();
    nlohmann::json joined = nlohmann::json::array();
    nlohmann::json resumed_event;
  };
  std::map<std::int64_t, Epoch> epochs;
  std::vector<double> failures;  // when a worker was killed, stopped for good or fenced
  double restarted = 0;          // the last worker started again (elastic.rejoin)
  for (const nlohmann::json& e : train::read_jsonl(run.file("events.jsonl"))) {
    const std::string name = e.value("event", "");
    const double t = e.value("time", 0.0);
    if (name == "failure_injected" || name == "rank_fenced" ||
        (name == "worker_exited" && e.contains("signal") && e["signal"].is_number())) {
      failures.push_back(t);
    }
    if (name == "rank_restarted") restarted = t;
    if (name == "failure_detected") {
      Epoch& x = epochs[e["epoch"].get<std::int64_t>() + 1];
      x.detected = x.detected == 0 ? t : std::min(x.detected, t);
    }
    if (!e.contains("epoch") || !e["epoch"].is_number()) continue;
    Epoch& x = epochs[e["epoch"].get<std::int64_t>()];
    if (name == "membership_agreed") {
      x.lost = e["lost"];
      x.joined = e.value("joined", nlohmann::json::array());
      x.agreed = std::max(x.agreed, t);
    }
    if (name == "state_transferred") x.transfer_s = std::max(x.transfer_s, e.value("seconds", 0.0));
    if (name == "step_resumed") {
      x.resumed = std::max(x.resumed, t);
      x.resumed_event = e;
    }
  }
  const std::vector<train::StepMetrics> metrics =
      std::filesystem::exists(run.file("metrics.jsonl")) ? run.read_metrics() : std::vector<train::StepMetrics>{};
  nlohmann::json out = nlohmann::json::array();
  nlohmann::json lost = nlohmann::json::array();
  double first_detected = 0;
  double previous_end = 0;
  for (const auto& [epoch, x] : epochs) {
    if (x.detected == 0 && x.resumed == 0) continue;
    if (x.detected == 0 && first_detected == 0) {  // a repaired rank came back, nothing failed
      // (or was lost again while it asked: an epoch that took nobody in is no rejoin)
      if (!x.joined.empty()) {
        rejoins.push_back({{"epoch", epoch}, {"joined", x.joined}, {"step", x.resumed_event["step"]},
                           {"tp", x.resumed_event["tp"]},
                           {"rejoin_s", restarted > 0 ? x.resumed - restarted : 0.0}});
      }
      previous_end = x.resumed;
      continue;
    }
    for (const nlohmann::json& r : x.lost) lost.push_back(r);
    if (first_detected == 0) first_detected = x.detected;
    if (x.resumed == 0) continue;  // broke off: the next epoch finishes it
    nlohmann::json r;
    r["epoch"] = epoch;
    r["lost"] = lost;
    r["joined"] = x.joined;
    r["step"] = x.resumed_event["step"];
    r["tp"] = x.resumed_event["tp"];
    r["recovery_s"] = x.resumed - first_detected;
    // The phases: the failure to its first detection, detection to the last
    // survivor's agreement, the slowest state transfer, and the redone step.
    double failed_at = first_detected;  // the first failure since the last recovery ended
    for (double t : failures) {
      if (t > previous_end && t <= first_detected) failed_at = std::min(failed_at, t);
    }
    r["detection_s"] = first_detected - failed_at;
    r["agreement_s"] = x.agreed - first_detected;
    r["transfer_s"] = x.transfer_s;
    const std::int64_t step = r["step"].get<std::int64_t>();
    r["redo_s"] = step < static_cast<std::int64_t>(metrics.size())
                      ? metrics[static_cast<std::size_t>(step)].step_time_s
                      : 0.0;
    out.push_back(r);
    lost = nlohmann::json::array();
    first_detected = 0;
    previous_end = x.resumed;
  }
  return out;
}

// The summary of a finished run: written to summary.json and printed, with
// each in-job recovery, rejoin and restart from a checkpoint. `start`: when
// this launch of the run began (unix seconds).
nlohmann::json finish_run(const train::Config& config, const train::RunDir& run,
                          const std::vector<train::StepMetrics>& metrics, double start, std::FILE* out) {
  nlohmann::json summary = train::summarize(metrics, train::unix_time_s() - start);
  summary["job"] = describe_job(config);
  summary["status"] = "finished";
  if (config.elastic.recover) {
    nlohmann::json rejoins = nlohmann::json::array();
    summary["recoveries"] = recoveries(run, rejoins);
    summary["rejoins"] = rejoins;
    for (const nlohmann::json& r : rejoins) {
      std::fprintf(out, "rejoined: ranks %s at step %lld, tp %s, %.3f s from the restart\n",
                   r["joined"].dump().c_str(), static_cast<long long>(r["step"].get<std::int64_t>()),
                   r["tp"].dump().c_str(), r["rejoin_s"].get<double>());
    }
    for (const nlohmann::json& r : summary["recoveries"]) {
      std::fprintf(out,
                   "recovered: lost ranks %s, step %lld redone at tp %s, %.3f s (detection %.3f, "
                   "agreement %.3f, transfer %.3f, redo %.3f)\n",
                   r.value("lost", nlohmann::json::array()).dump().c_str(),
                   static_cast<long long>(r["step"].get<std::int64_t>()), r["tp"].dump().c_str(),
                   r["recovery_s"].get<double>(), r["detection_s"].get<double>(),
                   r["agreement_s"].get<double>(), r["transfer_s"].get<double>(), r["redo_s"].get<double>());
    }
  }
  // Restarts from a checkpoint (elastic.fallback), from their events.
  nlohmann::json restarts = nlohmann::json::array();
  for (const nlohmann::json& e : train::read_jsonl(run.file("events.jsonl"))) {
    if (e.value("time", 0.0) < start) continue;
    if (e.value("event", "") == "fallback_restart") {
      restarts.push_back({{"checkpoint", e["checkpoint"]}, {"lost", e["lost"]}, {"tp", e["tp"]}});
    }
    if (e.value("event", "") == "fallback_step_done" && !restarts.empty()) {
      restarts.back()["first_step_s"] = e["seconds"];
      std::fprintf(out, "restarted from %s with tp %s: %.3f s to the first step\n",
                   restarts.back()["checkpoint"].get<std::string>().c_str(), restarts.back()["tp"].dump().c_str(),
                   e["seconds"].get<double>());
    }
  }
  if (!restarts.empty()) summary["restarts"] = restarts;
  run.event("run_finished", {{"steps", metrics.size()}});
  run.write_summary(summary);
  print_summary(out, summary, run.path());
  return summary;
}

// Whether every host before `node` was lost whole: each of its ranks has a
// dead mark, and one at least was set by another host's watcher ("lost with
// its host"), which happens only when no launcher there reports its ranks.
// The lowest host left then writes the run's summary in node 0's place.
bool lower_hosts_lost(comm::Store& store, const train::Config& config, const NodeOptions& node) {
  if (node.node_rank == 0) return false;
  const std::vector<HostPlacement> hosts = place_hosts(config.parallel, node.nnodes);
  for (int h = 0; h < node.node_rank; ++h) {
    const HostPlacement& host = hosts.at(static_cast<std::size_t>(h));
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

// The ranks this host runs, and how they meet those of the other hosts.
struct Host {
  NodeOptions node;
  HostPlacement place;
  int world = 0;
  std::vector<HostPlacement> all;  // every host's, by node rank
  // The other hosts' ranks, by node rank.
  std::map<int, std::vector<int>> remote() const {
    std::map<int, std::vector<int>> out;
    for (std::size_t h = 0; h < all.size(); ++h) {
      if (static_cast<int>(h) == node.node_rank) continue;
      for (int r = all[h].first_rank; r < all[h].first_rank + all[h].ranks; ++r) out[static_cast<int>(h)].push_back(r);
    }
    return out;
  }
};

Host host_of(const train::Config& config, const NodeOptions& node) {
  const std::vector<HostPlacement> hosts = place_hosts(config.parallel, node.nnodes);
  return {node, hosts.at(static_cast<std::size_t>(node.node_rank)),
          static_cast<int>(train::job_places(config.parallel).size()), hosts};
}

// A failed checkpoint save is said on the console as it happens (the worker
// says it only in its log): training goes on without it, and a full disk
// should not first show at the end of the run. Display only: a line that
// does not parse is skipped.
void say_checkpoint_failures(train::JsonlTail& events) {
  std::vector<nlohmann::json> lines;
  try {
    lines = events.read_new();
  } catch (const std::exception&) {
    return;
  }
  for (const nlohmann::json& e : lines) {
    if (e.value("event", "") != "checkpoint_failed") continue;
    spdlog::warn("rank {}: the checkpoint of step {} failed: {}; training goes on, the newest checkpoint stays the "
                 "one before",
                 e.value("rank", -1), e.value("step", std::int64_t{-1}), e.value("reason", ""));
  }
}

// One launch of the workers of `config`, through the launcher; the progress
// follows metrics.jsonl, which the writer rank appends to.
LaunchResult launch_workers(const train::Config& config, const train::RunDir& run, const Host& host,
                            const std::function<void(const train::StepMetrics&)>& on_step) {
  LaunchOptions options;
  options.nproc = host.place.ranks;
  options.nnodes = host.node.nnodes;
  options.node_rank = host.node.node_rank;
  options.first_rank = host.place.first_rank;
  options.world_size = host.world;
  options.store = host.node.store.empty() ? "file:" + run.store_dir().string() : host.node.store;
  options.job_started = true;
  if (!host.node.iface.empty()) options.extra_env["NTP_GLOO_IFACE"] = host.node.iface;
  options.command = {std::filesystem::read_symlink("/proc/self/exe").string(), "train", "--worker",
                     "--run-dir", run.path().string()};
  options.log_dir = run.log_dir();
  options.straggler_timeout =
      std::chrono::milliseconds(static_cast<long>(config.deadline.straggler_s * 1000));
  // On SIGINT/SIGTERM/SIGHUP the workers finish the step in flight and save a checkpoint.
  options.term_grace = std::chrono::milliseconds(static_cast<long>(
      std::clamp(config.deadline.checkpoint_s, 5.0, 60.0) * 1000));
  train::JsonlTail tail(run.file("metrics.jsonl"));
  tail.read_new();  // the steps a resumed run already has
  train::JsonlTail events(run.file("events.jsonl"));
  events.read_new();
  std::unique_ptr<Fencer> fencer;
  std::int64_t logged_steps = 0;
  options.on_tick = [&] {
    for (const nlohmann::json& line : tail.read_new()) {
      on_step(train::step_metrics_from_json(line));
      ++logged_steps;
    }
    say_checkpoint_failures(events);
    if (fencer) fencer->poll();
  };
  if (config.elastic.recover) {
    options.tolerate_failures = true;
    options.tolerated_exits[kExitSelfFenced] =
        fmt::format("self-fenced: could not renew its lease on {} for deadline.lease_s ({} s)",
                    options.store.empty() ? std::string("the job's store") : comm::without_job(options.store),
                    train::lease_seconds(config.deadline));
    fencer = std::make_unique<Fencer>(config, run, comm::open_store(options.store));
    fencer->watch_remote(host.node.node_rank, host.remote());
    options.on_event = [&fencer](const std::string& event, const RankExit& r) { fencer->on_event(event, r); };
    options.restarts = [&] { return fencer->restarts(logged_steps); };
    options.killed = [&fencer](pid_t pid) { return fencer->killed(pid); };
    options.restart_env["NTP_REJOIN"] = "1";
  }
  return run_job(options, {run.file("events.jsonl"), stderr, "ntp train"});
}

// Whether every rank of the job died of a signal the supervisor did not send
// (killed from outside, or fenced: a host-wide stall, a scheduler's kill).
// Nobody is left to agree on a new membership, and nothing tells a broken
// slot from a healthy one.
bool every_rank_lost(const LaunchResult& result) {
  return !result.ranks.empty() &&
         std::all_of(result.ranks.begin(), result.ranks.end(), [](const RankExit& r) { return r.lost(); });
}

// launch_workers on any host: a store that stops answering past its deadline
// ends this host's part, and the error says so in the product's words (the
// launcher has killed the workers by then). Another host cut off from the
// store takes part in no agreement: the hosts that reach it recover without
// it, so the job never splits in two.
LaunchResult launch_or_lose_store(const train::Config& config, const train::RunDir& run, const NodeOptions& node,
                                  const std::function<void(const train::StepMetrics&)>& on_step) {
  const Host host = host_of(config, node);
  try {
    return launch_workers(config, run, host, on_step);
  } catch (const comm::CommError& e) {
    const std::string store = node.store.empty() ? "file:" + run.store_dir().string() : comm::without_job(node.store);
    const std::string who = node.nnodes > 1 ? fmt::format("node {}", node.node_rank) : "the launcher";
    const char* rest = node.node_rank > 0 ? "; it leaves the job to the hosts that reach the store" : "";
    throw std::runtime_error(
        fmt::format("{} lost the job's store {} and stopped its workers{} ({})", who, store, rest, e.what()));
  }
}

// The workers' whole life: launches, and with elastic.recover relaunches from
// the newest checkpoint when in-job recovery is impossible
// (elastic.fallback). Returns every step's metrics.
std::vector<train::StepMetrics> train_with_workers(
    const train::Config& first, const train::RunDir& run, const NodeOptions& node, std::FILE* out,
    const std::function<void(const train::StepMetrics&)>& on_step) {
  train::Config config = first;
  double restarted_at = 0;  // the last fallback restart, until its first step is logged
  const auto show = [&](const train::StepMetrics& m) {
    if (restarted_at > 0) {
      run.event("fallback_step_done", {{"step", m.step}, {"seconds", train::unix_time_s() - restarted_at}});
      restarted_at = 0;
    }
    on_step(m);
  };
  for (std::int64_t restarts = 0;; ++restarts) {
    const double started = train::unix_time_s();
    const LaunchResult result = launch_or_lose_store(config, run, node, show);
    if (config.elastic.recover && recovered(result, run, config.train.steps)) return run.read_metrics();
    if (first_event(run, "run_interrupted", started)) return run.read_metrics();
    if (result.forwarded_signal != 0) {
      // Interrupted, but the writer, which says so, was lost during the stop
      // (in the interrupt's save): the steps it logged are the steps done.
      const std::vector<train::StepMetrics> done = run.read_metrics();
      const std::int64_t steps = done.empty() ? 0 : done.back().step + 1;
      run.event("run_interrupted", {{"steps_done", steps}, {"writer_lost", true}});
      return done;
    }
    const bool units_lost = std::any_of(result.ranks.begin(), result.ranks.end(), [](const RankExit& r) {
      return r.exited && r.code == kExitUnitsLost;
    });
    const bool all_lost = config.elastic.recover && every_rank_lost(result);
    const std::string reason =
        all_lost ? "every rank was lost (killed by a signal or fenced): no survivor is left to recover in the job"
                 : last_stop_reason(run, started);
    if (units_lost || all_lost) {
      // A restart from a checkpoint relaunches every worker: one host's
      // ntp train cannot do that for the others, so across hosts the run stops.
      if (config.elastic.fallback == train::FallbackPolicy::kCheckpoint && restarts < config.elastic.max_restarts &&
          node.nnodes == 1) {
        config = fallback_config(config, result, run, reason, all_lost, out);
        restarted_at = train::unix_time_s();
        continue;
      }
      throw UnsupportedRequest(fmt::format("in-job recovery is impossible: {}{} (logs in {})", reason,
                                           node.nnodes > 1 ? "; across hosts there is no restart from a checkpoint" : "",
                                           run.log_dir().string()));
    }
    if (!result.ok() || config.elastic.recover) {
      throw std::runtime_error(fmt::format("the workers failed{}{} (logs in {}):\n{}", reason.empty() ? "" : ": ",
                                           reason, run.log_dir().string(), result.report()));
    }
    return run.read_metrics();
  }
}

// TP = DP = 1: the trainer runs in this process, on local rank 0's GPU.
std::vector<train::StepMetrics> train_in_process(
    const train::Config& config, const std::filesystem::path& run_dir,
    const std::function<void(const train::StepMetrics&)>& on_step) {
  return train::train_local(config, run_dir, on_step, gpu_of_local_rank(current_environment(), 0));
}

// With power.mode = "nvml", every local rank's GPU must be controllable and
// match the configured device model before any worker starts: a host without
// NVML is an error here, naming power.mode, not a worker crash later. Opening
// a RankPower changes no limit.
void check_power(const train::Config& config, int local_ranks) {
  if (config.power.mode != power::PowerMode::nvml) return;
  const Environment env = current_environment();
  for (int local = 0; local < local_ranks; ++local) {
    try {
      power::RankPowerOptions options =
          train::rank_power_options(config.power, gpu_of_local_rank(env, local));
      options.restore_on_signal = false;
      const power::RankPower probe(options);
    } catch (const std::exception& e) {  // PowerError, or too few CUDA_VISIBLE_DEVICES
      throw PowerUnavailable(fmt::format("power.mode = \"nvml\": {}", e.what()));
    }
  }
}

// Every rank of this host listens on its Gloo groups' ports at once; a job
// that cannot fit the ephemeral range would fail half way through connecting
// (comm/port_budget.h), so it is refused before any worker starts.
void check_ports(const train::Config& config, int local_ranks) {
  const auto world = static_cast<std::int64_t>(train::job_places(config.parallel).size());
  if (world < 2) return;  // one rank trains in-process, without groups
  const std::optional<comm::PortRange> range = comm::ephemeral_port_range();
  if (!range) return;
  const comm::RankGroups groups{world, config.parallel.tp, config.parallel.dp};
  if (const std::optional<std::string> shortfall = comm::port_shortfall(local_ranks, groups, *range)) {
    throw UnsupportedRequest(*shortfall);
  }
}

// Node 0's announcement to the other nodes: the run directory (they must
// see it) and the number of hosts it placed the replicas on.
const char* const kRunKey = "ntp/run";

// Node 0 of a job on a shared store: claims the job, prints the placement
// and how to start the other nodes, and publishes the run for them.
void start_hosts(const train::Config& config, const train::RunDir& run, NodeOptions& node, std::FILE* out) {
  node.store = comm::start_job(node.store);
  const std::vector<HostPlacement> hosts = place_hosts(config.parallel, node.nnodes);
  const std::string placement = describe_placement(hosts);
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

// The Gloo address of a worker: NTP_GLOO_IFACE names an interface of this
// host or an address (host name); loopback without it.
void set_gloo_address(train::WorkerOptions& options, const Environment& env) {
  const auto it = env.find("NTP_GLOO_IFACE");
  if (it == env.end() || it->second.empty()) return;
  if (::if_nametoindex(it->second.c_str()) != 0) {
    options.gloo_iface = it->second;
  } else {
    options.gloo_host = it->second;
  }
}

}  // namespace

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
  const LaunchResult result = launch_or_lose_store(config, run, node, [](const train::StepMetrics&) {});
  if (const std::vector<int> lost = declared_lost_with_host(*store, host); !lost.empty()) {
    // Cut off for less than the store deadline: the others declared its
    // ranks lost and went on; back on the network, it must not train again.
    throw std::runtime_error(fmt::format("node {} was cut off from the job's store {} for longer than "
                                         "deadline.heartbeat_s: the hosts that reach the store declared its ranks "
                                         "[{}] lost and train on without them; it stopped them and leaves the job",
                                         node.node_rank, comm::without_job(node.store), fmt::join(lost, ",")));
  }
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

int run_train_worker(const std::filesystem::path& run_dir) {
  const train::Config config = train::load_config((run_dir / "config.toml").string(), {});
  const Environment env = current_environment();
  const WorldInfo world = world_from_env(env);
  install_crash_report(world.rank);
  train::WorkerOptions options;
  options.rank = world.rank;
  options.world_size = world.world_size;
  options.ranks_on_host = world.local_world_size;
  options.store = world.store;
  if (config.power.mode == power::PowerMode::nvml) options.gpu = gpu_of_local_rank(env, world.local_rank);
  set_gloo_address(options, env);
  if (env.contains("NTP_TEST_MISPAIR_RANK")) options.mispair_rank = std::stoi(env.at("NTP_TEST_MISPAIR_RANK"));
  if (config.elastic.recover) {
    const std::shared_ptr<comm::Store> store = comm::open_store(options.store);
    options.is_dead = [store](int rank) { return store->try_get(dead_key(rank)).has_value(); };
    if (config.elastic.rejoin) {
      // A request counts while its rank beats: a worker lost while it asked
      // (its key stays) must not make the survivors grow for nobody.
      const auto max_age = std::chrono::milliseconds(static_cast<std::int64_t>(config.deadline.heartbeat_s * 1000));
      options.join_pending = [store, world = world.world_size, max_age](const std::vector<int>& members) {
        for (int r = 0; r < world; ++r) {
          if (std::binary_search(members.begin(), members.end(), r) || !store->try_get(join_key(r))) continue;
          if (comm::stale_ranks(*store, {r}, max_age).empty()) return true;
        }
        return false;
      };
    }
  }
  return run_worker(config, run_dir, options);
}

namespace {

// A failed run still says why, in events.jsonl and summary.json, and where it
// can go on from: the newest complete checkpoint. Best effort: on a full disk
// the record fails too, and the run's own error must still be the one shown.
void record_failure(const train::Config& config, const train::RunDir& run, const std::string& reason,
                    std::FILE* out) {
  const std::optional<std::filesystem::path> newest = train::newest_intact_checkpoint(run.path() / "checkpoints");
  if (newest) {
    std::fprintf(out, "ntp train: the newest checkpoint is %s; continue with: ntp train --resume %s\n",
                 newest->string().c_str(), run.path().string().c_str());
    std::fflush(out);
  }
  try {
    run.event("run_failed", {{"reason", reason}});
    nlohmann::json summary = {{"status", "failed"}, {"reason", reason}, {"job", describe_job(config)}};
    try {
      summary["steps_logged"] = run.read_metrics().size();
    } catch (const std::exception&) {
      summary["steps_logged"] = 0;
    }
    if (newest) summary["checkpoint"] = newest->string();
    run.write_summary(summary);
  } catch (const std::exception& e) {
    spdlog::warn("ntp train: the failure could not be recorded in {}: {}", run.path().string(), e.what());
  }
}

}  // namespace

std::vector<std::string> demo_overrides() {
  return {"parallel.tp=4", "parallel.dp=2", "parallel.failed={0=[2]}", "train.steps=30",
          "train.global_batch=16", "train.lr=1e-3", "train.warmup_steps=3"};
}

std::filesystem::path choose_run_dir(const train::Config& config, const std::string& flag) {
  if (!flag.empty()) return flag;
  if (!config.run.dir.empty()) return config.run.dir;
  return train::create_new_run_dir();
}

TrainJobResult run_train_job(const train::Config& config, const std::filesystem::path& run_dir,
                             bool verify, std::FILE* out, const NodeOptions& node_in) {
  validate(node_in);
  NodeOptions node = node_in;
  const Host host = host_of(config, node);  // --nnodes that does not fit the replicas: before anything runs
  train::check_device(config.model);        // model.device = "cuda" on a host that cannot have it: exit 2
  check_power(config, host.place.ranks);
  check_ports(config, host.place.ranks);
  train::warn_if_oversubscribed(config.model, host.place.ranks);
  // --resume of a checkpoint inside a run directory continues that run.
  const bool resuming = !config.run.resume.empty();
  const bool continues = resuming && train::run_dir_of_checkpoint(config.run.resume) ==
                                         std::filesystem::absolute(run_dir).lexically_normal();
  if (resuming && !continues && verify) {
    throw train::ConfigError(fmt::format("--verify replays a run from its first step: resume from a checkpoint "
                                         "inside its run directory ({} is not)", config.run.resume));
  }
  // An empty folder counts as new (choose_run_dir makes the default one).
  const bool existed = std::filesystem::exists(run_dir) && !std::filesystem::is_empty(run_dir);
  const train::RunDir run = continues ? train::RunDir::open(run_dir) : train::RunDir::create(run_dir);
  // Held to the end: nobody else may train in this directory meanwhile.
  const train::RunLock lock(run_dir);
  train::JobData data;
  try {
    data = train::check_job(config, run_dir);
  } catch (const std::exception&) {  // ConfigError, CheckpointError
    // A new run gives its claim back; a continued run's files are its history.
    if (!continues && !existed) std::filesystem::remove_all(run_dir);  // nothing ran: leave nothing behind
    if (!continues && existed) std::filesystem::remove(run.file("events.jsonl"));
    throw;
  }
  if (resuming) prepare_restart(run, config.run.resume);
  run.write_config(train::to_toml(config));
  train::record_job_data(run_dir, data);  // before any worker reads the data
  run.event("run_started", {{"job", describe_job(config)}, {"ranks", train::job_places(config.parallel).size()}});
  std::fprintf(out, "ntp train: %s\nrun directory: %s\n", describe_job(config).c_str(),
               run_dir.string().c_str());
  if (node.multi_host()) start_hosts(config, run, node, out);
  const double start = train::unix_time_s();
  // A live line on a terminal, plain lines in logs and pipes.
  train::Progress progress(out, config.train.steps, ::isatty(::fileno(out)) == 1);
  const auto show = [&](const train::StepMetrics& m) {
    progress.update(m, train::unix_time_s() - start);
  };
  std::vector<train::StepMetrics> metrics;
  try {
    metrics = train::job_places(config.parallel).size() == 1 ? train_in_process(config, run_dir, show)
                                                            : train_with_workers(config, run, node, out, show);
  } catch (const std::exception& e) {
    progress.finish();
    if (!std::filesystem::exists(run_dir / "config.toml")) {
      // Every later error (the store, events.jsonl) follows from this one.
      throw std::runtime_error(fmt::format("the run directory {} was removed while the job ran, and the job stopped "
                                           "({})", run_dir.string(), e.what()));
    }
    record_failure(config, run, e.what(), out);
    throw;
  }
  progress.finish();
  if (const std::optional<nlohmann::json> stopped = first_event(run, "run_interrupted", start)) {
    const std::int64_t steps = stopped->value("steps_done", std::int64_t{0});
    const Interruption left = interruption(run_dir, steps);
    run.write_summary({{"status", "interrupted"},
                       {"steps_done", steps},
                       {"checkpoint", left.checkpoint ? nlohmann::json(left.checkpoint->string()) : nlohmann::json()},
                       {"job", describe_job(config)}});
    throw RunInterrupted(left.message);
  }
  // Ctrl-C during the replay: the run itself is done and recorded; say so
  // (exit 130) instead of dying mid-replay without a word. Caught from
  // before the summary: one that came right after run_finished was logged
  // killed the process before the summary was printed.
  std::optional<train::StopRequest> stop;
  if (verify) stop.emplace();
  TrainJobResult result{run_dir, finish_run(config, run, metrics, start, out), {}};
  if (verify) {
    try {
      result.verify = train::verify_run(run_dir, {}, [] { return train::StopRequest::signal() != 0; });
    } catch (const train::VerifyInterrupted& e) {
      throw RunInterrupted(fmt::format("--verify interrupted ({}); the run itself finished and is recorded in {}; "
                                       "check it with: ntp verify {}",
                                       e.what(), run_dir.string(), run_dir.string()));
    }
    run.event("verify", result.verify->to_json());
    try {
      train::write_verify_json(run_dir, *result.verify);
    } catch (const std::exception& e) {
      spdlog::warn("ntp train: {}", e.what());  // the verdict is still printed and in events.jsonl
    }
  }
  return result;
}

Interruption interruption(const std::filesystem::path& run_dir, std::int64_t steps_done) {
  const std::filesystem::path root = run_dir / "checkpoints";
  const std::string head = fmt::format("interrupted after {} step{}", steps_done, steps_done == 1 ? "" : "s");
  const std::filesystem::path saved = train::final_dir(root, steps_done);
  if (std::filesystem::exists(saved / "manifest.json")) {
    return {saved, fmt::format("{}; checkpoint {}; continue with: ntp train --resume {}", head, saved.string(),
                               run_dir.string())};
  }
  const std::string failed =
      fmt::format("the checkpoint of step {} did not complete (a writer was lost during its save)", steps_done);
  const std::optional<std::filesystem::path> newest = train::newest_checkpoint(root);
  if (!newest) return {std::nullopt, fmt::format("{}; {} and there is no earlier one to resume from", head, failed)};
  return {newest, fmt::format("{}; {}; the newest is {}; continue with: ntp train --resume {}", head, failed,
                              newest->string(), run_dir.string())};
}

}  // namespace ntp::elastic
