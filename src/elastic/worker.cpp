#include "elastic/worker.h"

#include <spdlog/spdlog.h>

#include <net/if.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <functional>
#include <optional>
#include <thread>

#include <fmt/format.h>

#include "comm/error.h"
#include "comm/group.h"
#include "comm/heartbeat.h"
#include "comm/store.h"
#include "elastic/crash_report.h"
#include "elastic/dead_marks.h"
#include "elastic/loss_watch.h"
#include "elastic/membership.h"
#include "elastic/recovery.h"
#include "elastic/world.h"
#include "layout/errors.h"
#include "train/checkpoint_saver.h"
#include "train/faults.h"
#include "train/run_dir.h"

namespace ntp::elastic {
namespace {

// The failures this rank injects into itself, each fired once.
class FaultPlan {
 public:
  // `mute` stops this rank's heartbeat (MUTE), `lapse` its lease renewal too (LAPSE).
  FaultPlan(const train::Config& c, int rank, int ranks, std::function<void()> mute, std::function<void()> lapse)
      : mute_(std::move(mute)), lapse_(std::move(lapse)) {
    std::vector<train::FaultSpec> all = train::parse_faults(c.test.failures);
    for (const train::FaultSpec& f :
         train::chaos_faults(c.test.chaos, static_cast<std::uint64_t>(c.test.chaos_seed), ranks, c.train.steps)) {
      all.push_back(f);
    }
    if (c.test.kill_rank >= 0) all.push_back({static_cast<int>(c.test.kill_rank), c.test.kill_at_step, "start", SIGKILL});
    for (const train::FaultSpec& f : all) {
      if (f.rank == rank) mine_.push_back(f);
    }
  }

  // In `phase` of step `step` ("recovery": at or after the step).
  void fire(train::NtpTrainer& trainer, std::int64_t step, const std::string& phase) {
    for (train::FaultSpec& f : mine_) {
      if (f.rank < 0 || f.phase != phase) continue;
      if (phase == "recovery" ? step < f.step : step != f.step) continue;
      trainer.event("failure_injected", {{"step", step}, {"phase", phase}, {"fault", train::to_string(f)}});
      f.rank = -1;  // once
      if (f.signal == train::kLag) {
        throw comm::CommError({comm::CommErrorKind::kBroken, "world", trainer.epoch(), trainer.rank(), -1,
                               "all_gather", "test.failures LAG: the commit collective failed on this rank"});
      }
      if (f.signal == train::kHang) {
        while (true) std::this_thread::sleep_for(std::chrono::hours(1));  // until fenced
      }
      if (f.signal == train::kMute) {
        if (mute_) mute_();
        continue;
      }
      if (f.signal == train::kLapse) {
        if (lapse_) lapse_();
        continue;
      }
      if (f.signal == train::kSlow) {
        trainer.set_slowdown(f.slowdown);
        continue;
      }
      ::kill(::getpid(), f.signal);
    }
  }

