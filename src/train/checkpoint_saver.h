#pragma once
// Saving checkpoints without stopping training: the trainer hands over a
// part it has already copied into host memory (snapshot_part, the only
// stall), and a background thread writes it and, on the rank that assembles
// the checkpoint, waits for the other parts and completes the manifest. One
// save is in flight at a time: a new one first waits for the previous.
//
// When to save (the same answer on every rank, so that every writer copies the
// same step): every train.checkpoint_every steps, when train.checkpoint_every_s
// passed on the writer's clock (the vote travels in the commit record), after
// the last step, and after the step in flight when SIGINT or SIGTERM arrived.
#include <chrono>
#include <cstdint>
#include <exception>
#include <functional>
#include <optional>
#include <filesystem>
#include <string>
#include <thread>
#include <vector>

#include "train/checkpoint.h"
#include "train/config.h"
#include "train/run_dir.h"

namespace ntp::train {

// Everything one rank's share of a save needs.
struct SaveJob {
  CheckpointInfo info;
  std::uint64_t epoch = 0;
  int rank = 0;
  std::optional<CheckpointPart> part;  // this rank's units; none when it writes nothing
  double wait_s = 0;                   // the stall: waiting for the previous save,
  double copy_s = 0;                   // and the host copy
  bool assemble = false;               // this rank completes the manifest
  std::vector<int> writers;            // the ranks whose parts make the checkpoint
  std::string config_toml;
  std::function<void()> before_part;  // fault injection: called before the part is written
  std::function<bool()> abandoned;   // true once waiting for the other parts is pointless
};

// The manifest fields of a checkpoint after `steps_done` steps of `config`'s
// run, saved by a job laid out as `parallel` in layout epoch `epoch`.
CheckpointInfo checkpoint_info(const Config& config, const model::GptConfig& model, std::int64_t seq_len,
                               std::int64_t steps_done, std::int64_t optimizer_steps,
                               const ParallelConfig& parallel, std::uint64_t epoch);

// The config.toml a checkpoint keeps: the run's, at its current layout,
// without the failures injected into it (test.failures, test.chaos, test.kill_rank).
std::string checkpoint_config_toml(Config config, const ParallelConfig& parallel);

class CheckpointSaver {
 public:
  CheckpointSaver(const Config& config, const RunDir& run);
  ~CheckpointSaver();  // waits for the save in flight
  CheckpointSaver(const CheckpointSaver&) = delete;
  CheckpointSaver& operator=(const CheckpointSaver&) = delete;

  std::filesystem::path root() const { return run_.path() / "checkpoints"; }
  // Whether steps_done (steps applied) is a train.checkpoint_every boundary.
  bool step_due(std::int64_t steps_done) const;
  // Whether train.checkpoint_every_s passed since the last save (or the start).
  bool time_due() const;
  // Starts writing `job` in the background (after the previous save ended).
  void save(SaveJob job);
  // Blocks until the save in flight ended; its outcome is in events.jsonl.
  void wait();
  // The buffer of the last part written, to copy the next part into (call
  // after wait()).
  std::vector<float> take_buffer() { return std::move(spare_); }

 private:
  void write(SaveJob& job);

  const Config& config_;
  RunDir run_;
  std::chrono::steady_clock::time_point last_save_;
  std::thread thread_;
  std::vector<float> spare_;  // owned by the save thread while it runs
};

// Installs SIGINT and SIGTERM handlers that only record the request, so the
// step in flight finishes and a checkpoint is saved (the previous handlers
// come back when the guard ends).
class StopRequest {
 public:
  StopRequest();
  ~StopRequest();
  StopRequest(const StopRequest&) = delete;
  StopRequest& operator=(const StopRequest&) = delete;
  // The signal received (SIGINT or SIGTERM), or 0.
  static int signal();
};

}  // namespace ntp::train
