#include "train/checkpoint_saver.h"

#include <spdlog/spdlog.h>

#include <signal.h>

#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <iterator>
#include <stdexcept>

#include <fmt/format.h>

#include "train/schedule.h"

namespace ntp::train {
namespace {

volatile std::sig_atomic_t g_stop_signal = 0;

void remember_stop(int sig) { g_stop_signal = sig; }

std::chrono::milliseconds ms(double seconds) {
  return std::chrono::milliseconds(static_cast<long>(seconds * 1000));
}

// A hang-up (the terminal or ssh session closed) stops the run as Ctrl-C
// does: the step in flight is finished and saved, not lost.
constexpr int kStopSignals[] = {SIGINT, SIGTERM, SIGHUP};
struct sigaction g_previous[std::size(kStopSignals)];

// NTP_TEST_SLOW_SAVE = "SECONDS", honoured only with NTP_TEST_MUTATIONS=1:
// every part's write first sleeps that long, a slow disk (the test of
// checkpoint_skipped). Read once, when the saver is made.
double slow_save_s() {
  const char* allowed = std::getenv("NTP_TEST_MUTATIONS");
  const char* spec = std::getenv("NTP_TEST_SLOW_SAVE");
  if (allowed == nullptr || std::string(allowed) != "1" || spec == nullptr) return 0.0;
  try {
    return std::stod(spec);
  } catch (const std::exception&) {
    throw std::invalid_argument(fmt::format("NTP_TEST_SLOW_SAVE = \"{}\": expected SECONDS", spec));
  }
}

}  // namespace

CheckpointInfo checkpoint_info(const Config& config, const model::GptConfig& model, std::int64_t seq_len,
                               const DataIdentity& data, std::int64_t steps_done, std::int64_t optimizer_steps,
                               const ParallelConfig& parallel, std::uint64_t epoch) {
  CheckpointInfo info;
  info.step = steps_done;
  info.optimizer_steps = optimizer_steps;
  info.model = model;
  info.seq_len = seq_len;
  info.seed = config.train.seed;
  info.order = to_string(config.data.order);
  info.global_batch = config.train.global_batch;
  info.data = data;
  info.saved_by = {{"dp", parallel.dp},
                   {"tp", parallel.tp},
                   {"epoch", epoch},
                   {"tp_active", split_input(parallel, config.train.global_batch).active}};
  if (parallel.pp > 1) info.saved_by["pp"] = parallel.pp;
  return info;
}

std::string checkpoint_config_toml(Config config, const ParallelConfig& parallel) {
  config.parallel = parallel;
  config.run.resume.clear();
  drop_injected_failures(config);  // a resume must not inject them again
  return to_toml(config);
}

CheckpointSaver::CheckpointSaver(const Config& config, const RunDir& run)
    : config_(config), run_(run), last_save_(std::chrono::steady_clock::now()), slow_save_s_(slow_save_s()) {}

CheckpointSaver::~CheckpointSaver() { wait(); }

bool CheckpointSaver::step_due(std::int64_t steps_done) const {
  return config_.train.checkpoint_every > 0 && steps_done % config_.train.checkpoint_every == 0;
}

bool CheckpointSaver::time_due() const {
  return config_.train.checkpoint_every_s > 0 &&
         std::chrono::steady_clock::now() - last_save_ >= ms(config_.train.checkpoint_every_s);
}

void CheckpointSaver::save(SaveJob job) {
  wait();
  last_save_ = std::chrono::steady_clock::now();
  {
    const std::lock_guard<std::mutex> lock(mutex_);
    copy_done_ = false;
  }
  writing_step_ = job.info.step;
  in_flight_ = true;
  thread_ = std::thread([this, job = std::move(job)]() mutable {
    write(job);
    in_flight_ = false;
  });
}

void CheckpointSaver::copied() {
  {
    const std::lock_guard<std::mutex> lock(mutex_);
    copy_done_ = true;
  }
  copy_cv_.notify_all();
}

double CheckpointSaver::wait_for_copy() {
  const double start = unix_time_s();
  std::unique_lock<std::mutex> lock(mutex_);
  copy_cv_.wait(lock, [this] { return copy_done_; });
  return unix_time_s() - start;
}

void CheckpointSaver::wait() {
  if (thread_.joinable()) thread_.join();
}

void CheckpointSaver::write(SaveJob& job) {
  const double start = unix_time_s();
  const std::filesystem::path partial = partial_dir(root(), job.info.step, job.epoch);
  std::optional<CheckpointPart> part;
  double copy_s = 0;
  try {
    if (job.copy) part = job.copy(std::move(spare_));
    copy_s = unix_time_s() - start;
  } catch (const std::exception& e) {
    copied();
    report_failure(job, e.what());
    return;
  }
  // A view is the state itself: training may change it only once it is written.
  const bool borrowed = part && part->borrows_state();
  if (!borrowed) copied();
  const bool written = write_own_part(job, partial, part);
  if (borrowed) copied();
  if (!written) return;
  try {
    if (part) {
      run_.event("checkpoint_part_written", {{"rank", job.rank},
                                             {"step", job.info.step},
                                             {"bytes", part->bytes()},
                                             {"wait_s", job.wait_s},
                                             {"copy_s", copy_s},
                                             {"write_s", unix_time_s() - start - copy_s}});
      if (!part->values.empty()) spare_ = std::move(part->values);
    }
    if (!job.assemble) return;
    const std::filesystem::path final = final_dir(root(), job.info.step);
    const std::uint64_t bytes = complete_checkpoint(partial, final, job.info, job.writers, job.config_toml,
                                                    ms(config_.deadline.checkpoint_s), job.abandoned);
    prune_checkpoints(root(), config_.train.keep_checkpoints, job.info.step);
    const double seconds = unix_time_s() - start;
    run_.event("checkpoint_saved", {{"rank", job.rank},
                                    {"step", job.info.step},
                                    {"path", final.string()},
                                    {"bytes", bytes},
                                    {"parts", job.writers.size()},
                                    {"seconds", seconds},
                                    {"mb_per_s", seconds > 0 ? static_cast<double>(bytes) / 1e6 / seconds : 0.0},
                                    {"copy_s", copy_s},
                                    {"copied", !borrowed}});
  } catch (const std::exception& e) {
    report_failure(job, e.what());
  }
}

bool CheckpointSaver::write_own_part(const SaveJob& job, const std::filesystem::path& partial,
                                     const std::optional<CheckpointPart>& part) {
  try {
    std::filesystem::create_directories(partial);
    if (slow_save_s_ > 0) std::this_thread::sleep_for(std::chrono::duration<double>(slow_save_s_));
    if (job.before_part) job.before_part();
    if (part) write_part(partial, job.rank, *part);
    return true;
  } catch (const std::exception& e) {
    if (part && job.part_failed) {
      try {
        job.part_failed(e.what());
      } catch (const std::exception&) {  // the assembler then waits for the part until its deadline
      }
    }
    report_failure(job, e.what());
    return false;
  }
}

void CheckpointSaver::skip(std::int64_t steps_done, int rank) {
  run_.event("checkpoint_skipped",
             {{"rank", rank},
              {"step", steps_done},
              {"reason", fmt::format("the save of step {} is still being written", writing_step_.load())}});
}

// Training goes on; the previous checkpoint stays the newest. The event is
// best effort: on a full disk it fails too, and it must not end the saver.
void CheckpointSaver::report_failure(const SaveJob& job, const std::string& reason) {
  spdlog::warn("rank {}: checkpoint of step {} failed: {}", job.rank, job.info.step, reason);
  try {
    run_.event("checkpoint_failed", {{"rank", job.rank}, {"step", job.info.step}, {"reason", reason}});
  } catch (const std::exception& e) {
    spdlog::warn("rank {}: the checkpoint failure could not be logged: {}", job.rank, e.what());
  }
}

StopRequest::StopRequest() {
  g_stop_signal = 0;
  struct sigaction action {};
  action.sa_handler = remember_stop;
  sigemptyset(&action.sa_mask);
  action.sa_flags = SA_RESTART;
  for (std::size_t i = 0; i < std::size(kStopSignals); ++i) {
    ::sigaction(kStopSignals[i], &action, &g_previous[i]);
  }
}

StopRequest::~StopRequest() {
  for (std::size_t i = 0; i < std::size(kStopSignals); ++i) {
    ::sigaction(kStopSignals[i], &g_previous[i], nullptr);
  }
}

int StopRequest::signal() { return g_stop_signal; }

}  // namespace ntp::train