 private:
  std::vector<train::FaultSpec> mine_;
  std::function<void()> mute_;
  std::function<void()> lapse_;
};

// A rank that could not renew its lease stops at once, before the store can
// drop the lease and the others go on without it (docs/launch.md,
// "Partitions"): one line to stderr (the rank's log), then _exit, which runs
// no destructor that could touch the store or the run's files.
[[noreturn]] void self_fence(const std::string& why) {
  const std::string line = why + "\n";
  [[maybe_unused]] const auto written = ::write(STDERR_FILENO, line.data(), line.size());
  ::_exit(kExitSelfFenced);
}

int run_loop(train::NtpTrainer& trainer, const train::Config& config, FaultPlan& faults, comm::Heartbeat& heartbeat,
             bool rejoining) {
  Recovery recovery(trainer, trainer.options(), trainer.store());
  std::int64_t current = 0;
  recovery.set_fault_point([&] { faults.fire(trainer, current, "recovery"); });
  // Besides the guard thread, every phase of a step (the commit, the update,
  // the checkpoint) checks the lease on this thread: a process resumed after
  // a SIGSTOP longer than its lease stops here before it writes anything.
  trainer.set_fault_point([&](std::int64_t s, train::StepPhase phase) {
    heartbeat.check_lease();
    faults.fire(trainer, s, train::to_string(phase));
  });
  bool connected = false;
  std::int64_t s = trainer.applied_step() + 1;  // 0, or the step after a checkpoint (run.resume)
  if (rejoining) {
    const RecoveryOutcome outcome = recovery.join();
    if (outcome.leaving) return 0;
    connected = true;
    s = outcome.resume;
  }
  while (true) {
    current = s;
    try {
      if (!connected) {
        trainer.connect(trainer.plan().members().front());
        connected = true;
      }
      if (s < config.train.steps) {
        trainer.step(s);
        ++s;
        if (trainer.stop_requested()) {
          // SIGINT/SIGTERM/SIGHUP: the step's checkpoint is being saved; end once it is.
          trainer.wait_for_checkpoint();
          if (trainer.is_writer()) trainer.event("run_interrupted", {{"steps_done", s}});
          return 0;
        }
        if (trainer.join_pending() || trainer.relayout_due()) {
          // Every member saw the same commit: all grow, or all re-lay out, after this step.
          const RecoveryOutcome outcome =
              trainer.join_pending() ? recovery.grow() : recovery.relayout(train::Relayout(*trainer.relayout_due()));
          if (outcome.leaving) return 0;
          s = outcome.resume;
        }
        continue;
      }
      trainer.finish();
      if (trainer.is_writer()) trainer.store()->set(done_key(), comm::to_bytes("1"));
      return 0;
    } catch (const comm::CommError& e) {
      if (!config.elastic.recover) throw;
      const RecoveryOutcome outcome = recovery.recover(e.what());
      if (outcome.leaving) return 0;
      connected = true;
      s = outcome.resume;
    }
  }
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

int run_worker(const train::Config& config, const std::filesystem::path& run_dir,
               const train::WorkerOptions& options, int nnodes) {
  std::optional<train::NtpTrainer> started;
  try {
    train::JobInput input = train::read_job_input(config, run_dir);
    train::JobPlan plan = train::JobPlan::build(config, input.shape(), nnodes);
    started.emplace(std::move(plan), std::move(input), run_dir, options);
  } catch (const train::ConfigError& e) {
    // A rank that cannot start (its data differs from the job's, say) says
    // why in events.jsonl, so that ntp train's verdict names the cause.
    const std::string reason = fmt::format("rank {} could not start: {}", options.rank, e.what());
    try {
      train::RunDir::open(run_dir).event("run_stopped", {{"rank", options.rank}, {"reason", reason}});
    } catch (const std::exception&) {  // the run directory gone: the error below still says why
    }
    throw;
  }
  train::NtpTrainer& trainer = *started;
  // The launcher fences a rank whose beats stop (a stopped or wedged process);
  // with in-job recovery the rank also holds a lease on the store, and fences
  // itself when it cannot renew it (docs/launch.md, "Partitions").
  const auto interval = std::chrono::milliseconds(static_cast<long>(train::heartbeat_interval_s(config.deadline) * 1000));
  comm::LeaseOptions lease;
  if (config.elastic.recover) {
    lease.ttl = std::chrono::milliseconds(static_cast<long>(train::lease_seconds(config.deadline) * 1000));
    lease.on_lapse = self_fence;
  }
  comm::Heartbeat heartbeat(trainer.store(), options.rank, interval, lease);
  // A rank declared lost with its host may never close its sockets: its
  // peers abort their calls on it as soon as the fencer says so.
  std::optional<LossWatch> loss_watch;
  if (config.elastic.recover) {
    const auto on_lost = [](int lost) {
      comm::abort_groups_with(lost, fmt::format("rank {} was declared lost with its host", lost));
    };
    const auto on_failed = [](std::uint64_t epoch, int reporter) {
      comm::abort_epoch_groups(epoch, fmt::format("rank {} reported a failure of epoch {}", reporter, epoch));
    };
    loss_watch.emplace(trainer.store(), interval, on_lost,
                       EpochWatch{[&trainer] { return trainer.live_epoch(); }, on_failed});
  }
  // A restarted worker (elastic.rejoin) comes back through the protocol; the
  // failures injected into its first life are not injected again.
  const char* rejoin_env = std::getenv("NTP_REJOIN");
  const bool rejoining = rejoin_env != nullptr && std::string(rejoin_env) == "1";
  train::Config run_config = config;
  if (rejoining) {
    train::drop_injected_failures(run_config);
  }
  FaultPlan faults(run_config, options.rank, options.world_size, [&heartbeat] { heartbeat.pause(); },
                   [&heartbeat] { heartbeat.lapse(); });
  const train::StopRequest stop;  // SIGINT/SIGTERM/SIGHUP: finish the step, save, end
  try {
    const int code = run_loop(trainer, config, faults, heartbeat, rejoining);
    trainer.restore_power("exit");
    return code;
  } catch (const layout::UnitsLostError& e) {
    trainer.event("run_stopped", {{"reason", e.what()}});
    trainer.restore_power("error");
    spdlog::error("rank {}: in-job recovery impossible: {}", options.rank, e.what());
    return kExitUnitsLost;
  } catch (const std::exception& e) {
    trainer.event("run_stopped", {{"reason", e.what()}});
    trainer.restore_power("error");
    throw;
  }
}

int run_train_worker(const std::filesystem::path& run_dir) {
  const train::Config config = train::load_config((run_dir / "config.toml").string(), {});
  const Environment env = current_environment();
  const WorldInfo world = world_from_env(env);
  install_crash_report(world.rank);
  train::WorkerOptions options;
  options.rank = world.rank;
  options.world_size = world.world_size;
  options.store = world.store;
  if (config.power.mode == power::PowerMode::nvml) options.gpu = gpu_of_local_rank(env, world.local_rank);
  set_gloo_address(options, env);
  if (env.contains("NTP_TEST_MISPAIR_RANK")) options.mispair_rank = std::stoi(env.at("NTP_TEST_MISPAIR_RANK"));
  if (config.elastic.recover) {
    const std::shared_ptr<comm::Store> store = comm::open_store(options.store);
    // Shared by every group the worker creates: one batched read per 50 ms
    // (two of the creation's polls) instead of one read per member and poll.
    const auto marks = std::make_shared<DeadMarks>(store, world.world_size, std::chrono::milliseconds(50));
    options.is_dead = [marks](int rank) { return marks->is_dead(rank); };
    options.epoch_failed = [marks](std::uint64_t epoch) { return marks->epoch_failed(epoch); };
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
  return run_worker(config, run_dir, options, world.num_nodes);
}

}  // namespace ntp::elastic
