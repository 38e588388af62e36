#pragma once
// The run configuration of `ntp train`: one TOML file, then `--set key=value`
// overrides, then validation across keys. Every key has a default (see
// kConfigKeys and docs/config.md); unknown keys and bad values are rejected
// with a ConfigError naming the key and where it came from, before any worker
// process starts.
#include <compare>
#include <cstdint>
#include <map>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "layout/slot_speeds.h"
#include "model/config.h"
#include "power/power_mode.h"
#include "tensor/gemm_backend.h"
#include "tensor/gpu.h"

namespace ntp::train {

class ConfigError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

enum class DataOrder { kShuffled, kSequential };
// How data.path and data.val_path are read (model/token_data.h).
enum class DataFormat { kAuto, kLlmc, kNanogpt, kText };
enum class LrSchedule { kCosine, kConstant };
enum class BatchPolicy { kProportional, kFixed, kConstantGlobal };
// What shares of a unit kind balance (parallel.balance, layout/shares.h):
// work = units / slot speed (per phase: each kind on its own), count = unit
// counts, speeds ignored. Equal speeds make them the same.
enum class Balance { kWork, kCount };
// What a non-finite loss or gradient norm does (train.on_nan).
enum class NanPolicy { kStop, kSkip };
// What a failure that in-job recovery cannot handle does (elastic.fallback).
enum class FallbackPolicy { kCheckpoint, kStop };

std::string to_string(DataOrder order);
std::string to_string(DataFormat format);
std::string to_string(LrSchedule schedule);
std::string to_string(BatchPolicy policy);
std::string to_string(Balance balance);
std::string to_string(NanPolicy policy);
std::string to_string(FallbackPolicy policy);

struct ModelConfig {
  model::Family family = model::Family::kGpt2;  // picks the preset list and the architecture
  std::string preset = "tiny";
  // 0 = the preset's value.
  std::int64_t vocab = 0;
  std::int64_t layers = 0;
  std::int64_t d_model = 0;
  std::int64_t heads = 0;
  std::int64_t seq_len = 0;
  std::int64_t kv_heads = 0;    // Llama only
  std::int64_t ffn_hidden = 0;  // Llama only
  double rope_theta = 10000.0;  // Llama only: RoPE base (model::kDefaultRopeTheta)
  double norm_eps = 1e-5;       // Llama only: RMSNorm epsilon (model::kDefaultNormEps)
  std::string init_from;  // llm.c checkpoint; empty = random init from train.seed
  std::int64_t threads = 0;  // kernel threads per rank; 0 = cores / ranks on this host
  tensor::GemmBackend gemm = tensor::GemmBackend::kOneDnn;  // every rank of a job uses the same
  // The GEMMs' inputs: fp32, or bf16 with fp32 accumulation (docs/model.md, "Mixed precision").
  tensor::Precision precision = tensor::Precision::kFp32;
  // Where each rank's forward and backward run (tensor/gpu.h); the master
  // weights, the optimizer and the gradient sync stay on the host either way.
  tensor::Device device = tensor::Device::kCpu;
  bool huge_pages = true;  // large buffers on transparent huge pages (tensor/buffer.h)
  bool operator==(const ModelConfig&) const = default;
};

struct DataConfig {
  std::string path;  // text file or token .bin; empty = the built-in demo corpus
  DataFormat format = DataFormat::kAuto;
  std::string val_path;  // validation tokens (same format); empty = no validation loss
  DataOrder order = DataOrder::kShuffled;
  bool operator==(const DataConfig&) const = default;
};

struct OptimConfig {  // the [train] table
  std::int64_t steps = 20;
  std::int64_t global_batch = 8;  // sequences per step, whole job
  std::int64_t micro_batch = 4;   // sequences per forward/backward pass of one replica
  double lr = 3e-4;
  LrSchedule lr_schedule = LrSchedule::kCosine;
  std::int64_t warmup_steps = 0;
  double weight_decay = 0.1;
  double beta1 = 0.9;
  double beta2 = 0.95;
  double eps = 1e-8;
  NanPolicy on_nan = NanPolicy::kStop;
  double grad_clip = 1.0;  // 0 = off
  std::int64_t seed = 1337;
  // Checkpoints (train/checkpoint.h): every this many steps (0 = not by
  // count), every this many seconds (0 = not by time); always after the last
  // step and on SIGINT/SIGTERM/SIGHUP. The newest keep_checkpoints complete ones stay.
  std::int64_t checkpoint_every = 0;
  double checkpoint_every_s = 600.0;
  std::int64_t keep_checkpoints = 2;
  // Validation loss on data.val_path every eval_every steps and after the
  // last; 0 = never. eval_batches micro-batches of train.micro_batch sequences.
  std::int64_t eval_every = 0;
  std::int64_t eval_batches = 4;
  bool operator==(const OptimConfig&) const = default;
};

// Whether step `step` (from 0) ends with a validation pass: every
// eval_every steps and after the last.
bool eval_due(const OptimConfig& train, std::int64_t step);

// One pipeline stage of one replica: the TP group a failed slot belongs to.
struct ReplicaStage {
  std::int64_t replica = 0;
  std::int64_t stage = 0;
  auto operator<=>(const ReplicaStage&) const = default;
};

// The failed slots of a job without a pipeline (replica -> slots) as
// parallel.failed holds them: every one in stage 0.
std::map<ReplicaStage, std::vector<std::int64_t>> failed_in_stage0(
    const std::map<std::int64_t, std::vector<std::int64_t>>& by_replica);

struct ParallelConfig {
  std::int64_t tp = 1;  // base TP degree n (slots per stage of a replica)
  std::int64_t dp = 1;  // replicas
  // Pipeline stages per replica: each holds a contiguous range of blocks and
  // is its own TP group of tp slots (docs/pipeline.md).
  std::int64_t pp = 1;
  // Micro-batches per step of every replica: its share cut into this many of
  // near-equal size (a degraded replica's smaller share into smaller ones, so
  // every replica's pipeline bubble is the same). 0: micro-batches of
  // train.micro_batch sequences.
  std::int64_t microbatches = 0;
  // (replica, stage) -> its failed slots, ascending; no entry = none. With
  // pp = 1 every stage is 0 and the TOML spelling names replicas only.
  std::map<ReplicaStage, std::vector<std::int64_t>> failed;
  std::int64_t min_tp = 1;  // replicas with fewer active slots are dropped
  BatchPolicy batch_policy = BatchPolicy::kProportional;
  // Neuron-like kinds (FFN neurons, vocabulary rows) are cut in blocks of up
  // to this many units, so GEMM widths stay multiples of a tile; heads stay
  // whole (job_config). 1 = the floor/ceil split of one unit.
  std::int64_t align = 64;
  Balance balance = Balance::kWork;
  // Each slot's speed relative to a healthy GPU, per replica ("0:1,1,1,0.5":
  // replica 0's slot 3 runs at half speed); under balance = "work" a slot holds
  // units in proportion to its speed. A replica not listed runs at 1.0. The
  // running job rewrites it when it measures a slow rank (elastic.relayout).
  layout::SlotSpeeds speeds;
  bool operator==(const ParallelConfig&) const = default;

