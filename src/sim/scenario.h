#pragma once
// A simulator scenario: cluster, model, parallelism, failure model, policies,
// power, run length. Every field is documented with its unit in docs/sim.md.
// Plain data; parsing and validation live in scenario_toml.cpp.
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace ntp::sim {

struct ClusterSpec {
  int gpus = 32768;            // GPUs running the job
  int domain_size = 32;        // GPUs per NVLink (scale-up) domain
  double nvlink_gbps = 1800;   // GB/s per GPU, both directions together (vendor figure)
  double nic_gbps = 800;       // Gb/s per GPU (NIC line rate, one direction)
  double peak_tflops = 2250;   // dense BF16 TFLOP/s per GPU
  double tdp_w = 1000;         // W per GPU
};

struct ModelSpec {
  int layers = 100;
  int hidden = 20480;
  int heads = 128;
  int ffn = 0;                 // 0 = 4 * hidden
  int vocab = 131072;
  int seq_len = 16384;                    // tokens per sequence
  std::int64_t global_batch_tokens = 16777216;  // tokens per step (whole job)
  int micro_batch = 1;                    // sequences per microbatch
  int act_bytes = 2;                      // bytes per activation element (BF16)
  int grad_bytes = 2;                     // bytes per gradient element in the DP reduction
  int state_bytes = 12;                   // bytes of training state per parameter moved at a
                                          // reconfiguration (fp32 master weight + two Adam moments)
};

struct ParallelSpec {
  int tp = 32;
  int pp = 4;
  int dp = 0;              // 0 = derived: gpus / (tp * pp)
  int virtual_stages = 5;  // interleaved pipeline chunks per stage
  int tp_step = 1;         // a degraded TP group runs at a multiple of this (2: 32 -> 30 -> 28)
  int min_tp = 0;          // below this a TP group cannot train; 0 = ceil(tp / 2)
  int align = 64;          // FFN neurons and vocabulary rows are cut in blocks of this many
                           // (layout::JobConfig::align; heads stay whole); 1 = floor/ceil cut
};

struct EfficiencySpec {
  double gemm = 0.70;        // achieved fraction of peak FLOP/s in compute
  double nvlink = 0.80;      // achieved fraction of NVLink bandwidth in TP collectives
  double nic = 0.80;         // achieved fraction of NIC bandwidth in DP / PP traffic
  double tp_overlap = 0.5;   // fraction of TP all-reduce time hidden behind GEMMs
  double dp_overlap = 0.9;   // fraction of the gradient sync that overlaps backward at most
  int gemm_align_elements = 8;   // a shard whose GEMM width is not a multiple of this...
  double unaligned_gemm = 0.25;  // ...runs its GEMMs at this fraction of the aligned speed
};

enum class RepairKind { kFixed, kExponential, kUniform, kLognormal };

struct RepairSpec {
  RepairKind kind = RepairKind::kFixed;
  double a_hours = 1.0;  // fixed: hours; exponential/lognormal: mean; uniform: min
  double b = 0.0;        // uniform: max hours; lognormal: sigma of log(hours)
  double mean_hours() const;
};

enum class FailureDist { kExponential, kWeibull };

struct FailureSpec {
  double rate_per_gpu_day = 419.0 / (54.0 * 16384.0);  // Llama 3: 419 interruptions, 54 days, 16k GPUs
  double rate_multiplier = 1.0;
  FailureDist distribution = FailureDist::kExponential;
  double weibull_shape = 1.0;
  int blast_radius = 1;        // GPUs taken down per failure (aligned block); domain_size = whole domain
  double hardware_share = 0.78;
  RepairSpec hardware_repair{RepairKind::kFixed, 120.0, 0.0};
  RepairSpec software_repair{RepairKind::kFixed, 3.0, 0.0};
  std::string trace;           // CSV of failures (hours, gpu, repair hours); empty = sample
  double rate_per_gpu_hour() const { return rate_per_gpu_day * rate_multiplier / 24.0; }
  double mean_repair_hours() const;
};

// Fail-slow: a GPU that keeps running, slower (FALCON, arXiv 2410.12588).
enum class SlowdownKind { kFixed, kUniform, kChoice };

struct SlowdownSpec {
  SlowdownKind kind = SlowdownKind::kUniform;
  double min = 1.1;              // fixed: the factor; uniform: the range
  double max = 3.0;
  std::vector<double> factors;   // choice: factors and their probabilities (sum 1)
  std::vector<double> probs;
};

struct FailSlowSpec {
  double rate_per_gpu_day = 0.0;  // 0 = off
  SlowdownSpec slowdown;          // step-time factor of the slow GPU (> 1)
  RepairSpec duration{RepairKind::kUniform, 0.01, 10.0};  // hours until it is well again
  double rate_per_gpu_hour() const { return rate_per_gpu_day / 24.0; }
};

struct SpareSpec {
  int domains = 0;          // hot spare domains
  double swap_hours = 0.25; // time to swap a spare domain in
};

struct PowerSpec {
  double max_frac = 1.3;    // per-GPU cap as a fraction of TDP
  double alpha = 0.65;      // speed ∝ power^alpha
  double headroom_w = 0.0;  // W per domain above domain_size * TDP
};

enum class Policy { kDpDrop, kSpares, kCkptRestart, kNtp, kNtpPw };
inline constexpr int kPolicyCount = 5;
const char* policy_name(Policy p);
Policy policy_from_name(const std::string& name);  // throws std::invalid_argument

struct CheckpointSpec {
  double interval_hours = 0.0;  // 0 = optimal (Young/Daly: sqrt(2 * write * MTBF))
  double write_s = 60.0;        // blocking time to write one checkpoint
  double restart_s = 900.0;     // time from a failure to training again
};

struct PolicySpec {
  std::vector<Policy> compare{Policy::kDpDrop, Policy::kSpares, Policy::kCkptRestart,
                              Policy::kNtp, Policy::kNtpPw};
  bool pack = false;                // pack degraded domains into few replicas
  bool fixed_global_batch = false;  // pause rather than shrink the global batch
  // Pause per reconfiguration after a failure, and after a repair or swap:
  // a constant when set, else from the transition plans (reconfig_pause.h).
  std::optional<double> reconfig_s;
  std::optional<double> rejoin_s;
  double protocol_s = 10.0;  // fixed cost of a planned pause: detect, agree, rebuild the groups
  CheckpointSpec ckpt;
};

enum class Mode { kSnapshot, kTimeline };

struct RunSpec {
  Mode mode = Mode::kTimeline;
  double duration_days = 15.0;
  int seeds = 100;
  std::uint64_t seed = 1;
  int threads = 2;
  double bucket_hours = 6.0;
  double warmup_days = 0.0;  // failure process run this long before time 0 (warm start)
  std::vector<double> thresholds_percent;  // report the time with more than X % of GPUs failed
};

struct SnapshotSpec {
  std::vector<double> failed_fractions{0.0, 0.001, 0.002, 0.005, 0.01, 0.02, 0.05};
  int placements = 1000;
};

struct Scenario {
  ClusterSpec cluster;
  ModelSpec model;
  ParallelSpec parallel;
  EfficiencySpec efficiency;
  FailureSpec failures;
  FailSlowSpec failslow;
  SpareSpec spares;
  PowerSpec power;
  PolicySpec policies;
  RunSpec run;
  SnapshotSpec snapshot;

  // Derived shape (filled by validate()).
  int dp() const { return cluster.gpus / (parallel.tp * parallel.pp); }
  int groups() const { return cluster.gpus / parallel.tp; }             // TP groups in the job
  int domains() const { return cluster.gpus / cluster.domain_size; }    // job domains
  int groups_per_domain() const { return cluster.domain_size / parallel.tp; }
  int ffn() const { return model.ffn > 0 ? model.ffn : 4 * model.hidden; }
  int min_tp() const { return parallel.min_tp > 0 ? parallel.min_tp : (parallel.tp + 1) / 2; }
};

// Cross-field checks; throws std::invalid_argument naming the field.
void validate(const Scenario& s);

}  // namespace ntp::sim
