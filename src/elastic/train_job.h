#pragma once
// What `ntp train` does around the trainer: make the run directory, write the
// resolved configuration, run the training (in this process for TP = DP = 1),
// show progress, write summary.json, and optionally verify the run against a
// single-process replay. Errors in the configuration surface as
// train::ConfigError before anything runs.
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <optional>

#include <nlohmann/json.hpp>

#include "elastic/worker.h"  // run_train_worker: `ntp train --worker`
#include "train/config.h"
#include "train/verify.h"

namespace ntp::elastic {

// The request is valid but this build cannot carry it out (exit code 3).
class UnsupportedRequest : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// SIGINT, SIGTERM or SIGHUP stopped the run after the step in flight; a checkpoint of
// that step was saved, or, if that save lost a writer, an earlier one is the
// newest (`ntp train` exits 130, naming how to resume: interruption() below).
class RunInterrupted : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// power.mode = "nvml" but this host cannot control its GPUs' power limits
// (no NVML, a GPU missing, or one that does not match power.tdp_w or
// power.max_frac): found before any worker starts (exit code 1). A missing
// permission shows when a worker first sets a limit.
class PowerUnavailable : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

struct TrainJobResult {
  std::filesystem::path run_dir;
  nlohmann::json summary;
  std::optional<train::VerifyResult> verify;
};

// What an interrupted run left after `steps_done` steps: the checkpoint of
// that step if its save completed, else the newest complete one (or none), and
// the line `ntp train` says. Never names a checkpoint that is not there.
struct Interruption {
  std::optional<std::filesystem::path> checkpoint;
  std::string message;
};
Interruption interruption(const std::filesystem::path& run_dir, std::int64_t steps_done);

// The built-in demo (`ntp train` with no --config and no --set): 2 replicas x
// TP 4 of the tiny preset on the built-in corpus, replica 0 without slot 2.
std::vector<std::string> demo_overrides();

// The run directory of a job: --run-dir, else run.dir, else a new folder
// runs/<UTC time> created here (unique, see train::create_new_run_dir).
std::filesystem::path choose_run_dir(const train::Config& config, const std::string& flag);

// This process's place in a multi-host job: one `ntp train` per host, each
// starting its host's ranks (docs/train.md, "Several hosts").
struct NodeOptions {
  int nnodes = 1;
  int node_rank = 0;
  // Empty: a file store in the run directory (one host). Else
  // redis://HOST:PORT[/ns][?job=ID]; node 0 starts the job (a new id unless
  // one is named), every other node must name it.
  std::string store;
  // Gloo binds and publishes this: a network interface ("eth0") or an
  // address or host name; empty = loopback.
  std::string iface;
  bool multi_host() const { return nnodes > 1 || !store.empty(); }
};

// Throws std::invalid_argument naming the flag (--nnodes, --node-rank,
// --store) that is wrong or missing.
void validate(const NodeOptions& node);

// Node 0, and a single host: makes the run directory, starts the job, runs
// this host's ranks, writes the summary.
TrainJobResult run_train_job(const train::Config& config, const std::filesystem::path& run_dir,
                             bool verify, std::FILE* out, const NodeOptions& node = {});

// Node I > 0: joins the job of node.store, takes node 0's configuration and
// run directory (which must be visible here: a shared file system), and runs
// this host's ranks. Waits up to `wait` for node 0 to publish the run.
// Throws std::invalid_argument for a wrong job, --nnodes or an invisible run
// directory; std::runtime_error when this host's workers failed.
void run_train_node(const NodeOptions& node, std::chrono::milliseconds wait, std::FILE* out);

}  // namespace ntp::elastic