  // Active slots of stage `stage` of replica r (all slots not listed in
  // `failed`), ascending.
  std::vector<std::int64_t> active_slots(std::int64_t replica, std::int64_t stage = 0) const;
  // The fewest active slots of any stage of replica r: its slowest stage,
  // which every stage of a pipeline waits for.
  std::int64_t least_active(std::int64_t replica) const;
  // The min_tp rule, the one copy: replica r trains while every stage keeps
  // min_tp active slots (train::JobPlan::trains).
  bool trains(std::int64_t replica) const { return least_active(replica) >= min_tp; }
  // Replica r's failed slots of `stage` (empty when none).
  const std::vector<std::int64_t>& failed_slots(std::int64_t replica, std::int64_t stage = 0) const;
};

struct SyncConfig {
  double bucket_mb = 4.0;
  bool split_embedding = true;  // sync wte's LM-head part before the embedding backward
  bool pipeline = true;         // a bucket's all-reduce overlaps the next one's pre-sync
  bool operator==(const SyncConfig&) const = default;
};

struct DeadlineConfig {
  double collective_s = 30.0;  // every collective and point-to-point call
  double rendezvous_s = 60.0;  // store rendezvous and group construction
  double heartbeat_s = 5.0;    // a rank silent this long is declared dead
  double straggler_s = 10.0;   // after the first worker death, wait this long for the rest
  double checkpoint_s = 300.0; // a checkpoint's parts must all be written within this
  double lease_s = 0;          // each rank's lease on the store (elastic.recover); 0: 2 x heartbeat_s
  bool operator==(const DeadlineConfig&) const = default;
};

// The lease every rank holds on the store with elastic.recover (docs/launch.md,
// "Partitions"): deadline.lease_s, or 2 x heartbeat_s when that is 0. Twice
// the heartbeat: a host's loss is acted on once both its beats (heartbeat_s)
// and its leases are gone, and a lease that survives ten renewals does not
// lapse when a loaded host delays its heartbeat thread by a second or two.
double lease_seconds(const DeadlineConfig& d);
// How often a rank beats and renews its lease: heartbeat_s / 5, at least 50 ms.
double heartbeat_interval_s(const DeadlineConfig& d);

enum class NeedSource { kModelled, kMeasured };

// power.mode and the device model of the boost policy (docs/power.md). The
// model comes from configuration, identical on every rank, so that every rank
// computes the same plan.
struct PowerConfig {
  power::PowerMode mode = power::PowerMode::off;
  double tdp_w = 1000.0;    // a GPU's default limit: speed 1
  double max_frac = 1.3;    // per-GPU maximum limit = max_frac x tdp_w
  double headroom_w = 0.0;  // per domain, beyond tp x tdp_w
  double alpha = 0.65;      // speed = (limit / tdp_w)^alpha
  // The need a degraded replica is boosted to: the modelled one only, or
  // re-planned from the measured step times (power/measured_need.h).
  NeedSource need = NeedSource::kMeasured;
  double need_smoothing = 0.2;   // weight of one step's observation
  double need_tolerance = 0.05;  // re-plan beyond this relative change
  bool operator==(const PowerConfig&) const = default;
};

// In-job failure recovery (docs/train.md, "Failures and recovery").
struct ElasticConfig {
  bool recover = false;   // survivors of a worker death reconfigure and go on
  // Once every member is accounted for, the census taker waits this long
  // for deaths not yet in the store; 0: derived from the launcher's reap
  // interval and the store's round trip (elastic/membership.h), at most
  // kMaxDerivedSettleS.
  double settle_s = 0;
  std::int64_t max_recoveries = 8;  // then the job stops with a clear message
  // A lost slot's worker is started again after rejoin_after_s (the stand-in
  // for "the GPU is back") and rejoins at a step boundary.
  bool rejoin = false;
  double rejoin_after_s = 5.0;
  // A failure in-job recovery cannot handle (every holder of some units lost):
  // restart the workers from the newest checkpoint at the layout the
  // survivors allow, at most max_restarts times; or stop.
  FallbackPolicy fallback = FallbackPolicy::kCheckpoint;
  std::int64_t max_restarts = 3;
  // A rank slower than its TP peers by more than slow_threshold (relative)
  // in slow_steps consecutive steps is slow: its replica is laid out again
  // in-job with speed-weighted shares (parallel.speeds), and back once its
  // speed returns (train/slow_ranks.h).
  bool relayout = false;
  double slow_threshold = 0.2;
  std::int64_t slow_steps = 3;
  bool operator==(const ElasticConfig&) const = default;
};

// The longest settle wait the agreement derives when elastic.settle_s is 0.
inline constexpr double kMaxDerivedSettleS = 0.25;
// The longest the census taker may settle: elastic.settle_s, or the derived bound.
double settle_bound_s(const ElasticConfig& e);

// Failure injection for tests and demos: global rank `kill_rank` kills itself
// (SIGKILL) at the start of step `kill_at_step`. -1 = off.
struct TestConfig {
  std::int64_t kill_rank = -1;
  std::int64_t kill_at_step = -1;
  // "RANK@STEP:PHASE[:SIGNAL]; ...": each entry sends SIGNAL (KILL or STOP;
  // default KILL) to worker RANK in PHASE of step STEP (train/faults.h).
  std::string failures;
  std::int64_t chaos = 0;       // that many random failures, drawn from chaos_seed
  std::int64_t chaos_seed = 1;
  // A deliberate bug that --verify or the recovery proof must catch
  // (train/mutations.h); allowed only with NTP_TEST_MUTATIONS=1 in the
  // environment, so a real run can never carry one.
  std::int64_t repair_at_step = -1;  // with elastic.rejoin: restart lost workers once this step is logged
  std::string mutation;
  std::int64_t mutation_rank = -1;  // the rank that carries it; -1 = every rank
  bool operator==(const TestConfig&) const = default;
};

struct RunConfig {
  std::string dir;  // empty = runs/<UTC time stamp>
  std::int64_t trace_steps = 3;  // steps recorded in trace.json
  std::string resume;            // checkpoint folder to start from (ntp train --resume)
  bool operator==(const RunConfig&) const = default;
};

struct Config {
  ModelConfig model;
  DataConfig data;
  OptimConfig train;
  ParallelConfig parallel;
  SyncConfig sync;
  DeadlineConfig deadline;
  PowerConfig power;
  ElasticConfig elastic;
  TestConfig test;
  RunConfig run;
  bool operator==(const Config&) const = default;
};

// One documented key of the schema (the source of docs/config.md).
struct ConfigKey {
  std::string_view name;        // "train.lr"
  std::string_view type;        // "float", "integer", "string", "table", ...
  std::string_view meaning;
};
const std::vector<ConfigKey>& config_keys();

// Parses TOML text into `config` (only the keys present change). `source`
// names the text in errors: a file name or "--set".
void apply_toml(Config& config, std::string_view text, const std::string& source);

// Applies one `key=value` override. The value is parsed as TOML; a bare word
// that is not valid TOML is taken as a string (`--set data.order=sequential`).
void apply_override(Config& config, const std::string& assignment);

// Cross-key checks and file existence; throws ConfigError naming the key.
void validate(const Config& config);

// Defaults <- file (if not empty) <- overrides, then validate.
Config load_config(const std::string& path, const std::vector<std::string>& overrides);
// Defaults <- file, every key type-checked but nothing validated (no file
// need exist): the settings a finished run recorded, for tools that read it.
Config read_config_file(const std::string& path);

// The fully resolved configuration as TOML (every key, in schema order).
std::string to_toml(const Config& config);

// Clears the failures a run injects into itself (test.failures, test.chaos,
// test.kill_rank and their seeds/steps): a restart or a checkpoint of a run
// must not inject them again.
void drop_injected_failures(Config& config);

// The keys whose values differ between two configurations, in schema order,
// each as "key: <a's value> -> <b's value>".
std::vector<std::string> differing_keys(const Config& a, const Config& b);

}  // namespace ntp::train
