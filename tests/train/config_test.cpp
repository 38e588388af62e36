#include "train/config.h"

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include <gtest/gtest.h>

#include "tensor/gpu.h"
#include "train/model_setup.h"

namespace ntp::train {
namespace {

// Expects `fn` to throw a ConfigError whose message contains every `needle`.
template <class Fn>
void expect_error(Fn fn, std::initializer_list<std::string> needles) {
  try {
    fn();
    ADD_FAILURE() << "no ConfigError thrown; expected one naming " << *needles.begin();
  } catch (const ConfigError& e) {
    for (const std::string& needle : needles) {
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos)
          << "message '" << e.what() << "' does not name '" << needle << "'";
    }
  }
}

Config parsed(const std::string& text) {
  Config config;
  apply_toml(config, text, "run.toml");
  return config;
}

TEST(Config, DefaultsAreValid) { EXPECT_NO_THROW(validate(Config{})); }

TEST(Config, ParsesEveryKeyAndRoundTripsThroughResolvedToml) {
  const Config config = parsed(R"(
    [model]
    preset = "small"
    vocab = 256
    layers = 3
    d_model = 96
    heads = 6
    seq_len = 32
    threads = 2
    [data]
    order = "sequential"
    [train]
    steps = 7
    global_batch = 12
    micro_batch = 5
    lr = 1e-3
    lr_schedule = "constant"
    warmup_steps = 2
    weight_decay = 0.0
    beta1 = 0.8
    beta2 = 0.999
    eps = 1e-7
    grad_clip = 0
    seed = 42
    [parallel]
    tp = 4
    dp = 3
    failed = { 0 = [1], 2 = [0, 3] }
    min_tp = 2
    batch_policy = "constant-global"
    [sync]
    bucket_mb = 0.5
    [deadline]
    collective_s = 3
    rendezvous_s = 4.5
    heartbeat_s = 1
    straggler_s = 2
    [power]
    mode = "simulated"
    tdp_w = 700
    max_frac = 1.2
    headroom_w = 350.5
    alpha = 0.8
    [run]
    dir = "runs/x"
    trace_steps = 1
  )");
  EXPECT_EQ(config.model.preset, "small");
  EXPECT_EQ(config.model.d_model, 96);
  EXPECT_EQ(config.data.order, DataOrder::kSequential);
  EXPECT_DOUBLE_EQ(config.train.lr, 1e-3);
  EXPECT_DOUBLE_EQ(config.train.grad_clip, 0.0);
  EXPECT_EQ(config.parallel.batch_policy, BatchPolicy::kConstantGlobal);
  EXPECT_EQ(config.parallel.failed.at({2, 0}), (std::vector<std::int64_t>{0, 3}));
  EXPECT_EQ(config.parallel.active_slots(0), (std::vector<std::int64_t>{0, 2, 3}));
  EXPECT_EQ(config.parallel.active_slots(1), (std::vector<std::int64_t>{0, 1, 2, 3}));
  EXPECT_EQ(config.power.mode, power::PowerMode::simulated);
  EXPECT_DOUBLE_EQ(config.power.tdp_w, 700.0);
  EXPECT_DOUBLE_EQ(config.power.max_frac, 1.2);
  EXPECT_DOUBLE_EQ(config.power.headroom_w, 350.5);
  EXPECT_DOUBLE_EQ(config.power.alpha, 0.8);
  EXPECT_NO_THROW(validate(config));

  EXPECT_EQ(parsed(to_toml(config)), config);
  EXPECT_EQ(parsed(to_toml(Config{})), Config{});
}

TEST(Config, ResolvedTomlListsEveryKey) {
  const std::string text = to_toml(Config{});
  for (const ConfigKey& key : config_keys()) {
    const std::string name(key.name);
    const std::string leaf = name.substr(name.find('.') + 1);
    EXPECT_NE(text.find(leaf + " = "), std::string::npos) << name;
  }
}

TEST(Config, RecoveryAndFailureInjectionKeys) {
  Config config = parsed("[parallel]\ndp = 2\ntp = 2\n[elastic]\nrecover = true\nsettle_s = 0.25\n"
                         "[test]\nkill_rank = 3\nkill_at_step = 2\n");
  EXPECT_TRUE(config.elastic.recover);
  EXPECT_DOUBLE_EQ(config.elastic.settle_s, 0.25);
  EXPECT_EQ(config.test.kill_rank, 3);
  EXPECT_EQ(config.test.kill_at_step, 2);
  EXPECT_NO_THROW(validate(config));
  EXPECT_EQ(parsed(to_toml(config)), config);
  expect_error([] { parsed("[elastic]\nrecover = 1\n"); }, {"elastic.recover", "true or false"});
  config.test.kill_at_step = config.train.steps;
  expect_error([&] { validate(config); }, {"test.kill_at_step"});
  config.test.kill_at_step = 0;
  config.elastic.settle_s = -1;
  expect_error([&] { validate(config); }, {"elastic.settle_s"});
}

// Every key set away from its default is used, or the configuration is refused naming it.
TEST(Config, ASettingNothingReadsIsRefused) {
  const std::string init_from = std::string(NTP_SOURCE_DIR) + "/README.md";  // exists; never read here
  const std::vector<std::pair<std::string, std::string>> unused = {
      {"[model]\npreset = \"small\"\ninit_from = \"" + init_from + "\"\n", "model.preset"},
      {"[test]\nkill_at_step = 2\n", "test.kill_at_step"},
      {"[test]\nchaos_seed = 9\n", "test.chaos_seed"},
      {"[test]\nmutation_rank = 0\n", "test.mutation_rank"},
      {"[elastic]\nrecover = true\n[test]\nrepair_at_step = 1\n", "test.repair_at_step"},
      {"[elastic]\nrejoin_after_s = 2.0\n", "elastic.rejoin_after_s"},
      {"[elastic]\nsettle_s = 0.25\n", "elastic.settle_s"},
      {"[elastic]\nmax_recoveries = 2\n", "elastic.max_recoveries"},
      {"[power]\ntdp_w = 700\n", "power.tdp_w"},
      {"[power]\nmax_frac = 1.2\n", "power.max_frac"},
      {"[power]\nheadroom_w = 10\n", "power.headroom_w"},
      {"[power]\nalpha = 0.7\n", "power.alpha"},
      {"[train]\neval_batches = 2\n", "train.eval_batches"},
      {"[model]\nrope_theta = 500000.0\n", "model.rope_theta"},
      {"[model]\nnorm_eps = 1e-6\n", "model.norm_eps"},
      {"[test]\nkill_rank = 99\nkill_at_step = 1\n", "test.kill_rank"},
  };
  for (const auto& [text, key] : unused) {
    expect_error([&] { validate(parsed(text)); }, {key});
  }
  // The same keys with what uses them are accepted.
  const std::vector<std::string> used = {
      "[model]\ninit_from = \"" + init_from + "\"\n",
      "[test]\nkill_rank = 0\nkill_at_step = 2\n",
      "[test]\nchaos = 1\nchaos_seed = 9\n",
      "[elastic]\nrecover = true\nrejoin = true\nrejoin_after_s = 2.0\nsettle_s = 0.25\nmax_recoveries = 2\n"
      "[test]\nrepair_at_step = 1\n",
      "[power]\nmode = \"simulated\"\ntdp_w = 700\nmax_frac = 1.2\nheadroom_w = 10\nalpha = 0.7\n",
      "[model]\nfamily = \"llama\"\npreset = \"llama-tiny\"\nrope_theta = 500000.0\nnorm_eps = 1e-6\n",
  };
  for (const std::string& text : used) EXPECT_NO_THROW(validate(parsed(text))) << text;
}

TEST(Config, UnknownKeysAreNamed) {
  expect_error([] { parsed("[train]\nstepz = 3\n"); }, {"run.toml", "train.stepz", "unknown"});
  expect_error([] { parsed("[trian]\nsteps = 3\n"); }, {"run.toml", "trian"});
  expect_error([] { parsed("steps = 3\n"); }, {"run.toml", "steps"});
  expect_error([] { parsed("train = 3\n"); }, {"run.toml", "train"});
}

TEST(Config, BadValuesAreNamed) {
  expect_error([] { parsed("[train]\nsteps = \"ten\"\n"); }, {"run.toml", "train.steps", "integer"});
  expect_error([] { parsed("[train]\nsteps = 2.5\n"); }, {"train.steps"});
  expect_error([] { parsed("[train]\nlr = \"fast\"\n"); }, {"train.lr", "number"});
  expect_error([] { parsed("[data]\norder = \"random\"\n"); }, {"data.order", "random"});
  expect_error([] { parsed("[train]\nlr_schedule = \"step\"\n"); }, {"train.lr_schedule"});
  expect_error([] { parsed("[parallel]\nbatch_policy = \"even\"\n"); },
               {"parallel.batch_policy", "proportional"});
  expect_error([] { parsed("[power]\nmode = \"max\"\n"); }, {"power.mode"});
  expect_error([] { parsed("[parallel]\nfailed = [2]\n"); }, {"parallel.failed", "table"});
  expect_error([] { parsed("[parallel]\nfailed = { x = [2] }\n"); }, {"parallel.failed", "'x'"});
  expect_error([] { parsed("[parallel]\nfailed = { 0 = 2 }\n"); }, {"parallel.failed", "array"});
  expect_error([] { parsed("[parallel]\nfailed = { 0 = { y = [1] } }\n"); }, {"parallel.failed", "'y'", "stage"});
  expect_error([] { parsed("[parallel]\nfailed = { 0 = { 1 = 2 } }\n"); }, {"parallel.failed", "stage 1", "array"});
  expect_error([] { parsed("[train\nsteps = 2\n"); }, {"run.toml:1"});
}

// model.device parses like model.gemm. Whether this host can run "cuda" is the
// launcher's check (check_device), not validate()'s: ntp verify replays a cuda
// run on the CPU, on a host that may have no GPU.
TEST(Config, ModelDeviceIsCpuOrCuda) {
  EXPECT_EQ(Config{}.model.device, tensor::Device::kCpu);
  EXPECT_EQ(parsed("[model]\ndevice = \"cpu\"\n").model.device, tensor::Device::kCpu);
  Config config = parsed("[model]\ndevice = \"cuda\"\n");
  EXPECT_EQ(config.model.device, tensor::Device::kCuda);
  EXPECT_NO_THROW(validate(config));
  EXPECT_NE(to_toml(config).find("device = \"cuda\""), std::string::npos) << to_toml(config);
  EXPECT_EQ(parsed(to_toml(config)), config);
  Config overridden;
  apply_override(overridden, "model.device=cuda");
  EXPECT_EQ(overridden.model.device, tensor::Device::kCuda);
  expect_error([] { parsed("[model]\ndevice = \"gpu\"\n"); }, {"run.toml", "model.device", "'gpu'", "cpu | cuda"});
  expect_error([] { parsed("[model]\ndevice = 1\n"); }, {"run.toml", "model.device", "string"});
  expect_error([] {
    Config c;
    apply_override(c, "model.device=tpu");
  }, {"--set model.device", "'tpu'", "cpu | cuda"});
}

TEST(Config, ModelDeviceSelectsTheContext) {
  ModelConfig keys;
  EXPECT_FALSE(thread_setup(keys, 1).cuda);
  keys.device = tensor::Device::kCuda;
  EXPECT_TRUE(thread_setup(keys, 4).cuda);
  EXPECT_EQ(thread_setup(keys, 4).gpu_device, -1);  // LOCAL_RANK modulo the visible devices
}

// The launcher's check of model.device against the host, shown to fail in
// both ways a host cannot run "cuda".
TEST(Config, ModelDeviceCudaNeedsABuildWithCudaAndAVisibleGpu) {
  EXPECT_NO_THROW(check_device(ModelConfig{}));  // "cpu" makes no CUDA call
  EXPECT_NO_THROW(check_device(tensor::Device::kCpu, false, 0));
  EXPECT_NO_THROW(check_device(tensor::Device::kCuda, true, 1));
  EXPECT_NO_THROW(check_device(tensor::Device::kCuda, true, 8));
  expect_error([] { check_device(tensor::Device::kCuda, false, 0); }, {"model.device", "build has no CUDA"});
  expect_error([] { check_device(tensor::Device::kCuda, true, 0); },
               {"model.device", "no CUDA device visible (CUDA_VISIBLE_DEVICES"});
  // This host, whatever it has.
  ModelConfig cuda;
  cuda.device = tensor::Device::kCuda;
  if (!tensor::cuda_built()) {
    expect_error([&] { check_device(cuda); }, {"model.device", "build has no CUDA"});
  } else if (tensor::Gpu::count() == 0) {
    expect_error([&] { check_device(cuda); }, {"model.device", "no CUDA device visible"});
  } else {
    EXPECT_NO_THROW(check_device(cuda));
  }
}

TEST(Config, CrossKeyValidationNamesTheKey) {
  struct Case {
    std::string toml;
    std::string key;
  };
  const std::vector<Case> cases = {
      {"[train]\nsteps = 0", "train.steps"},
      {"[train]\nglobal_batch = 0", "train.global_batch"},
      {"[train]\nmicro_batch = 0", "train.micro_batch"},
      {"[train]\nlr = 0", "train.lr"},
      {"[train]\nbeta1 = 1.0", "train.beta1"},
      {"[train]\nbeta2 = -0.1", "train.beta2"},
      {"[train]\neps = 0", "train.eps"},
      {"[train]\ngrad_clip = -1", "train.grad_clip"},
      {"[train]\nwarmup_steps = -1", "train.warmup_steps"},
      {"[train]\nweight_decay = -1", "train.weight_decay"},
      {"[train]\nseed = -5", "train.seed"},
      {"[model]\nd_model = 100\nheads = 3", "model.d_model"},
      {"[model]\nlayers = -1", "model.layers"},
      {"[model]\nthreads = -1", "model.threads"},
      {"[model]\nfamily = \"llama\"\nrope_theta = 0", "model.rope_theta"},
      {"[model]\nfamily = \"llama\"\nrope_theta = -10000.0", "model.rope_theta"},
      {"[model]\nfamily = \"llama\"\nrope_theta = inf", "model.rope_theta"},
      {"[model]\nfamily = \"llama\"\nrope_theta = 1e39", "model.rope_theta"},  // inf as a float
      {"[model]\nfamily = \"llama\"\nnorm_eps = nan", "model.norm_eps"},
      {"[model]\nfamily = \"llama\"\nnorm_eps = 0.0", "model.norm_eps"},
      {"[model]\nfamily = \"llama\"\nnorm_eps = 1e-50", "model.norm_eps"},  // 0 as a float
      {"[model]\npreset = \"\"", "model.preset"},
      {"[model]\ninit_from = \"/nonexistent/gpt2.bin\"", "model.init_from"},
      {"[data]\npath = \"/nonexistent/corpus.txt\"", "data.path"},
      {"[parallel]\ntp = 0", "parallel.tp"},
      {"[parallel]\ndp = 0", "parallel.dp"},
      {"[parallel]\ntp = 4\nmin_tp = 5", "parallel.min_tp"},
      {"[parallel]\ntp = 4\ndp = 2\nfailed = { 2 = [0] }", "parallel.failed"},
      {"[parallel]\ntp = 4\nfailed = { 0 = [4] }", "parallel.failed"},
      {"[parallel]\ntp = 4\nfailed = { 0 = [1, 1] }", "parallel.failed"},
      {"[parallel]\ntp = 2\nmin_tp = 2\nfailed = { 0 = [1] }", "parallel.failed"},
      {"[parallel]\npp = 0", "parallel.pp"},
      {"[parallel]\npp = 2\nfailed = { 0 = { 2 = [0] } }", "parallel.failed"},
      {"[parallel]\npp = 2\ntp = 2\nfailed = { 0 = { 1 = [2] } }", "parallel.failed"},
      {"[parallel]\npp = 2\ntp = 2\nmin_tp = 2\nfailed = { 0 = { 1 = [0] } }", "parallel.failed"},
      {"[parallel]\npp = 2\ntp = 2\nspeeds = \"0:1,0.5\"", "parallel.speeds"},
      {"[parallel]\ndp = 3\n[train]\nglobal_batch = 2", "train.global_batch"},
      {"[sync]\nbucket_mb = 0", "sync.bucket_mb"},
      {"[deadline]\ncollective_s = 0", "deadline.collective_s"},
      {"[deadline]\nrendezvous_s = -1", "deadline.rendezvous_s"},
      {"[deadline]\nheartbeat_s = 0", "deadline.heartbeat_s"},
      {"[deadline]\nstraggler_s = -1", "deadline.straggler_s"},
      {"[run]\ntrace_steps = -1", "run.trace_steps"},
      {"[power]\ntdp_w = 0", "power.tdp_w"},
      {"[power]\ntdp_w = inf", "power.tdp_w"},
      {"[power]\nmax_frac = 0.9", "power.max_frac"},
      {"[power]\nheadroom_w = -1", "power.headroom_w"},
      {"[power]\nheadroom_w = nan", "power.headroom_w"},
      {"[power]\nalpha = 0", "power.alpha"},
      // Non-finite or float-overflowing optimizer settings (inf once failed
      // only after training, as "metrics: field 'lr' has the wrong type").
      {"[train]\nlr = inf", "train.lr"},
      {"[train]\nlr = 1e300", "train.lr"},
      {"[train]\nweight_decay = inf", "train.weight_decay"},
      {"[train]\neps = nan", "train.eps"},
      {"[train]\ngrad_clip = inf", "train.grad_clip"},
      // Durations past a week, inf included (inf once overflowed to a negative
      // heartbeat age limit that judged every rank stale).
      {"[deadline]\nheartbeat_s = inf", "deadline.heartbeat_s"},
      {"[deadline]\nrendezvous_s = inf", "deadline.rendezvous_s"},
      {"[deadline]\ncheckpoint_s = 1e300", "deadline.checkpoint_s"},
      {"[deadline]\nstraggler_s = nan", "deadline.straggler_s"},
      {"[deadline]\ncollective_s = 604801", "deadline.collective_s"},
      {"[train]\ncheckpoint_every_s = inf", "train.checkpoint_every_s"},
      {"[elastic]\nsettle_s = inf", "elastic.settle_s"},
      {"[elastic]\nrejoin_after_s = 1e20", "elastic.rejoin_after_s"},
      {"[sync]\nbucket_mb = inf", "sync.bucket_mb"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.toml);
    const Config config = parsed(c.toml);
    expect_error([&] { validate(config); }, {c.key});
  }
}

TEST(Config, DroppedReplicasDoNotCountAgainstTheBatch) {
  // Replica 1 keeps 1 of 4 slots < min_tp 2: dropped, so 1 sequence suffices.
  const Config config = parsed(
      "[parallel]\ntp = 4\ndp = 2\nmin_tp = 2\nfailed = { 1 = [0, 1, 2] }\n"
      "[train]\nglobal_batch = 1\n");
  EXPECT_NO_THROW(validate(config));
}

TEST(Config, OverridesParseAsToml) {
  Config config;
  apply_override(config, "parallel.failed={0=[2]}");
  apply_override(config, "train.lr=1e-2");
  apply_override(config, "data.order=sequential");
  apply_override(config, "parallel.batch_policy=\"fixed\"");
  apply_override(config, "run.dir=runs/a b");
  EXPECT_EQ(config.parallel.failed.at({0, 0}), (std::vector<std::int64_t>{2}));
  EXPECT_DOUBLE_EQ(config.train.lr, 1e-2);
  EXPECT_EQ(config.data.order, DataOrder::kSequential);
  EXPECT_EQ(config.parallel.batch_policy, BatchPolicy::kFixed);
  EXPECT_EQ(config.run.dir, "runs/a b");
  // A later override replaces the whole table.
  apply_override(config, "parallel.failed={1=[0,3]}");
  EXPECT_EQ(config.parallel.failed.count({0, 0}), 0u);

  expect_error([&] { apply_override(config, "train.stepz=3"); }, {"--set", "train.stepz"});
  expect_error([&] { apply_override(config, "train.steps=many"); }, {"--set", "train.steps"});
  expect_error([&] { apply_override(config, "train.steps"); }, {"--set", "key=value"});
}

TEST(Config, FailedSlotsNameTheirStageInAPipeline) {
  const Config config = parsed("[parallel]\npp = 3\ntp = 4\ndp = 2\nfailed = { 0 = { 1 = [2], 2 = [0, 3] }, 1 = [1] }\n");
  EXPECT_EQ(config.parallel.pp, 3);
  EXPECT_EQ(config.parallel.failed_slots(0, 1), (std::vector<std::int64_t>{2}));
  EXPECT_EQ(config.parallel.failed_slots(0, 2), (std::vector<std::int64_t>{0, 3}));
  EXPECT_EQ(config.parallel.failed_slots(0, 0), (std::vector<std::int64_t>{}));
  EXPECT_EQ(config.parallel.failed_slots(1, 0), (std::vector<std::int64_t>{1}));  // a plain list: stage 0
  EXPECT_EQ(config.parallel.active_slots(0, 2), (std::vector<std::int64_t>{1, 2}));
  EXPECT_EQ(config.parallel.least_active(0), 2);  // the slowest stage
  EXPECT_EQ(config.parallel.least_active(1), 3);
  // The TOML written back reads as the same configuration, in both spellings.
  const std::string text = to_toml(config);
  EXPECT_NE(text.find("failed = { 0 = { 1 = [2], 2 = [0, 3] }, 1 = { 0 = [1] } }"), std::string::npos) << text;
  EXPECT_EQ(parsed(text).parallel, config.parallel);
  const Config flat = parsed("[parallel]\ntp = 4\ndp = 2\nfailed = { 1 = [1] }\n");
  EXPECT_NE(to_toml(flat).find("failed = { 1 = [1] }"), std::string::npos) << to_toml(flat);
  EXPECT_EQ(parsed(to_toml(flat)).parallel, flat.parallel);
}

// A fault in the validation pass needs a step that has one (train.eval_every
// 2 of 6 steps: after steps 1, 3 and 5).
TEST(Config, AValidationFaultNeedsAStepWithAValidationPass) {
  const std::filesystem::path val = std::filesystem::temp_directory_path() / "ntp_config_validation_fault.txt";
  std::ofstream(val) << "some text";
  const std::string job = "[parallel]\ntp = 2\ndp = 2\n[train]\nsteps = 6\neval_every = 2\n[data]\nval_path = \"" +
                          val.string() + "\"\n[test]\n";
  EXPECT_NO_THROW(validate(parsed(job + "failures = \"3@3:validation\"\n")));
  expect_error([&] { validate(parsed(job + "failures = \"3@2:validation\"\n")); },
               {"test.failures", "'3@2:validation", "step 2 has no validation pass (train.eval_every = 2)"});
  std::filesystem::remove(val);
}

// A rank of a later stage is a rank of the job: dp 2 x pp 3 x tp 4 with one
// failed slot has 23 ranks (0-22).
TEST(Config, InjectedFailuresMayNameARankOfAnyStage) {
  const std::string job = "[parallel]\npp = 3\ntp = 4\ndp = 2\nfailed = { 0 = { 1 = [2] } }\n";
  EXPECT_NO_THROW(validate(parsed(job + "[test]\nfailures = \"22@1:forward\"\n")));
  expect_error([&] { validate(parsed(job + "[test]\nfailures = \"23@1:forward\"\n")); },
               {"test.failures", "no such rank (the job has 23 ranks)"});
  expect_error([&] { validate(parsed(job + "[test]\nkill_rank = 23\nkill_at_step = 1\n")); },
               {"test.kill_rank", "23 ranks"});
}

TEST(Config, LoadConfigAppliesFileThenOverridesThenValidates) {
  const auto dir = std::filesystem::temp_directory_path() / "ntp_config_test";
  std::filesystem::create_directories(dir);
  const std::string path = (dir / "run.toml").string();
  std::ofstream(path) << "[train]\nsteps = 5\n[parallel]\ntp = 4\ndp = 2\n";
  const Config config = load_config(path, {"train.steps=9", "parallel.failed={0=[2]}"});
  EXPECT_EQ(config.train.steps, 9);
  EXPECT_EQ(config.parallel.active_slots(0).size(), 3u);
  expect_error([&] { load_config(path, {"parallel.failed={5=[0]}"}); },
               {path, "parallel.failed", "replica 5"});
  expect_error([&] { load_config((dir / "missing.toml").string(), {}); }, {"missing.toml"});
  std::ofstream(path) << "[train]\nsteps = 5\nbogus = 1\n";
  expect_error([&] { load_config(path, {}); }, {path, "train.bogus"});
  std::filesystem::remove_all(dir);
}

TEST(Config, DocsListEveryKey) {
  std::ifstream in(std::string(NTP_SOURCE_DIR) + "/docs/config.md");
  ASSERT_TRUE(in) << "docs/config.md is missing";
  std::stringstream text;
  text << in.rdbuf();
  for (const ConfigKey& key : config_keys()) {
    EXPECT_NE(text.str().find("`" + std::string(key.name) + "`"), std::string::npos)
        << key.name << " is not documented in docs/config.md";
  }
}

}  // namespace
}  // namespace ntp::train

// A checkpoint or a restart of a run with injected failures keeps none of
// them, and what is left still validates (a seed without its failures would not).
TEST(Config, DroppingInjectedFailuresLeavesAValidConfig) {
  ntp::train::Config c = ntp::train::load_config(
      "", {"parallel.tp=2", "parallel.dp=2", "train.steps=8", "test.chaos=2", "test.chaos_seed=9",
           "test.kill_rank=1", "test.kill_at_step=3", "test.failures=\"0@2:start\""});
  ntp::train::drop_injected_failures(c);
  EXPECT_EQ(c, ntp::train::load_config("", {"parallel.tp=2", "parallel.dp=2", "train.steps=8"}));
  EXPECT_NO_THROW(ntp::train::validate(c));
  c.test.chaos_seed = 9;  // the seed alone is refused: shows the check above can fail
  EXPECT_THROW(ntp::train::validate(c), ntp::train::ConfigError);
}
