#pragma once
// Saving checkpoints without stopping training. A background thread first
// copies the rank's part into host memory (snapshot_part) while the next step
// computes — the state only changes at that step's update, which waits for
// the copy (wait_for_copy): the only possible stall — then writes it and, on
// the rank that assembles the checkpoint, waits for the other parts and
// completes the manifest. One save is in flight at a time: a periodic save
// due while the previous one is still being written is skipped (event
// checkpoint_skipped), not waited for, so a slow disk never stalls training;
// the save that ends a run (or a stop) waits, and writes the state itself
// without a copy (part_view): nothing changes it afterwards.
//
// When to save (the same answer on every rank, so that every writer copies the
// same step): every train.checkpoint_every steps, when train.checkpoint_every_s
// passed on the writer's clock (the vote travels in the commit record), after
// the last step, and after the step in flight when SIGINT, SIGTERM or SIGHUP arrived.
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <mutex>
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
  // Copies this rank's units into host memory (into `reuse`, the previous
  // part's buffer), or for the last save returns a view of them (part_view:
  // the update after it, if any, waits until the part is written); empty
  // when the rank writes no part.
  std::function<CheckpointPart(std::vector<float> reuse)> copy;
  double wait_s = 0;                   // a stall: waiting for the previous save to end
  bool assemble = false;               // this rank completes the manifest
  std::vector<int> writers;            // the ranks whose parts make the checkpoint
  std::string config_toml;
  std::function<void()> before_part;  // fault injection: called before the part is written
  std::function<bool(int rank)> abandoned;  // true once waiting for that writer's part is pointless
  // Called (best effort) when this rank's part could not be written (a full
  // disk, say): it tells the assembler, whose `abandoned` looks, so that it
  // stops waiting for the part. Without it the assembler waited until
  // deadline.checkpoint_s, and its next save stalled its training that long:
  // past the collective deadline, the others took it for a failed rank.
  std::function<void(const std::string& reason)> part_failed;
};

// The manifest fields of a checkpoint after `steps_done` steps of `config`'s
// run over `data`, saved by a job laid out as `parallel` in layout epoch `epoch`.
CheckpointInfo checkpoint_info(const Config& config, const model::GptConfig& model, std::int64_t seq_len,
                               const DataIdentity& data, std::int64_t steps_done, std::int64_t optimizer_steps,
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
  // Starts `job` in the background (after the previous save ended): its
  // copy, then its write.
  void save(SaveJob job);
  // Blocks until the copy of the save in flight is done; call before changing
  // the state it copies (an optimizer update, a state move). Returns the
  // seconds it blocked: the training stall of the save.
  double wait_for_copy();
  // Blocks until the save in flight ended; its outcome is in events.jsonl.
  void wait();
  // Whether a save is still being written (its thread has not ended).
  bool busy() const { return in_flight_; }
  // Logs that the periodic save after `steps_done` steps is skipped because
  // one is still being written (the caller decided it: busy(), or any rank's
  // vote in the commit record).
  void skip(std::int64_t steps_done, int rank);

 private:
  void write(SaveJob& job);
  // This rank's part into `partial`; false (reported) when it failed.
  bool write_own_part(const SaveJob& job, const std::filesystem::path& partial,
                      const std::optional<CheckpointPart>& part);
  void report_failure(const SaveJob& job, const std::string& reason);
  void copied();

  const Config& config_;
  RunDir run_;
  std::chrono::steady_clock::time_point last_save_;
  std::thread thread_;
  std::vector<float> spare_;  // the last part's buffer; the save thread's while it runs
  std::mutex mutex_;
  std::condition_variable copy_cv_;
  bool copy_done_ = true;
  std::atomic<bool> in_flight_ = false;
  std::atomic<std::int64_t> writing_step_ = -1;
  double slow_save_s_ = 0;  // NTP_TEST_SLOW_SAVE
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
  // The signal received (SIGINT, SIGTERM or SIGHUP), or 0.
  static int signal();
};

}  // namespace ntp::train
