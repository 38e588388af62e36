#include "train/config.h"

#include "train/faults.h"
#include "train/mutations.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <set>
#include <sstream>
#include <utility>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <toml++/toml.h>

namespace ntp::train {
namespace {

// ---- enum names ----------------------------------------------------------

template <class E>
using Choices = std::vector<std::pair<std::string, E>>;

const Choices<model::Family> kFamilies = {{"gpt2", model::Family::kGpt2},
                                           {"llama", model::Family::kLlama}};
const Choices<DataOrder> kOrders = {{"shuffled", DataOrder::kShuffled},
                                    {"sequential", DataOrder::kSequential}};
const Choices<tensor::GemmBackend> kGemms = {{"onednn", tensor::GemmBackend::kOneDnn},
                                             {"openblas", tensor::GemmBackend::kOpenBlas}};
const Choices<tensor::Device> kDevices = {{"cpu", tensor::Device::kCpu},
                                          {"cuda", tensor::Device::kCuda}};
const Choices<tensor::Precision> kPrecisions = {{"fp32", tensor::Precision::kFp32},
                                               {"bf16", tensor::Precision::kBf16}};
const Choices<DataFormat> kFormats = {{"auto", DataFormat::kAuto},
                                      {"llmc", DataFormat::kLlmc},
                                      {"nanogpt", DataFormat::kNanogpt},
                                      {"text", DataFormat::kText}};
const Choices<LrSchedule> kSchedules = {{"cosine", LrSchedule::kCosine},
                                        {"constant", LrSchedule::kConstant}};
const Choices<NanPolicy> kNanPolicies = {{"stop", NanPolicy::kStop}, {"skip", NanPolicy::kSkip}};
const Choices<FallbackPolicy> kFallbacks = {{"checkpoint", FallbackPolicy::kCheckpoint},
                                            {"stop", FallbackPolicy::kStop}};
const Choices<BatchPolicy> kPolicies = {{"proportional", BatchPolicy::kProportional},
                                        {"fixed", BatchPolicy::kFixed},
                                        {"constant-global", BatchPolicy::kConstantGlobal}};
const Choices<Balance> kBalances = {{"work", Balance::kWork}, {"count", Balance::kCount}};
const Choices<power::PowerMode> kPowerModes = {{"off", power::PowerMode::off},
                                               {"simulated", power::PowerMode::simulated},
                                               {"nvml", power::PowerMode::nvml}};
const Choices<NeedSource> kNeedSources = {{"modelled", NeedSource::kModelled},
                                          {"measured", NeedSource::kMeasured}};

template <class E>
std::string name_of(const Choices<E>& choices, E value) {
  for (const auto& [name, v] : choices) {
    if (v == value) return name;
  }
  return "?";
}

template <class E>
std::string list_of(const Choices<E>& choices) {
  std::string out;
  for (const auto& [name, v] : choices) out += (out.empty() ? "" : " | ") + name;
  return out;
}

// A TOML basic string holding `text`.
std::string quote(const std::string& text) {
  std::string out = "\"";
  for (char ch : text) {
    if (ch == '"' || ch == '\\') out += '\\';
    out += ch;
  }
  return out + "\"";
}

// Shortest text that reads back as the same double, always with a '.' or
// an exponent so that TOML keeps it a float.
std::string float_text(double value) {
  char buffer[64];
  const auto result = std::to_chars(buffer, buffer + sizeof buffer, value);
  std::string text(buffer, result.ptr);
  if (text.find_first_of(".eEn") == std::string::npos) text += ".0";
  return text;
}

// ---- typed reads that name the key on failure ----------------------------

struct Where {
  const std::string& source;
  std::string_view key;
};

[[noreturn]] void fail(const Where& at, const std::string& what) {
  throw ConfigError(fmt::format("{}: {}: {}", at.source, at.key, what));
}

std::string type_name(const toml::node& node) {
  std::ostringstream out;
  out << node.type();
  return out.str();
}

std::int64_t read_int(const toml::node& node, const Where& at) {
  if (!node.is_integer()) fail(at, "expected an integer, got " + type_name(node));
  return node.as_integer()->get();
}

bool read_bool(const toml::node& node, const Where& at) {
  if (!node.is_boolean()) fail(at, "expected true or false, got " + type_name(node));
  return node.as_boolean()->get();
}

double read_float(const toml::node& node, const Where& at) {
  if (node.is_integer()) return static_cast<double>(node.as_integer()->get());
  if (!node.is_floating_point()) fail(at, "expected a number, got " + type_name(node));
  return node.as_floating_point()->get();
}

std::string read_string(const toml::node& node, const Where& at) {
  if (!node.is_string()) fail(at, "expected a string, got " + type_name(node));
  return node.as_string()->get();
}

template <class E>
E read_choice(const toml::node& node, const Where& at, const Choices<E>& choices) {
  const std::string word = read_string(node, at);
  for (const auto& [name, v] : choices) {
    if (name == word) return v;
  }
  fail(at, fmt::format("'{}' is not one of {}", word, list_of(choices)));
}

// A non-negative integer table key ("2"), or -1.
std::int64_t index_key(std::string_view text) {
  try {
    std::size_t used = 0;
    const std::int64_t value = std::stoll(std::string(text), &used);
    return used == text.size() && value >= 0 ? value : -1;
  } catch (const std::exception&) {
    return -1;
  }
}

void read_slots(const toml::node& node, const Where& at, const std::string& where,
                std::vector<std::int64_t>& out) {
  const toml::array* slots = node.as_array();
  if (slots == nullptr) fail(at, fmt::format("{}: expected an array of slots, got {}", where, type_name(node)));
  for (const toml::node& slot : *slots) {
    if (!slot.is_integer()) fail(at, fmt::format("{}: slots must be integers", where));
    out.push_back(slot.as_integer()->get());
  }
}

// {replica = [slots]} (stage 0: the spelling of a job without a pipeline) or
// {replica = {stage = [slots]}}.
std::map<ReplicaStage, std::vector<std::int64_t>> read_failed(const toml::node& node, const Where& at) {
  const toml::table* table = node.as_table();
  if (table == nullptr) {
    fail(at, "expected a table replica = [slots] or replica = {stage = [slots]}, got " + type_name(node));
  }
  std::map<ReplicaStage, std::vector<std::int64_t>> failed;
  for (const auto& [key, value] : *table) {
    const std::int64_t replica = index_key(key.str());
    if (replica < 0) fail(at, fmt::format("key '{}' is not a replica index", key.str()));
    const toml::table* stages = value.as_table();
    if (stages == nullptr) {
      read_slots(value, at, fmt::format("replica {}", replica), failed[{replica, 0}]);
      continue;
    }
    for (const auto& [stage_key, slots] : *stages) {
      const std::int64_t stage = index_key(stage_key.str());
      if (stage < 0) fail(at, fmt::format("replica {}: key '{}' is not a stage index", replica, stage_key.str()));
      read_slots(slots, at, fmt::format("replica {} stage {}", replica, stage), failed[{replica, stage}]);
    }
  }
  return failed;
}

// The TOML text of parallel.failed: replica = [slots] while every entry is of
// stage 0, replica = {stage = [slots]} otherwise.
std::string failed_text(const std::map<ReplicaStage, std::vector<std::int64_t>>& failed) {
  const bool staged =
      std::any_of(failed.begin(), failed.end(), [](const auto& entry) { return entry.first.stage != 0; });
  std::map<std::int64_t, std::vector<std::string>> by_replica;
  for (const auto& [at, slots] : failed) {
    const std::string list = fmt::format("[{}]", fmt::join(slots, ", "));
    by_replica[at.replica].push_back(staged ? fmt::format("{} = {}", at.stage, list) : list);
  }
  std::string text = "{";
  for (const auto& [replica, parts] : by_replica) {
    const std::string value = staged ? fmt::format("{{ {} }}", fmt::join(parts, ", ")) : parts.front();
    text += fmt::format("{} {} = {}", text.size() > 1 ? "," : "", replica, value);
  }
  return text + (text.size() > 1 ? " }" : "}");
}

// ---- the schema -----------------------------------------------------------

struct KeyDef {
  ConfigKey doc;
  std::function<void(Config&, const toml::node&, const Where&)> set;
  std::function<std::string(const Config&)> value;  // the TOML text of the current value
};

// A field accessor usable on const and non-const configs.
#define NTP_FIELD(expr) [](auto& c) -> auto& { return c.expr; }

// A key whose value is read by `read` and written back as TOML by `write`.
template <class Field, class Read, class Write>
KeyDef typed_key(std::string_view name, std::string_view type, std::string_view meaning,
                 Field field, Read read, Write write) {
  return {{name, type, meaning},
          [field, read](Config& c, const toml::node& n, const Where& at) { field(c) = read(n, at); },
          [field, write](const Config& c) { return write(field(c)); }};
}

template <class Field>
KeyDef int_key(std::string_view name, std::string_view meaning, Field field) {
  return typed_key(name, "integer", meaning, field, read_int,
                   [](std::int64_t v) { return std::to_string(v); });
}

template <class Field>
KeyDef bool_key(std::string_view name, std::string_view meaning, Field field) {
  return typed_key(name, "boolean", meaning, field, read_bool,
                   [](bool v) { return std::string(v ? "true" : "false"); });
}

template <class Field>
KeyDef float_key(std::string_view name, std::string_view meaning, Field field) {
  return typed_key(name, "float", meaning, field, read_float, float_text);
}

template <class Field>
KeyDef string_key(std::string_view name, std::string_view meaning, Field field) {
  return typed_key(name, "string", meaning, field, read_string, quote);
}

template <class E, class Field>
KeyDef choice_key(std::string_view name, std::string_view meaning, const Choices<E>& choices,
                  Field field) {
  return typed_key(
      name, "string", meaning, field,
      [&choices](const toml::node& n, const Where& at) { return read_choice(n, at, choices); },
      [&choices](E value) { return quote(name_of(choices, value)); });
}

KeyDef failed_key() {
  return {{"parallel.failed", "table",
           "failed slots per replica for a degraded start, e.g. {0 = [2]}; with parallel.pp > 1 per replica "
           "and stage, {0 = {1 = [2]}} (a plain list names stage 0); default {} (none)"},
          [](Config& c, const toml::node& n, const Where& at) { c.parallel.failed = read_failed(n, at); },
          [](const Config& c) { return failed_text(c.parallel.failed); }};
}

KeyDef speeds_key() {
  return {{"parallel.speeds", "string",
           "slot speeds per replica relative to a healthy GPU, \"R:s,s,...;R:...\" (one per slot); under "
           "balance = \"work\" a slot holds units in proportion to its speed; default \"\" (all 1.0)"},
          [](Config& c, const toml::node& n, const Where& at) {
            const std::string text = read_string(n, at);
            try {
              c.parallel.speeds = layout::parse_slot_speeds(text);
            } catch (const std::invalid_argument& e) {
              fail(at, e.what());
            }
          },
          [](const Config& c) { return quote(layout::slot_speeds_text(c.parallel.speeds)); }};
}

const std::vector<KeyDef>& schema() {
  static const std::vector<KeyDef> keys = {
      choice_key("model.family", "model architecture: gpt2 | llama", kFamilies, NTP_FIELD(model.family)),
      string_key("model.preset", "model preset: tiny | small | gpt2 (llama: llama-tiny | llama-small | llama-1b)",
                 NTP_FIELD(model.preset)),
      int_key("model.vocab", "vocabulary size; 0 = the preset's", NTP_FIELD(model.vocab)),
      int_key("model.layers", "transformer blocks; 0 = the preset's", NTP_FIELD(model.layers)),
      int_key("model.d_model", "hidden size; 0 = the preset's", NTP_FIELD(model.d_model)),
      int_key("model.heads", "attention heads; 0 = the preset's", NTP_FIELD(model.heads)),
      int_key("model.seq_len", "tokens per sequence; 0 = the preset's", NTP_FIELD(model.seq_len)),
      int_key("model.kv_heads", "Llama key/value heads (KV groups); 0 = the preset's", NTP_FIELD(model.kv_heads)),
      int_key("model.ffn_hidden", "Llama SwiGLU neurons per layer; 0 = the preset's",
              NTP_FIELD(model.ffn_hidden)),
      float_key("model.rope_theta", "Llama RoPE base (pair j turns by t theta^(-2j/head_dim))",
                NTP_FIELD(model.rope_theta)),
      float_key("model.norm_eps", "Llama RMSNorm epsilon", NTP_FIELD(model.norm_eps)),
      string_key("model.init_from",
                 "checkpoint to start from (gpt2: llm.c; llama: llama2.c); empty = random init",
                 NTP_FIELD(model.init_from)),
      int_key("model.threads", "kernel threads per rank; 0 = host cores / ranks on the host",
              NTP_FIELD(model.threads)),
      choice_key("model.gemm", "sgemm library: onednn | openblas", kGemms, NTP_FIELD(model.gemm)),
      choice_key("model.precision",
                 "GEMM inputs: fp32 | bf16 (bf16 weights and activations into every GEMM, fp32 accumulation, "
                 "fp32 master weights, gradients, optimizer, norms, softmax and loss)",
                 kPrecisions, NTP_FIELD(model.precision)),
      choice_key("model.device", "where each rank's forward and backward run: cpu | cuda (a GPU each)",
                 kDevices, NTP_FIELD(model.device)),
      bool_key("model.huge_pages", "buffers of 2 MiB or more on transparent huge pages (faster steps; on a "
               "VM a cold host can take seconds longer to start)", NTP_FIELD(model.huge_pages)),
      string_key("data.path", "text file (bytes) or token .bin (llm.c or nanoGPT); empty = built-in corpus",
                 NTP_FIELD(data.path)),
      choice_key("data.format",
                 "auto | llmc | nanogpt | text; auto: llm.c by its magic, another .bin as nanoGPT "
                 "raw uint16 (an odd size is an error), anything else as text",
                 kFormats, NTP_FIELD(data.format)),
      string_key("data.val_path", "validation tokens (read like data.path); empty = no validation loss",
                 NTP_FIELD(data.val_path)),
      choice_key("data.order", "sample order: shuffled | sequential (llm.c's)", kOrders,
                 NTP_FIELD(data.order)),
      int_key("train.steps", "optimizer steps", NTP_FIELD(train.steps)),
      int_key("train.global_batch", "sequences per step over the whole job",
              NTP_FIELD(train.global_batch)),
      int_key("train.micro_batch", "sequences per forward/backward pass of a replica",
              NTP_FIELD(train.micro_batch)),
      float_key("train.lr", "peak learning rate", NTP_FIELD(train.lr)),
      choice_key("train.lr_schedule", "cosine | constant", kSchedules,
                 NTP_FIELD(train.lr_schedule)),
      int_key("train.warmup_steps", "linear warm-up steps", NTP_FIELD(train.warmup_steps)),
      float_key("train.weight_decay", "AdamW decoupled weight decay (2-D weights)",
                NTP_FIELD(train.weight_decay)),
      float_key("train.beta1", "AdamW beta1", NTP_FIELD(train.beta1)),
      float_key("train.beta2", "AdamW beta2", NTP_FIELD(train.beta2)),
      float_key("train.eps", "AdamW epsilon", NTP_FIELD(train.eps)),
      choice_key("train.on_nan",
                 "a non-finite loss or gradient norm: stop (the run ends naming the step) | skip "
                 "(that step's update is dropped on every rank)",
                 kNanPolicies, NTP_FIELD(train.on_nan)),
      float_key("train.grad_clip", "global gradient-norm clip; 0 = off",
                NTP_FIELD(train.grad_clip)),
      int_key("train.seed", "seed of init and of the shuffled order", NTP_FIELD(train.seed)),
      int_key("train.checkpoint_every", "save a checkpoint every this many steps; 0 = not by step count",
              NTP_FIELD(train.checkpoint_every)),
      float_key("train.checkpoint_every_s",
                "save a checkpoint when this many seconds passed since the last; 0 = not by time",
                NTP_FIELD(train.checkpoint_every_s)),
      int_key("train.keep_checkpoints", "complete checkpoints kept (the newest); at least 1",
              NTP_FIELD(train.keep_checkpoints)),
      int_key("train.eval_every",
              "validation loss on data.val_path every this many steps and after the last; 0 = never",
              NTP_FIELD(train.eval_every)),
      int_key("train.eval_batches",
              "micro-batches (of train.micro_batch sequences) in one validation pass",
              NTP_FIELD(train.eval_batches)),
      int_key("parallel.tp", "base TP degree n: slots per replica", NTP_FIELD(parallel.tp)),
      int_key("parallel.dp", "DP replicas", NTP_FIELD(parallel.dp)),
      int_key("parallel.pp",
              "pipeline stages per replica, each a contiguous range of blocks on its own TP group of "
              "parallel.tp slots; 1 = no pipeline",
              NTP_FIELD(parallel.pp)),
      int_key("parallel.microbatches",
              "micro-batches per step of each replica, its share cut into this many of near-equal size; "
              "0 = micro-batches of train.micro_batch sequences",
              NTP_FIELD(parallel.microbatches)),
      failed_key(),
      int_key("parallel.min_tp", "replicas with fewer active slots are dropped",
              NTP_FIELD(parallel.min_tp)),
      choice_key("parallel.batch_policy", "proportional | fixed | constant-global", kPolicies,
                 NTP_FIELD(parallel.batch_policy)),
      int_key("parallel.align",
              "FFN neurons and vocabulary rows are sharded in blocks of up to this many units (GEMM widths); "
              "1 = one unit",
              NTP_FIELD(parallel.align)),
      choice_key("parallel.balance", "shares balance work (units / slot speed) | count (unit counts)", kBalances,
                 NTP_FIELD(parallel.balance)),
      speeds_key(),
      float_key("sync.bucket_mb", "gradient-sync bucket size in MiB", NTP_FIELD(sync.bucket_mb)),
      bool_key("sync.split_embedding",
               "sync the tied wte gradient's LM-head part as soon as the LM head's backward ends",
               NTP_FIELD(sync.split_embedding)),
      bool_key("sync.pipeline", "all-reduce a bucket while the next one's pre-sync runs",
               NTP_FIELD(sync.pipeline)),
      float_key("deadline.collective_s", "deadline of every collective",
                NTP_FIELD(deadline.collective_s)),
      float_key("deadline.rendezvous_s", "deadline of rendezvous and group creation",
                NTP_FIELD(deadline.rendezvous_s)),
      float_key("deadline.heartbeat_s", "silence after which a rank is declared dead",
                NTP_FIELD(deadline.heartbeat_s)),
      float_key("deadline.straggler_s",
                "after the first worker death, time the others get to exit before SIGTERM",
                NTP_FIELD(deadline.straggler_s)),
      float_key("deadline.checkpoint_s", "every part of a checkpoint must be written within this",
                NTP_FIELD(deadline.checkpoint_s)),
      float_key("deadline.lease_s",
                "each rank's lease on the store: a rank that cannot renew it stops (0: 2 x heartbeat_s)",
                NTP_FIELD(deadline.lease_s)),
      choice_key("power.mode", "off | simulated | nvml", kPowerModes, NTP_FIELD(power.mode)),
      float_key("power.tdp_w", "GPU default power limit (W): speed 1", NTP_FIELD(power.tdp_w)),
      float_key("power.max_frac", "per-GPU maximum limit as a multiple of power.tdp_w",
                NTP_FIELD(power.max_frac)),
      float_key("power.headroom_w", "extra power per TP domain beyond tp x power.tdp_w (W)",
                NTP_FIELD(power.headroom_w)),
      float_key("power.alpha", "speed-vs-power exponent: speed = (limit / tdp)^alpha",
                NTP_FIELD(power.alpha)),
      choice_key("power.need", "modelled | measured: the need a degraded replica is boosted to", kNeedSources,
                 NTP_FIELD(power.need)),
      float_key("power.need_smoothing", "weight of one step's measured need in the estimate, in (0, 1]",
                NTP_FIELD(power.need_smoothing)),
      float_key("power.need_tolerance", "re-plan when the measured need moves beyond this fraction",
                NTP_FIELD(power.need_tolerance)),
      bool_key("elastic.recover",
               "survivors of a worker death agree on a new membership and go on training",
               NTP_FIELD(elastic.recover)),
      float_key("elastic.settle_s",
                "once every member is accounted for, the census waits this long for deaths not yet in "
                "the store; 0 derives it from the launcher's reap interval and the store's round trip",
                NTP_FIELD(elastic.settle_s)),
      int_key("elastic.max_recoveries",
              "in-job recoveries allowed in one run; then the job stops with a clear message",
              NTP_FIELD(elastic.max_recoveries)),
      bool_key("elastic.rejoin",
               "a lost slot's worker is started again (after elastic.rejoin_after_s) and rejoins at a "
               "step boundary; the replica's TP degree goes back up",
               NTP_FIELD(elastic.rejoin)),
      float_key("elastic.rejoin_after_s", "how long after a worker's loss it is started again",
                NTP_FIELD(elastic.rejoin_after_s)),
      choice_key("elastic.fallback",
                 "a failure in-job recovery cannot handle: checkpoint (restart the workers from the "
                 "newest checkpoint at the layout the survivors allow) | stop",
                 kFallbacks, NTP_FIELD(elastic.fallback)),
      int_key("elastic.max_restarts", "restarts from a checkpoint allowed in one run",
              NTP_FIELD(elastic.max_restarts)),
      bool_key("elastic.relayout",
               "a rank measured slower than its TP peers is given a smaller shard in-job (parallel.speeds), "
               "and its old one back once its speed returns",
               NTP_FIELD(elastic.relayout)),
      float_key("elastic.slow_threshold",
                "a rank whose measured speed is off the layout's by more than this fraction is off",
                NTP_FIELD(elastic.slow_threshold)),
      int_key("elastic.slow_steps", "consecutive steps off before its replica is laid out again",
              NTP_FIELD(elastic.slow_steps)),
      int_key("test.repair_at_step",
              "with elastic.rejoin: start lost workers again once this step is logged, instead of "
              "after elastic.rejoin_after_s; -1 = off",
              NTP_FIELD(test.repair_at_step)),
      string_key("test.failures",
                 "failure injection: 'RANK@STEP:PHASE[:KILL|STOP]; ...' (phases: start, forward, "
                 "backward, sync, commit, optimizer, recovery, checkpoint)",
                 NTP_FIELD(test.failures)),
      int_key("test.chaos", "failure injection: this many random failures (test.chaos_seed)",
              NTP_FIELD(test.chaos)),
      int_key("test.chaos_seed", "seed of test.chaos", NTP_FIELD(test.chaos_seed)),
      string_key("test.mutation",
                 "a deliberate bug for the checkers' own tests (needs NTP_TEST_MUTATIONS=1): "
                 "ln_frozen | update_x1.01 | update_x1.03 | local_loss_scale | sample_twice | sample_skipped | "
                 "replicated_unsynced | unit_drift | skip_roll_forward",
                 NTP_FIELD(test.mutation)),
      int_key("test.mutation_rank", "the rank that carries test.mutation; -1 = every rank",
              NTP_FIELD(test.mutation_rank)),
      int_key("test.kill_rank", "failure injection: this global rank kills itself; -1 = off",
              NTP_FIELD(test.kill_rank)),
      int_key("test.kill_at_step", "failure injection: at the start of this step",
              NTP_FIELD(test.kill_at_step)),
      string_key("run.dir", "run directory; empty = runs/<UTC time>", NTP_FIELD(run.dir)),
      int_key("run.trace_steps", "steps recorded in trace.json", NTP_FIELD(run.trace_steps)),
      string_key("run.resume",
                 "checkpoint folder to start from (set by ntp train --resume); empty = a fresh start",
                 NTP_FIELD(run.resume)),
  };
  return keys;
}

#undef NTP_FIELD

const KeyDef* find_key(std::string_view name) {
  for (const KeyDef& key : schema()) {
    if (key.doc.name == name) return &key;
  }
  return nullptr;
}

bool is_section(std::string_view name) {
  const std::string prefix = std::string(name) + ".";
  return std::any_of(schema().begin(), schema().end(),
                     [&](const KeyDef& k) { return k.doc.name.starts_with(prefix); });
}

void apply_table(Config& config, const toml::table& root, const std::string& source) {
  for (const auto& [section_key, section_node] : root) {
    const std::string section(section_key.str());
    if (!is_section(section)) {
      throw ConfigError(fmt::format("{}: unknown key '{}'", source, section));
    }
    const toml::table* table = section_node.as_table();
    if (table == nullptr) {
      throw ConfigError(fmt::format("{}: {}: expected a table [{}]", source, section, section));
    }
    for (const auto& [leaf, node] : *table) {
      const std::string name = section + "." + std::string(leaf.str());
      const KeyDef* key = find_key(name);
      if (key == nullptr) throw ConfigError(fmt::format("{}: unknown key '{}'", source, name));
      key->set(config, node, Where{source, key->doc.name});
    }
  }
}

toml::table parse_text(std::string_view text, const std::string& source) {
  try {
    return toml::parse(text, source);
  } catch (const toml::parse_error& e) {
    throw ConfigError(fmt::format("{}:{}:{}: {}", source, e.source().begin.line,
                                  e.source().begin.column, e.description()));
  }
}

// ---- validation -----------------------------------------------------------

void require(bool ok, std::string_view key, const std::string& what) {
  if (!ok) throw ConfigError(fmt::format("{}: {}", key, what));
}

// An optimizer setting must be finite where the kernels use it, in float:
// nan passes no comparison's intent, and inf (or 1e300, inf as a float) trains
// on garbage or fails only once the workers run.
void require_finite(double value, std::string_view key, const std::string& what) {
  require(std::isfinite(static_cast<float>(value)), key,
          fmt::format("is {}, must be a finite number {} (as a float)", value, what));
}

// Durations and intervals, in seconds: finite and at most a week, so that
// every wait has an end and every conversion to milliseconds fits (inf
// overflowed it: an infinite wait, or a negative one that judged every
// heartbeat stale).
constexpr double kMaxSeconds = 7 * 24 * 3600.0;

void require_seconds(double value, std::string_view key, bool zero_allowed) {
  const bool in_range = std::isfinite(value) && (zero_allowed ? value >= 0 : value > 0) && value <= kMaxSeconds;
  require(in_range, key,
          fmt::format("is {}, must be a number of seconds in {}0, {}]", value, zero_allowed ? "[" : "(", kMaxSeconds));
}

void validate_model(const ModelConfig& m) {
  require(!m.preset.empty(), "model.preset", "must not be empty");
  require(m.vocab >= 0, "model.vocab", "must be >= 0");
  require(m.layers >= 0, "model.layers", "must be >= 0");
  require(m.d_model >= 0, "model.d_model", "must be >= 0");
  require(m.heads >= 0, "model.heads", "must be >= 0");
  require(m.seq_len >= 0, "model.seq_len", "must be >= 0");
  require(m.kv_heads >= 0, "model.kv_heads", "must be >= 0");
  require(m.ffn_hidden >= 0, "model.ffn_hidden", "must be >= 0");
  require(m.threads >= 0, "model.threads", "must be >= 0");
  require(m.precision == tensor::Precision::kFp32 || m.device == tensor::Device::kCpu, "model.precision",
          "\"bf16\" needs model.device = \"cpu\" (the CUDA kernels run fp32 GEMMs)");
  // The kernels run in float: the value must stay finite and positive there.
  for (const auto& [key, value] : {std::pair{"model.rope_theta", m.rope_theta}, std::pair{"model.norm_eps", m.norm_eps}}) {
    const float as_float = static_cast<float>(value);
    require(std::isfinite(as_float) && as_float > 0.0f, key,
            fmt::format("is {}, must be finite and > 0 (as a float)", value));
  }
  if (m.d_model > 0 && m.heads > 0) {
    require(m.d_model % m.heads == 0, "model.d_model",
            fmt::format("{} is not divisible by model.heads = {}", m.d_model, m.heads));
  }
  if (!m.init_from.empty()) {
    require(std::filesystem::is_regular_file(m.init_from), "model.init_from",
            fmt::format("'{}' is not a readable file", m.init_from));
  }
}

void validate_optim(const OptimConfig& t) {
  require(t.steps >= 1, "train.steps", "must be >= 1");
  require(t.global_batch >= 1, "train.global_batch", "must be >= 1");
  require(t.micro_batch >= 1, "train.micro_batch", "must be >= 1");
  require_finite(t.lr, "train.lr", "> 0");
  require(t.lr > 0, "train.lr", "must be > 0");
  require(t.warmup_steps >= 0, "train.warmup_steps", "must be >= 0");
  require_finite(t.weight_decay, "train.weight_decay", ">= 0");
  require(t.weight_decay >= 0, "train.weight_decay", "must be >= 0");
  require(t.beta1 >= 0 && t.beta1 < 1, "train.beta1", "must be in [0, 1)");
  require(t.beta2 >= 0 && t.beta2 < 1, "train.beta2", "must be in [0, 1)");
  require_finite(t.eps, "train.eps", "> 0");
  require(t.eps > 0, "train.eps", "must be > 0");
  require_finite(t.grad_clip, "train.grad_clip", ">= 0 (0 = off)");
  require(t.grad_clip >= 0, "train.grad_clip", "must be >= 0 (0 = off)");
  require(t.seed >= 0, "train.seed", "must be >= 0");
  require(t.eval_every >= 0, "train.eval_every", "must be >= 0 (0 = never)");
  require(t.eval_batches >= 1, "train.eval_batches", "must be >= 1");
}

void validate_parallel(const ParallelConfig& p, const OptimConfig& t) {
  require(p.tp >= 1, "parallel.tp", "must be >= 1");
  require(p.dp >= 1, "parallel.dp", "must be >= 1");
  require(p.min_tp >= 1 && p.min_tp <= p.tp, "parallel.min_tp",
          fmt::format("must be in [1, parallel.tp = {}]", p.tp));
  require(p.align >= 1, "parallel.align", "must be >= 1 (units per block; 1 = one unit)");
  require(p.pp >= 1, "parallel.pp", "must be >= 1 (pipeline stages per replica)");
  require(p.microbatches >= 0, "parallel.microbatches",
          "must be >= 0 (micro-batches per step; 0 = train.micro_batch sequences each)");
  for (const auto& [at, slots] : p.failed) {
    const std::int64_t replica = at.replica;
    require(replica < p.dp, "parallel.failed",
            fmt::format("replica {} does not exist (parallel.dp = {})", replica, p.dp));
    require(at.stage < p.pp, "parallel.failed",
            fmt::format("replica {}: stage {} does not exist (parallel.pp = {})", replica, at.stage, p.pp));
    const std::string where = p.pp > 1 ? fmt::format("replica {} stage {}", replica, at.stage)
                                       : fmt::format("replica {}", replica);
    std::set<std::int64_t> seen;
    for (std::int64_t slot : slots) {
      require(slot >= 0 && slot < p.tp, "parallel.failed",
              fmt::format("{}: slot {} is outside [0, parallel.tp = {})", where, slot, p.tp));
      require(seen.insert(slot).second, "parallel.failed", fmt::format("{}: slot {} listed twice", where, slot));
    }
  }
  // Slot speeds name a replica's slots without a stage; a pipeline's stages
  // are measured and balanced per stage, which is not built yet.
  require(p.pp == 1 || p.speeds.empty(), "parallel.speeds",
          fmt::format("is not supported with parallel.pp = {} > 1 yet; leave it empty", p.pp));
  try {
    layout::validate_slot_speeds(p.speeds, static_cast<int>(p.dp), static_cast<int>(p.tp));
  } catch (const std::invalid_argument& e) {
    require(false, "parallel.speeds", e.what());
  }
  std::int64_t training = 0;
  for (std::int64_t r = 0; r < p.dp; ++r) {
    if (p.trains(r)) ++training;
  }
  require(training >= 1, "parallel.failed",
          fmt::format("every replica has fewer than parallel.min_tp = {} active slots", p.min_tp));
  require(t.global_batch >= training, "train.global_batch",
          fmt::format("{} is smaller than the {} training replicas", t.global_batch, training));
}

void validate_power(const PowerConfig& p) {
  const auto finite = [](double x) { return std::isfinite(x); };
  require(finite(p.tdp_w) && p.tdp_w > 0, "power.tdp_w", "must be a finite number > 0");
  require(finite(p.max_frac) && p.max_frac >= 1, "power.max_frac", "must be a finite number >= 1");
  require(finite(p.headroom_w) && p.headroom_w >= 0, "power.headroom_w",
          "must be a finite number >= 0");
  require(finite(p.alpha) && p.alpha > 0, "power.alpha", "must be a finite number > 0");
  require(finite(p.need_smoothing) && p.need_smoothing > 0 && p.need_smoothing <= 1, "power.need_smoothing",
          "must be a number in (0, 1]");
  require(finite(p.need_tolerance) && p.need_tolerance >= 0, "power.need_tolerance",
          "must be a finite number >= 0");
}

// The timing of the leases (docs/launch.md, "Partitions"), with elastic.recover.
void validate_lease(const Config& c) {
  const DeadlineConfig& d = c.deadline;
  require_seconds(d.lease_s, "deadline.lease_s", true);
  if (!c.elastic.recover) return;
  const double lease = lease_seconds(d);
  require(lease >= d.heartbeat_s, "deadline.lease_s",
          fmt::format("is {} s, must be >= deadline.heartbeat_s ({} s): a rank's lease must not end before its "
                      "heartbeat is judged",
                      lease, d.heartbeat_s));
  require(heartbeat_interval_s(d) <= lease / 3, "deadline.lease_s",
          fmt::format("is {} s, must be >= 3 x the heartbeat interval (deadline.heartbeat_s / 5, at least 0.05 s: "
                      "{} s): a lease must span three renewals, so one lost or late renewal does not end it",
                      lease, 3 * heartbeat_interval_s(d)));
}

}  // namespace

bool eval_due(const OptimConfig& train, std::int64_t step) {
  if (train.eval_every <= 0) return false;
  return (step + 1) % train.eval_every == 0 || step + 1 == train.steps;
}

double lease_seconds(const DeadlineConfig& d) { return d.lease_s > 0 ? d.lease_s : 2 * d.heartbeat_s; }
double heartbeat_interval_s(const DeadlineConfig& d) { return std::max(0.05, d.heartbeat_s / 5); }
double settle_bound_s(const ElasticConfig& e) { return e.settle_s > 0 ? e.settle_s : kMaxDerivedSettleS; }

namespace {

// The worker processes of the job: the active slots of the training replicas.
std::int64_t job_rank_count(const ParallelConfig& p) {
  std::int64_t n = 0;
  for (std::int64_t r = 0; r < p.dp; ++r) {
    if (!p.trains(r)) continue;
    for (std::int64_t stage = 0; stage < p.pp; ++stage) n += static_cast<std::int64_t>(p.active_slots(r, stage).size());
  }
  return n;
}

void validate_rest(const Config& c) {
  require(std::isfinite(c.sync.bucket_mb) && c.sync.bucket_mb > 0 && c.sync.bucket_mb <= 1e6, "sync.bucket_mb",
          fmt::format("is {}, must be a number in (0, 1e6]", c.sync.bucket_mb));
  require_seconds(c.deadline.collective_s, "deadline.collective_s", false);
  require_seconds(c.deadline.rendezvous_s, "deadline.rendezvous_s", false);
  require_seconds(c.deadline.heartbeat_s, "deadline.heartbeat_s", false);
  require_seconds(c.deadline.straggler_s, "deadline.straggler_s", true);
  require(c.run.trace_steps >= 0, "run.trace_steps", "must be >= 0");
  require(c.train.checkpoint_every >= 0, "train.checkpoint_every", "must be >= 0");
  require_seconds(c.train.checkpoint_every_s, "train.checkpoint_every_s", true);
  require(c.train.keep_checkpoints >= 1, "train.keep_checkpoints", "must be >= 1");
  require_seconds(c.deadline.checkpoint_s, "deadline.checkpoint_s", false);
  require(c.elastic.max_restarts >= 0, "elastic.max_restarts", "must be >= 0");
  require_seconds(c.elastic.settle_s, "elastic.settle_s", true);
  require(c.elastic.max_recoveries >= 0, "elastic.max_recoveries", "must be >= 0");
  // The agreement after a failure must outlast a member still blocked in a
  // collective (up to collective_s) and the settle window; the launcher's
  // hang detection must not fire on a rank that only waits for its peers.
  // With leases it also waits, from the member's last renewal, for a silent
  // member's lease to end (lease_s), overlapping that wait.
  validate_lease(c);
  const double lease_wait = c.elastic.recover ? lease_seconds(c.deadline) : 0;
  const double settle = settle_bound_s(c.elastic);
  require(c.deadline.rendezvous_s >= std::max(c.deadline.collective_s, lease_wait) + 2 * settle,
          "deadline.rendezvous_s",
          fmt::format("must be >= max(deadline.collective_s, deadline.lease_s) + 2 x elastic.settle_s ({} s; a "
                      "derived settle counts as {} s): survivors must be able to wait out a member still blocked "
                      "in a collective, and a silent member's lease",
                      std::max(c.deadline.collective_s, lease_wait) + 2 * settle, kMaxDerivedSettleS));
  require(c.test.chaos >= 0, "test.chaos", "must be >= 0");
  require(!c.elastic.rejoin || c.elastic.recover, "elastic.rejoin", "needs elastic.recover = true");
  require(!c.elastic.relayout || c.elastic.recover, "elastic.relayout", "needs elastic.recover = true");
  require(c.elastic.slow_threshold > 0 && c.elastic.slow_threshold < 1, "elastic.slow_threshold",
          "must be in (0, 1)");
  require(c.elastic.slow_steps >= 1, "elastic.slow_steps", "must be >= 1");
  require_seconds(c.elastic.rejoin_after_s, "elastic.rejoin_after_s", true);
  require(c.test.repair_at_step < c.train.steps, "test.repair_at_step", "must be a step in [0, train.steps) or -1");
  if (!c.test.mutation.empty()) {
    require(parse_mutation(c.test.mutation) != Mutation::kNone, "test.mutation",
            fmt::format("unknown mutation '{}' ({})", c.test.mutation, mutation_list()));
    const char* allowed = std::getenv("NTP_TEST_MUTATIONS");
    require(allowed != nullptr && std::string(allowed) == "1", "test.mutation",
            "a deliberate bug for testing the checkers; refused unless NTP_TEST_MUTATIONS=1 is set");
  }
  std::vector<FaultSpec> faults;
  try {
    faults = parse_faults(c.test.failures);
  } catch (const std::invalid_argument& e) {
    throw ConfigError(fmt::format("test.failures: {}", e.what()));
  }
  const std::int64_t ranks = job_rank_count(c.parallel);
  for (const FaultSpec& f : faults) {
    require(f.rank < ranks, "test.failures",
            fmt::format("'{}': no such rank (the job has {} ranks)", to_string(f), ranks));
    require(f.step < c.train.steps, "test.failures",
            fmt::format("'{}': no such step (train.steps = {})", to_string(f), c.train.steps));
    require(f.phase != "validation" || eval_due(c.train, f.step), "test.failures",
            fmt::format("'{}': step {} has no validation pass (train.eval_every = {})", to_string(f), f.step,
                        c.train.eval_every));
  }
  require(c.test.kill_rank < ranks, "test.kill_rank",
          fmt::format("no such rank (the job has {} ranks)", ranks));
  require(c.test.kill_rank >= -1, "test.kill_rank", "must be a global rank or -1");
  require(c.test.kill_rank < 0 || (c.test.kill_at_step >= 0 && c.test.kill_at_step < c.train.steps),
          "test.kill_at_step", "must be a step in [0, train.steps) when test.kill_rank is set");
  if (!c.data.path.empty()) {
    require(std::filesystem::is_regular_file(c.data.path), "data.path",
            fmt::format("'{}' is not a readable file", c.data.path));
  }
  if (!c.data.val_path.empty()) {
    require(std::filesystem::is_regular_file(c.data.val_path), "data.val_path",
            fmt::format("'{}' is not a readable file", c.data.val_path));
  }
  // A validation file without passes, or passes without a file, would be ignored.
  require(c.data.val_path.empty() || c.train.eval_every > 0, "data.val_path",
          "needs train.eval_every > 0 (how often to evaluate)");
  require(c.train.eval_every == 0 || !c.data.val_path.empty(), "train.eval_every",
          "needs data.val_path (the validation tokens)");
}

// A key set away from its default that nothing reads in this configuration
// is an error, never silently ignored: it names the key that would use it.
void reject_unused(const Config& c) {
  const Config d;
  struct Dependent {
    std::string_view key;
    bool set;   // differs from its default
    bool used;  // read by this configuration
    std::string_view needs;
  };
  const bool power_on = c.power.mode != power::PowerMode::off;
  const Dependent dependents[] = {
      {"model.preset", c.model.preset != d.model.preset, c.model.init_from.empty(),
       "is unused with model.init_from (the checkpoint defines the model)"},
      {"model.kv_heads", c.model.kv_heads != d.model.kv_heads, c.model.family == model::Family::kLlama,
       "needs model.family = \"llama\""},
      {"model.ffn_hidden", c.model.ffn_hidden != d.model.ffn_hidden, c.model.family == model::Family::kLlama,
       "needs model.family = \"llama\""},
      {"model.rope_theta", c.model.rope_theta != d.model.rope_theta, c.model.family == model::Family::kLlama,
       "needs model.family = \"llama\""},
      {"model.norm_eps", c.model.norm_eps != d.model.norm_eps, c.model.family == model::Family::kLlama,
       "needs model.family = \"llama\""},
      {"test.kill_at_step", c.test.kill_at_step != d.test.kill_at_step, c.test.kill_rank >= 0,
       "needs test.kill_rank"},
      {"test.chaos_seed", c.test.chaos_seed != d.test.chaos_seed, c.test.chaos > 0, "needs test.chaos > 0"},
      {"test.mutation_rank", c.test.mutation_rank != d.test.mutation_rank, !c.test.mutation.empty(),
       "needs test.mutation"},
      {"test.repair_at_step", c.test.repair_at_step != d.test.repair_at_step, c.elastic.rejoin,
       "needs elastic.rejoin = true"},
      {"elastic.rejoin_after_s", c.elastic.rejoin_after_s != d.elastic.rejoin_after_s, c.elastic.rejoin,
       "needs elastic.rejoin = true"},
      {"elastic.settle_s", c.elastic.settle_s != d.elastic.settle_s, c.elastic.recover,
       "needs elastic.recover = true"},
      {"deadline.lease_s", c.deadline.lease_s != d.deadline.lease_s, c.elastic.recover,
       "needs elastic.recover = true"},
      {"elastic.max_recoveries", c.elastic.max_recoveries != d.elastic.max_recoveries, c.elastic.recover,
       "needs elastic.recover = true"},
      {"elastic.fallback", c.elastic.fallback != d.elastic.fallback, c.elastic.recover,
       "needs elastic.recover = true"},
      {"elastic.max_restarts", c.elastic.max_restarts != d.elastic.max_restarts, c.elastic.recover,
       "needs elastic.recover = true"},
      {"elastic.slow_threshold", c.elastic.slow_threshold != d.elastic.slow_threshold, c.elastic.relayout,
       "needs elastic.relayout = true"},
      {"elastic.slow_steps", c.elastic.slow_steps != d.elastic.slow_steps, c.elastic.relayout,
       "needs elastic.relayout = true"},
      {"power.tdp_w", c.power.tdp_w != d.power.tdp_w, power_on, "needs power.mode = \"simulated\" or \"nvml\""},
      {"power.max_frac", c.power.max_frac != d.power.max_frac, power_on,
       "needs power.mode = \"simulated\" or \"nvml\""},
      {"power.headroom_w", c.power.headroom_w != d.power.headroom_w, power_on,
       "needs power.mode = \"simulated\" or \"nvml\""},
      {"power.alpha", c.power.alpha != d.power.alpha, power_on, "needs power.mode = \"simulated\" or \"nvml\""},
      {"power.need", c.power.need != d.power.need, power_on, "needs power.mode = \"simulated\" or \"nvml\""},
      {"power.need_smoothing", c.power.need_smoothing != d.power.need_smoothing,
       power_on && c.power.need == NeedSource::kMeasured, "needs power.need = \"measured\" and power.mode on"},
      {"power.need_tolerance", c.power.need_tolerance != d.power.need_tolerance,
       power_on && c.power.need == NeedSource::kMeasured, "needs power.need = \"measured\" and power.mode on"},
      {"train.eval_batches", c.train.eval_batches != d.train.eval_batches, c.train.eval_every > 0,
       "needs train.eval_every > 0"},
  };
  for (const Dependent& k : dependents) {
    require(!k.set || k.used, k.key, fmt::format("is set but {}", k.needs));
  }
  const std::int64_t ranks = job_rank_count(c.parallel);
  require(c.test.mutation_rank < ranks, "test.mutation_rank",
          fmt::format("no such rank (the job has {} ranks)", ranks));
}

}  // namespace

std::string to_string(DataOrder order) { return name_of(kOrders, order); }
std::string to_string(DataFormat format) { return name_of(kFormats, format); }
std::string to_string(LrSchedule schedule) { return name_of(kSchedules, schedule); }
std::string to_string(BatchPolicy policy) { return name_of(kPolicies, policy); }
std::string to_string(Balance balance) { return name_of(kBalances, balance); }
std::string to_string(NanPolicy policy) { return name_of(kNanPolicies, policy); }
std::string to_string(FallbackPolicy policy) { return name_of(kFallbacks, policy); }

std::map<ReplicaStage, std::vector<std::int64_t>> failed_in_stage0(
    const std::map<std::int64_t, std::vector<std::int64_t>>& by_replica) {
  std::map<ReplicaStage, std::vector<std::int64_t>> failed;
  for (const auto& [replica, slots] : by_replica) failed[{replica, 0}] = slots;
  return failed;
}

const std::vector<std::int64_t>& ParallelConfig::failed_slots(std::int64_t replica, std::int64_t stage) const {
  static const std::vector<std::int64_t> none;
  const auto it = failed.find({replica, stage});
  return it == failed.end() ? none : it->second;
}

std::vector<std::int64_t> ParallelConfig::active_slots(std::int64_t replica, std::int64_t stage) const {
  const std::vector<std::int64_t>& lost = failed_slots(replica, stage);
  std::vector<std::int64_t> slots;
  for (std::int64_t s = 0; s < tp; ++s) {
    if (std::find(lost.begin(), lost.end(), s) == lost.end()) slots.push_back(s);
  }
  return slots;
}

std::int64_t ParallelConfig::least_active(std::int64_t replica) const {
  std::int64_t least = tp;
  for (std::int64_t stage = 0; stage < pp; ++stage) {
    least = std::min(least, static_cast<std::int64_t>(active_slots(replica, stage).size()));
  }
  return least;
}

const std::vector<ConfigKey>& config_keys() {
  static const std::vector<ConfigKey> keys = [] {
    std::vector<ConfigKey> out;
    for (const KeyDef& key : schema()) out.push_back(key.doc);
    return out;
  }();
  return keys;
}

void apply_toml(Config& config, std::string_view text, const std::string& source) {
  apply_table(config, parse_text(text, source), source);
}

void apply_override(Config& config, const std::string& assignment) {
  const std::size_t eq = assignment.find('=');
  if (eq == std::string::npos || eq == 0) {
    throw ConfigError(fmt::format("--set '{}': expected key=value", assignment));
  }
  const std::string key = assignment.substr(0, eq);
  const std::string value = assignment.substr(eq + 1);
  const std::string source = "--set " + key;
  toml::table table;
  try {
    table = toml::parse(key + " = " + value, source);
  } catch (const toml::parse_error&) {
    // Not TOML: take the value as a plain string (a bare word such as `sequential`).
    table = parse_text(key + " = " + quote(value), source);
  }
  apply_table(config, table, source);
}

void validate(const Config& config) {
  validate_model(config.model);
  validate_optim(config.train);
  validate_parallel(config.parallel, config.train);
  validate_power(config.power);
  validate_rest(config);
  reject_unused(config);
}

Config read_config_file(const std::string& path) {
  Config config;
  if (std::filesystem::is_directory(path)) throw ConfigError(fmt::format("{}: is a folder, not a config file", path));
  std::ifstream in(path);
  if (!in) throw ConfigError(fmt::format("{}: cannot open config file", path));
  std::stringstream text;
  text << in.rdbuf();
  apply_toml(config, text.str(), path);
  return config;
}

Config load_config(const std::string& path, const std::vector<std::string>& overrides) {
  Config config = path.empty() ? Config{} : read_config_file(path);
  for (const std::string& assignment : overrides) apply_override(config, assignment);
  try {
    validate(config);
  } catch (const ConfigError& e) {
    throw ConfigError((path.empty() ? std::string("config") : path) + ": " + e.what());
  }
  return config;
}

std::string to_toml(const Config& config) {
  std::string out = "# Resolved ntp train configuration: every key (see docs/config.md).\n";
  std::string section;
  for (const KeyDef& key : schema()) {
    const std::size_t dot = key.doc.name.find('.');
    if (key.doc.name.substr(0, dot) != section) {
      out += fmt::format("{}[{}]\n", section.empty() ? "" : "\n", key.doc.name.substr(0, dot));
      section = key.doc.name.substr(0, dot);
    }
    out += fmt::format("{} = {}\n", key.doc.name.substr(dot + 1), key.value(config));
  }
  return out;
}

std::vector<std::string> differing_keys(const Config& a, const Config& b) {
  std::vector<std::string> out;
  for (const KeyDef& key : schema()) {
    const std::string before = key.value(a);
    const std::string after = key.value(b);
    if (before != after) out.push_back(fmt::format("{}: {} -> {}", key.doc.name, before, after));
  }
  return out;
}

void drop_injected_failures(Config& config) {
  const TestConfig defaults;
  config.test.failures = defaults.failures;
  config.test.chaos = defaults.chaos;
  config.test.chaos_seed = defaults.chaos_seed;
  config.test.kill_rank = defaults.kill_rank;
  config.test.kill_at_step = defaults.kill_at_step;
}

}  // namespace ntp::train
