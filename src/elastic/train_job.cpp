#include "elastic/train_job.h"

#include <unistd.h>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <map>

#include "comm/store.h"
#include "elastic/job.h"
#include "elastic/world.h"
#include "power/rank_power.h"
#include "train/local_trainer.h"
#include "train/membership.h"
#include "train/ntp_trainer.h"
#include "train/power_setup.h"
#include "train/progress.h"
#include "train/run_dir.h"

namespace ntp::elastic {
namespace {

std::string describe_job(const train::Config& c) {
  std::string failed;
  for (const auto& [replica, slots] : c.parallel.failed) {
    failed += fmt::format(" replica {} without slots [{}];", replica, fmt::join(slots, ","));
  }
  return fmt::format("model {}, dp {} x tp {},{} batch {} ({}), {} steps, data {}", c.model.preset,
                     c.parallel.dp, c.parallel.tp, failed.empty() ? " all healthy;" : failed,
                     c.train.global_batch, train::to_string(c.parallel.batch_policy), c.train.steps,
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
}

// With elastic.recover: the job succeeded when every step was committed and
// every worker that ended on its own exited 0 — the dead (killed by a
// signal) are the failures the survivors recovered from.
bool recovered(const LaunchResult& result, const train::RunDir& run, std::int64_t steps) {
  if (static_cast<std::int64_t>(run.read_metrics().size()) != steps) return false;
  return std::all_of(result.ranks.begin(), result.ranks.end(), [](const RankExit& r) {
    return r.ok() || (!r.exited && !r.stopped_by_launcher);
  });
}

// Each in-job recovery as the survivors logged it: the step redone, the new
// epoch, the ranks lost, and the time from the first failure_detected to the
// last step_resumed of that epoch (the slowest survivor).
nlohmann::json recoveries(const train::RunDir& run) {
  std::map<std::int64_t, nlohmann::json> by_epoch;
  std::map<std::int64_t, double> detected;  // new epoch -> first detection
  for (const nlohmann::json& e : train::read_jsonl(run.file("events.jsonl"))) {
    const std::string name = e.value("event", "");
    const double t = e.value("time", 0.0);
    if (name == "failure_detected") {
      const std::int64_t next = e["epoch"].get<std::int64_t>() + 1;
      detected[next] = detected.contains(next) ? std::min(detected[next], t) : t;
    }
    if (name == "membership_agreed") by_epoch[e["epoch"]]["lost"] = e["lost"];
    if (name != "step_resumed") continue;
    const std::int64_t epoch = e["epoch"].get<std::int64_t>();
    nlohmann::json& r = by_epoch[epoch];
    r["epoch"] = epoch;
    r["step"] = e["step"];
    r["tp"] = e["tp"];
    r["recovery_s"] = std::max(r.value("recovery_s", 0.0), t - detected[epoch]);
  }
  nlohmann::json out = nlohmann::json::array();
  for (auto& [epoch, r] : by_epoch) out.push_back(r);
  return out;
}

// One process per active slot of every training replica, through the launcher;
// the progress follows metrics.jsonl, which rank 0 appends to.
std::vector<train::StepMetrics> train_with_workers(
    const train::Config& config, const train::RunDir& run,
    const std::function<void(const train::StepMetrics&)>& on_step) {
  LaunchOptions options;
  options.nproc = static_cast<int>(train::job_places(config.parallel).size());
  options.store = "file:" + run.store_dir().string();
  options.command = {std::filesystem::read_symlink("/proc/self/exe").string(), "train", "--worker",
                     "--run-dir", run.path().string()};
  options.log_dir = run.log_dir();
  options.straggler_timeout =
      std::chrono::milliseconds(static_cast<long>(config.deadline.straggler_s * 1000));
  train::JsonlTail tail(run.file("metrics.jsonl"));
  options.on_tick = [&] {
    for (const nlohmann::json& line : tail.read_new()) on_step(train::step_metrics_from_json(line));
  };
  if (config.elastic.recover) {
    // The launcher is the detector of dead workers: it marks them in the
    // store, where the survivors' membership agreement looks (train/membership.h).
    options.tolerate_failures = true;
    const std::shared_ptr<comm::Store> store = comm::open_store(options.store);
    options.on_event = [store](const std::string& event, const RankExit& r) {
      if (event == "worker_exited" && !r.ok()) store->set(train::dead_key(r.rank), comm::to_bytes("1"));
    };
  }
  const LaunchResult result = run_job(options, {run.file("events.jsonl"), stderr, "ntp train"});
  if (config.elastic.recover && recovered(result, run, config.train.steps)) return run.read_metrics();
  if (!result.ok()) {
    throw std::runtime_error(fmt::format("the workers failed (logs in {}):\n{}",
                                         run.log_dir().string(), result.report()));
  }
  return run.read_metrics();
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

}  // namespace

int run_train_worker(const std::filesystem::path& run_dir) {
  const train::Config config = train::load_config((run_dir / "config.toml").string(), {});
  const Environment env = current_environment();
  const WorldInfo world = world_from_env(env);
  train::WorkerOptions options;
  options.rank = world.rank;
  options.world_size = world.world_size;
  options.store = world.store;
  if (config.power.mode == power::PowerMode::nvml) options.gpu = gpu_of_local_rank(env, world.local_rank);
  if (env.contains("NTP_TEST_MISPAIR_RANK")) options.mispair_rank = std::stoi(env.at("NTP_TEST_MISPAIR_RANK"));
  train::run_ntp_worker(config, run_dir, options);
  return 0;
}

std::vector<std::string> demo_overrides() {
  return {"parallel.tp=4", "parallel.dp=2", "parallel.failed={0=[2]}", "train.steps=30",
          "train.global_batch=16", "train.lr=1e-3", "train.warmup_steps=3"};
}

std::filesystem::path choose_run_dir(const train::Config& config, const std::string& flag) {
  if (!flag.empty()) return flag;
  if (!config.run.dir.empty()) return config.run.dir;
  return train::default_run_dir();
}

TrainJobResult run_train_job(const train::Config& config, const std::filesystem::path& run_dir,
                             bool verify, std::FILE* out) {
  check_power(config, static_cast<int>(train::job_places(config.parallel).size()));
  const bool existed = std::filesystem::exists(run_dir);
  const train::RunDir run = train::RunDir::create(run_dir);
  try {
    train::check_job(config, run_dir);
  } catch (const train::ConfigError&) {
    if (!existed) std::filesystem::remove_all(run_dir);  // nothing ran: leave nothing behind
    throw;
  }
  run.write_config(train::to_toml(config));
  run.event("run_started", {{"job", describe_job(config)}, {"ranks", 1}});
  std::fprintf(out, "ntp train: %s\nrun directory: %s\n", describe_job(config).c_str(),
               run_dir.string().c_str());
  const double start = train::unix_time_s();
  // A live line on a terminal, plain lines in logs and pipes.
  train::Progress progress(out, config.train.steps, ::isatty(::fileno(out)) == 1);
  const auto show = [&](const train::StepMetrics& m) {
    progress.update(m, train::unix_time_s() - start);
  };
  const std::vector<train::StepMetrics> metrics =
      train::job_places(config.parallel).size() == 1 ? train_in_process(config, run_dir, show)
                                                      : train_with_workers(config, run, show);
  progress.finish();
  TrainJobResult result{run_dir, train::summarize(metrics, train::unix_time_s() - start), {}};
  result.summary["job"] = describe_job(config);
  if (config.elastic.recover) {
    result.summary["recoveries"] = recoveries(run);
    for (const nlohmann::json& r : result.summary["recoveries"]) {
      std::fprintf(out, "recovered: lost ranks %s, step %lld redone at tp %s, %.3f s\n",
                   r.value("lost", nlohmann::json::array()).dump().c_str(),
                   static_cast<long long>(r["step"].get<std::int64_t>()), r["tp"].dump().c_str(),
                   r["recovery_s"].get<double>());
    }
  }
  run.event("run_finished", {{"steps", metrics.size()}});
  run.write_summary(result.summary);
  print_summary(out, result.summary, run_dir);
  if (verify) {
    result.verify = train::verify_run(run_dir);
    run.event("verify", result.verify->to_json());
  }
  return result;
}

}  // namespace ntp::elastic
