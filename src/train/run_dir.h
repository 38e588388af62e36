#pragma once
// The run directory: everything a run leaves behind (formats: docs/train.md).
//
//   config.toml      the resolved configuration
//   metrics.jsonl    one StepMetrics object per step (written by rank 0)
//   schedule.jsonl   sample ids per replica per step (what --verify replays)
//   events.jsonl     timestamped events from every process
//   trace.json       Chrome/Perfetto trace of a few steps, one track per rank
//   summary.json     the run summary
//   logs/rank-N.log  stdout and stderr of worker N
//   store/           file store of the rendezvous
//
// Several processes append to the same .jsonl files: each line is written
// with one write() on an O_APPEND descriptor, so lines never interleave.
#include <cstdint>
#include <filesystem>
#include <stdexcept>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "train/metrics.h"

namespace ntp::train {

// Appends JSON lines to a file, one write() per line.
class JsonlWriter {
 public:
  explicit JsonlWriter(const std::filesystem::path& path);
  ~JsonlWriter();
  JsonlWriter(const JsonlWriter&) = delete;
  JsonlWriter& operator=(const JsonlWriter&) = delete;
  void append(const nlohmann::json& object);

 private:
  std::filesystem::path path_;
  int fd_ = -1;
};

// Reads the complete lines another process appended since the last call
// (the live progress of `ntp train` follows metrics.jsonl this way).
class JsonlTail {
 public:
  explicit JsonlTail(std::filesystem::path path) : path_(std::move(path)) {}
  std::vector<nlohmann::json> read_new();

 private:
  std::filesystem::path path_;
  std::uint64_t offset_ = 0;
};

// Wall-clock seconds since the Unix epoch (shared by every process on a host).
double unix_time_s();

// Creates a new, empty run directory under `parent` named after the UTC time
// to the millisecond ("runs/20261129-181500.123"), with "-2", "-3", ...
// appended when another run took that name: every caller gets its own folder,
// even several processes in the same millisecond (mkdir is the arbiter).
std::filesystem::path create_new_run_dir(const std::filesystem::path& parent = "runs");

class RunDir {
 public:
  // Creates the directory (and logs/) and claims it by creating events.jsonl
  // exclusively: of several runs started on one directory, exactly one gets
  // it. Refuses a directory that already holds a run (metrics.jsonl or
  // events.jsonl present) and a path that is not a folder, naming it
  // (ConfigError: a bad --run-dir or run.dir).
  static RunDir create(const std::filesystem::path& path);
  // Opens an existing run directory (a worker joining the run).
  static RunDir open(const std::filesystem::path& path);

  const std::filesystem::path& path() const { return path_; }
  std::filesystem::path file(const std::string& name) const { return path_ / name; }
  std::filesystem::path log_dir() const { return path_ / "logs"; }
  std::filesystem::path store_dir() const { return path_ / "store"; }

  void write_config(const std::string& toml) const;
  // Appends one event line: {"time": unix s, "event": name, ...fields}.
  void event(const std::string& name, nlohmann::json fields = nlohmann::json::object()) const;
  void append_metrics(const StepMetrics& m) const;
  // {"step": s, "epoch": e, "samples": [[ids of replica 0], [ids of replica 1], ...]}
  void append_schedule(std::int64_t step, std::int64_t epoch,
                       const std::vector<std::vector<std::int64_t>>& samples) const;
  void write_summary(const nlohmann::json& summary) const;
  // Rewrites the .jsonl file `name` without its rows of steps >= `step` and
  // without a last line cut short; returns the rows kept. Only the writer
  // calls it, after a recovery, while nobody else appends to the file.
  std::vector<nlohmann::json> truncate_jsonl_from_step(const std::string& name, std::int64_t step) const;

  std::vector<StepMetrics> read_metrics() const;
  std::vector<nlohmann::json> read_events() const;

 private:
  explicit RunDir(std::filesystem::path path) : path_(std::move(path)) {}
  std::filesystem::path path_;
};

// The run directory held by the `ntp train` that runs a job in it, for the
// job's whole life: a second one on the same directory (a `--resume` while
// the run is live, two resumes at once) is refused, naming the holder,
// instead of training into the same files and checkpoints. An flock on
// RUN_DIR/run.lock: the kernel drops it when the holder dies, SIGKILL
// included, so a crashed run never leaves a stale lock; workers do not
// inherit it (close-on-exec), and they die with the launcher. On several
// hosts node 0 holds it.
class RunDirBusy : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

class RunLock {
 public:
  // Throws RunDirBusy, naming the holder, when another process holds it.
  explicit RunLock(const std::filesystem::path& run_dir);
  ~RunLock();
  RunLock(const RunLock&) = delete;
  RunLock& operator=(const RunLock&) = delete;

 private:
  int fd_ = -1;
};

// Reads every line of a .jsonl file; throws std::runtime_error naming the
// file and line of a malformed one.
std::vector<nlohmann::json> read_jsonl(const std::filesystem::path& path);

// Writes `text` to `path` through a temporary file and rename, so a reader
// never sees half a file.
void write_file_atomic(const std::filesystem::path& path, const std::string& text);

}  // namespace ntp::train
