#include "test_scenarios.h"

namespace ntp::sim::testing {

Scenario small_scenario() {
  Scenario s;
  s.cluster.gpus = 256;
  s.cluster.domain_size = 8;
  s.model.layers = 8;
  s.model.hidden = 1536;
  s.model.heads = 24;
  s.model.ffn = 6144;
  s.model.vocab = 4800;
  s.model.seq_len = 2048;
  s.model.global_batch_tokens = 2048 * 64;  // 64 sequences: 2 microbatches per replica
  s.parallel.tp = 8;
  s.parallel.pp = 1;
  s.parallel.virtual_stages = 1;
  s.parallel.tp_step = 1;
  s.parallel.min_tp = 4;
  s.parallel.align = 1;  // one-unit cuts: 4800 rows in blocks of 64 would not split evenly at TP 8
  s.spares.domains = 0;
  s.policies.reconfig_s = 0;
  s.policies.rejoin_s = 0;
  s.run.duration_days = 30;
  s.run.seeds = 4;
  s.run.threads = 2;
  s.run.bucket_hours = 24;
  s.snapshot.placements = 200;
  validate(s);
  return s;
}

const char* small_scenario_toml() {
  return R"(
[cluster]
gpus = 256
domain_size = 8
[model]
layers = 8
hidden = 1536
heads = 24
ffn = 6144
vocab = 4800
seq_len = 2048
global_batch_tokens = 131072
[parallelism]
tp = 8
pp = 1
virtual_stages = 1
align = 1
[failures]
rate_per_gpu_day = 0.01
[run]
duration_days = 10
seeds = 3
bucket_hours = 24
[snapshot]
failed_fractions = [0.0, 0.01, 0.05]
placements = 20
)";
}

}  // namespace ntp::sim::testing
