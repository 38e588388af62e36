// The launch of this host's workers and what happens around it: the
// launcher's options, the progress and checkpoint failures followed from the
// run's files, the fencer that kills ranks the survivors gave up on, a lost
// store turned into this host's exit, and the relaunches from a checkpoint
// (fallback_restart.h). The one-rank case trains in this process instead.
#include "elastic/worker_launch.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "comm/error.h"
#include "comm/job_store.h"
#include "comm/store.h"
#include "elastic/fallback_restart.h"
#include "elastic/fencer.h"
#include "elastic/job.h"
#include "elastic/multi_host.h"
#include "elastic/worker.h"
#include "elastic/world.h"
#include "train/local_trainer.h"

namespace ntp::elastic {
namespace {

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

}  // namespace

LaunchResult launch_or_lose_store(const train::Config& config, const train::RunDir& run, const NodeOptions& node,
                                  const std::function<void(const train::StepMetrics&)>& on_step) {
  const Host host = host_of(config, node);
  const double started = train::unix_time_s();
  try {
    return launch_workers(config, run, host, on_step);
  } catch (const comm::CommError& e) {
    const std::string store = node.store.empty() ? "file:" + run.store_dir().string() : comm::without_job(node.store);
    if (node.nnodes > 1 && config.elastic.recover) {
      // Cut off, not a store gone for all: the run is the others' to record.
      if (const std::optional<nlohmann::json> agreed =
              agreement_without(run, host, started, store_loss_wait_s(config))) {
        throw HostCutOff(fmt::format(
            "node {} lost the job's store {} and stopped its workers; the hosts that reach the store agreed epoch {} "
            "without its ranks (survivors {}) and train on; it leaves the job to them ({})",
            node.node_rank, store, agreed->value("epoch", -1), agreed->value("survivors", nlohmann::json::array()).dump(),
            e.what()));
      }
    }
    const std::string who = node.nnodes > 1 ? fmt::format("node {}", node.node_rank) : "the launcher";
    const char* rest = node.node_rank > 0 ? "; it leaves the job to the hosts that reach the store" : "";
    throw std::runtime_error(
        fmt::format("{} lost the job's store {} and stopped its workers{} ({})", who, store, rest, e.what()));
  }
}

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
    if (node.multi_host()) {
      leave_if_others_went_on(*comm::open_store(node.store), config, run, host_of(config, node), result, started);
    }
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

std::vector<train::StepMetrics> train_in_process(
    const train::Config& config, const std::filesystem::path& run_dir,
    const std::function<void(const train::StepMetrics&)>& on_step) {
  return train::train_local(config, run_dir, on_step, gpu_of_local_rank(current_environment(), 0));
}

}  // namespace ntp::elastic
