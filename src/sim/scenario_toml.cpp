// TOML -> Scenario with strict checking (see scenario_toml.h, docs/sim.md).
#include "sim/scenario_toml.h"

#include <algorithm>
#include <cmath>
#include <fstream>
#include <initializer_list>
#include <limits>
#include <set>
#include <sstream>
#include <stdexcept>

namespace ntp::sim {
namespace {

[[noreturn]] void fail(const std::string& source, const std::string& key, const std::string& what) {
  throw std::invalid_argument(source + ": " + key + ": " + what);
}

// One table of the scenario. Every read marks its key as known; finish()
// rejects the keys nobody read, so a typo never passes silently.
class Section {
 public:
  Section(const toml::table* table, std::string path, std::string source)
      : table_(table), path_(std::move(path)), source_(std::move(source)) {}

  std::string key_path(const std::string& key) const {
    return path_.empty() ? key : path_ + "." + key;
  }

  const toml::node* get(const std::string& key) {
    seen_.insert(key);
    return table_ ? table_->get(key) : nullptr;
  }

  double number(const std::string& key, double def, double lo, double hi) {
    const toml::node* n = get(key);
    if (!n) return def;
    double v = 0.0;
    if (auto i = n->value_exact<std::int64_t>()) {
      v = static_cast<double>(*i);
    } else if (auto d = n->value_exact<double>()) {
      v = *d;
    } else {
      fail(source_, key_path(key), "expected a number");
    }
    if (!std::isfinite(v) || v < lo || v > hi) {
      std::ostringstream os;
      os << "value " << v << " is outside [" << lo << ", " << hi << "]";
      fail(source_, key_path(key), os.str());
    }
    return v;
  }

  std::int64_t integer(const std::string& key, std::int64_t def, std::int64_t lo, std::int64_t hi) {
    const toml::node* n = get(key);
    if (!n) return def;
    auto i = n->value_exact<std::int64_t>();
    if (!i) fail(source_, key_path(key), "expected an integer");
    if (*i < lo || *i > hi) {
      fail(source_, key_path(key), "value " + std::to_string(*i) + " is outside [" +
                                       std::to_string(lo) + ", " + std::to_string(hi) + "]");
    }
    return *i;
  }

  int small_int(const std::string& key, int def, int lo, int hi) {
    return static_cast<int>(integer(key, def, lo, hi));
  }

  bool boolean(const std::string& key, bool def) {
    const toml::node* n = get(key);
    if (!n) return def;
    auto b = n->value_exact<bool>();
    if (!b) fail(source_, key_path(key), "expected true or false");
    return *b;
  }

  std::string word(const std::string& key, const std::string& def,
                   std::initializer_list<const char*> choices) {
    const toml::node* n = get(key);
    if (!n) return def;
    auto s = n->value_exact<std::string>();
    if (!s) fail(source_, key_path(key), "expected a string");
    std::string list;
    for (const char* c : choices) {
      if (*s == c) return *s;
      list += std::string(list.empty() ? "" : ", ") + c;
    }
    fail(source_, key_path(key), "'" + *s + "' is not one of: " + list);
  }

  std::string text(const std::string& key) {
    const toml::node* n = get(key);
    if (!n) return {};
    auto s = n->value_exact<std::string>();
    if (!s) fail(source_, key_path(key), "expected a string");
    return *s;
  }

  const toml::array* array(const std::string& key) {
    const toml::node* n = get(key);
    if (!n) return nullptr;
    if (!n->is_array()) fail(source_, key_path(key), "expected an array");
    return n->as_array();
  }

  Section sub(const std::string& key) {
    const toml::node* n = get(key);
    if (n && !n->is_table()) fail(source_, key_path(key), "expected a table");
    return Section(n ? n->as_table() : nullptr, key_path(key), source_);
  }

  const std::string& source() const { return source_; }

  void finish() const {
    if (!table_) return;
    for (const auto& [k, v] : *table_) {
      const std::string key(k.str());
      if (!seen_.count(key)) fail(source_, key_path(key), "unknown key");
    }
  }

 private:
  const toml::table* table_;
  std::string path_;
  std::string source_;
  std::set<std::string> seen_;
};

constexpr double kInf = std::numeric_limits<double>::infinity();
constexpr int kMaxInt = std::numeric_limits<int>::max();

ClusterSpec read_cluster(Section s) {
  ClusterSpec c;
  c.gpus = s.small_int("gpus", c.gpus, 1, 10'000'000);
  c.domain_size = s.small_int("domain_size", c.domain_size, 1, 4096);
  c.nvlink_gbps = s.number("nvlink_gbps", c.nvlink_gbps, 1e-3, kInf);
  c.nic_gbps = s.number("nic_gbps", c.nic_gbps, 1e-3, kInf);
  c.peak_tflops = s.number("peak_tflops", c.peak_tflops, 1e-3, kInf);
  c.tdp_w = s.number("tdp_w", c.tdp_w, 1e-3, kInf);
  s.finish();
  return c;
}

ModelSpec read_model(Section s) {
  ModelSpec m;
  m.layers = s.small_int("layers", m.layers, 1, 100000);
  m.hidden = s.small_int("hidden", m.hidden, 1, kMaxInt);
  m.heads = s.small_int("heads", m.heads, 1, kMaxInt);
  m.ffn = s.small_int("ffn", m.ffn, 0, kMaxInt);
  m.vocab = s.small_int("vocab", m.vocab, 1, kMaxInt);
  m.seq_len = s.small_int("seq_len", m.seq_len, 1, kMaxInt);
  m.global_batch_tokens =
      s.integer("global_batch_tokens", m.global_batch_tokens, 1, std::int64_t{1} << 50);
  m.micro_batch = s.small_int("micro_batch", m.micro_batch, 1, kMaxInt);
  m.act_bytes = s.small_int("act_bytes", m.act_bytes, 1, 16);
  m.grad_bytes = s.small_int("grad_bytes", m.grad_bytes, 1, 16);
  m.state_bytes = s.small_int("state_bytes", m.state_bytes, 1, 64);
  s.finish();
  return m;
}

ParallelSpec read_parallel(Section s) {
  ParallelSpec p;
  p.tp = s.small_int("tp", p.tp, 1, 4096);
  p.pp = s.small_int("pp", p.pp, 1, 100000);
  p.dp = s.small_int("dp", p.dp, 0, kMaxInt);
  p.virtual_stages = s.small_int("virtual_stages", p.virtual_stages, 1, 100000);
  p.tp_step = s.small_int("tp_step", p.tp_step, 1, 4096);
  p.min_tp = s.small_int("min_tp", p.min_tp, 0, 4096);
  p.align = s.small_int("align", p.align, 1, 1 << 20);
  s.finish();
  return p;
}

EfficiencySpec read_efficiency(Section s) {
  EfficiencySpec e;
  e.gemm = s.number("gemm", e.gemm, 1e-6, 1.0);
  e.nvlink = s.number("nvlink", e.nvlink, 1e-6, 1.0);
  e.nic = s.number("nic", e.nic, 1e-6, 1.0);
  e.tp_overlap = s.number("tp_overlap", e.tp_overlap, 0.0, 1.0);
  e.dp_overlap = s.number("dp_overlap", e.dp_overlap, 0.0, 1.0);
  e.gemm_align_elements = s.small_int("gemm_align_elements", e.gemm_align_elements, 1, 1 << 20);
  e.unaligned_gemm = s.number("unaligned_gemm", e.unaligned_gemm, 1e-6, 1.0);
  s.finish();
  return e;
}

RepairSpec read_repair(Section s, RepairSpec def) {
  const std::string kind = s.word("dist", "", {"fixed", "exponential", "uniform", "lognormal"});
  RepairSpec r = def;
  if (kind.empty()) {
    if (s.get("hours")) r = RepairSpec{RepairKind::kFixed, s.number("hours", 0, 0, kInf), 0.0};
  } else if (kind == "fixed") {
    r = RepairSpec{RepairKind::kFixed, s.number("hours", def.mean_hours(), 0, kInf), 0.0};
  } else if (kind == "exponential") {
    r = RepairSpec{RepairKind::kExponential, s.number("mean_hours", def.mean_hours(), 0, kInf), 0};
  } else if (kind == "uniform") {
    const double lo = s.number("min_hours", 0.0, 0, kInf);
    const double hi = s.number("max_hours", lo, 0, kInf);
    if (hi < lo) fail(s.source(), s.key_path("max_hours"), "must be >= min_hours");
    r = RepairSpec{RepairKind::kUniform, lo, hi};
  } else {
    r = RepairSpec{RepairKind::kLognormal, s.number("mean_hours", def.mean_hours(), 1e-9, kInf),
                   s.number("sigma", 1.0, 0.0, 10.0)};
  }
  s.finish();
  return r;
}

FailureSpec read_failures(Section s, int domain_size) {
  FailureSpec f;
  const bool has_rate = s.get("rate_per_gpu_day") != nullptr;
  const bool has_mtbf = s.get("mtbf_gpu_hours") != nullptr;
  if (has_rate && has_mtbf) {
    fail(s.source(), s.key_path("mtbf_gpu_hours"), "give rate_per_gpu_day or mtbf_gpu_hours, not both");
  }
  f.rate_per_gpu_day = s.number("rate_per_gpu_day", f.rate_per_gpu_day, 0.0, 1e6);
  if (has_mtbf) f.rate_per_gpu_day = 24.0 / s.number("mtbf_gpu_hours", 1.0, 1e-9, kInf);
  f.rate_multiplier = s.number("rate_multiplier", f.rate_multiplier, 0.0, 1e6);
  f.distribution = s.word("distribution", "exponential", {"exponential", "weibull"}) == "weibull"
                       ? FailureDist::kWeibull
                       : FailureDist::kExponential;
  f.weibull_shape = s.number("weibull_shape", f.weibull_shape, 0.05, 20.0);
  if (const toml::node* n = s.get("blast_radius"); n && n->value_exact<std::string>()) {
    if (*n->value_exact<std::string>() != "domain") {
      fail(s.source(), s.key_path("blast_radius"), "expected 1, 2, 4, ... or \"domain\"");
    }
    f.blast_radius = domain_size;
  } else {
    f.blast_radius = s.small_int("blast_radius", f.blast_radius, 1, 4096);
  }
  f.trace = s.text("trace");
  Section hw = s.sub("hardware");
  f.hardware_share = hw.number("share", f.hardware_share, 0.0, 1.0);
  f.hardware_repair = read_repair(hw.sub("repair"), f.hardware_repair);
  hw.finish();
  Section sw = s.sub("software");
  const double sw_share = sw.number("share", 1.0 - f.hardware_share, 0.0, 1.0);
  if (std::abs(sw_share + f.hardware_share - 1.0) > 1e-9) {
    fail(s.source(), sw.key_path("share"), "hardware.share + software.share must be 1");
  }
  f.software_repair = read_repair(sw.sub("repair"), f.software_repair);
  sw.finish();
  s.finish();
  return f;
}

// A list of numbers, each in [lo, hi].
std::vector<double> number_list(Section& s, const std::string& key, double lo, double hi) {
  std::vector<double> out;
  const toml::array* a = s.array(key);
  if (!a) return out;
  for (std::size_t i = 0; i < a->size(); ++i) {
    const std::string where = s.key_path(key) + "[" + std::to_string(i) + "]";
    double v = std::numeric_limits<double>::quiet_NaN();
    if (auto d = (*a)[i].value<double>()) v = *d;
    if (!(v >= lo && v <= hi)) {
      std::ostringstream os;
      os << "expected a number in [" << lo << ", " << hi << "]";
      fail(s.source(), where, os.str());
    }
    out.push_back(v);
  }
  return out;
}

constexpr double kMaxSlowdown = 100.0;

SlowdownSpec read_slowdown(Section s) {
  SlowdownSpec d;
  const std::string kind = s.word("dist", "uniform", {"fixed", "uniform", "choice"});
  if (kind == "fixed") {
    d.kind = SlowdownKind::kFixed;
    d.min = d.max = s.number("factor", 2.0, 1.0, kMaxSlowdown);
  } else if (kind == "uniform") {
    d.min = s.number("min", d.min, 1.0, kMaxSlowdown);
    d.max = s.number("max", std::max(d.max, d.min), 1.0, kMaxSlowdown);
    if (d.max < d.min) fail(s.source(), s.key_path("max"), "must be >= min");
  } else {
    d.kind = SlowdownKind::kChoice;
    d.factors = number_list(s, "factors", 1.0, kMaxSlowdown);
    d.probs = number_list(s, "probs", 0.0, 1.0);
    if (d.factors.empty()) fail(s.source(), s.key_path("factors"), "needs at least one factor");
    if (d.probs.size() != d.factors.size()) {
      fail(s.source(), s.key_path("probs"), "needs one probability per factor");
    }
    double sum = 0.0;
    for (const double p : d.probs) sum += p;
    if (std::abs(sum - 1.0) > 1e-9) fail(s.source(), s.key_path("probs"), "must sum to 1");
    d.min = *std::min_element(d.factors.begin(), d.factors.end());
    d.max = *std::max_element(d.factors.begin(), d.factors.end());
  }
  s.finish();
  return d;
}

FailSlowSpec read_failslow(Section s) {
  FailSlowSpec f;
  f.rate_per_gpu_day = s.number("rate_per_gpu_day", f.rate_per_gpu_day, 0.0, 1e6);
  f.slowdown = read_slowdown(s.sub("slowdown"));
  f.duration = read_repair(s.sub("duration"), f.duration);
  s.finish();
  return f;
}

std::vector<Policy> read_policy_list(Section& s, const std::string& key, std::vector<Policy> def) {
  const toml::array* a = s.array(key);
  if (!a) return def;
  std::vector<Policy> out;
  for (std::size_t i = 0; i < a->size(); ++i) {
    auto name = (*a)[i].value_exact<std::string>();
    const std::string where = s.key_path(key) + "[" + std::to_string(i) + "]";
    if (!name) fail(s.source(), where, "expected a policy name");
    try {
      out.push_back(policy_from_name(*name));
    } catch (const std::invalid_argument& e) {
      fail(s.source(), where, e.what());
    }
  }
  if (out.empty()) fail(s.source(), s.key_path(key), "needs at least one policy");
  return out;
}

// A pause in seconds, or "plan" (the default): from the transition plans.
std::optional<double> pause_seconds(Section& s, const std::string& key) {
  if (const toml::node* n = s.get(key); n && n->value_exact<std::string>()) {
    if (*n->value_exact<std::string>() != "plan") fail(s.source(), s.key_path(key), "expected seconds or \"plan\"");
    return std::nullopt;
  }
  if (s.get(key) == nullptr) return std::nullopt;
  return s.number(key, 0.0, 0.0, 1e9);
}

PolicySpec read_policies(Section s) {
  PolicySpec p;
  p.compare = read_policy_list(s, "compare", p.compare);
  p.pack = s.boolean("pack", p.pack);
  p.fixed_global_batch = s.boolean("fixed_global_batch", p.fixed_global_batch);
  p.reconfig_s = pause_seconds(s, "reconfig_s");
  p.rejoin_s = pause_seconds(s, "rejoin_s");
  p.protocol_s = s.number("protocol_s", p.protocol_s, 0.0, 1e9);
  Section c = s.sub("ckpt");
  if (const toml::node* n = c.get("interval_hours"); n && n->value_exact<std::string>()) {
    if (*n->value_exact<std::string>() != "optimal") {
      fail(s.source(), c.key_path("interval_hours"), "expected hours or \"optimal\"");
    }
  } else {
    p.ckpt.interval_hours = c.number("interval_hours", p.ckpt.interval_hours, 0.0, 1e9);
  }
  p.ckpt.write_s = c.number("write_s", p.ckpt.write_s, 0.0, 1e9);
  p.ckpt.restart_s = c.number("restart_s", p.ckpt.restart_s, 0.0, 1e9);
  c.finish();
  s.finish();
  return p;
}

RunSpec read_run(Section s) {
  RunSpec r;
  r.mode = s.word("mode", "timeline", {"timeline", "snapshot"}) == "snapshot" ? Mode::kSnapshot
                                                                               : Mode::kTimeline;
  r.duration_days = s.number("duration_days", r.duration_days, 1e-6, 36500.0);
  r.seeds = s.small_int("seeds", r.seeds, 1, 10'000'000);
  r.seed = static_cast<std::uint64_t>(s.integer("seed", 1, 0, std::numeric_limits<std::int64_t>::max()));
  r.threads = s.small_int("threads", r.threads, 1, 1024);
  r.bucket_hours = s.number("bucket_hours", r.bucket_hours, 1e-3, 1e6);
  r.warmup_days = s.number("warmup_days", r.warmup_days, 0.0, 36500.0);
  if (const toml::array* a = s.array("thresholds_percent")) {
    for (std::size_t i = 0; i < a->size(); ++i) {
      const std::string where = s.key_path("thresholds_percent") + "[" + std::to_string(i) + "]";
      double v = -1.0;
      if (auto d = (*a)[i].value<double>()) v = *d;
      if (!(v >= 0.0 && v <= 100.0)) fail(s.source(), where, "expected a percentage in [0, 100]");
      r.thresholds_percent.push_back(v);
    }
  }
  s.finish();
  return r;
}

SnapshotSpec read_snapshot(Section s) {
  SnapshotSpec sn;
  if (const toml::array* a = s.array("failed_fractions")) {
    sn.failed_fractions.clear();
    for (std::size_t i = 0; i < a->size(); ++i) {
      const std::string where = s.key_path("failed_fractions") + "[" + std::to_string(i) + "]";
      double v = -1.0;
      if (auto d = (*a)[i].value<double>()) v = *d;
      if (!(v >= 0.0 && v <= 1.0)) fail(s.source(), where, "expected a fraction in [0, 1]");
      sn.failed_fractions.push_back(v);
    }
    if (sn.failed_fractions.empty()) fail(s.source(), s.key_path("failed_fractions"), "is empty");
  }
  sn.placements = s.small_int("placements", sn.placements, 1, 100'000'000);
  s.finish();
  return sn;
}

}  // namespace

toml::table parse_scenario_text(const std::string& text, const std::string& source) {
  try {
    return toml::parse(text, source);
  } catch (const toml::parse_error& e) {
    std::ostringstream os;
    os << source << ":" << e.source().begin.line << ":" << e.source().begin.column << ": "
       << e.description();
    throw std::invalid_argument(os.str());
  }
}

toml::table load_scenario_file(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw std::invalid_argument(path + ": cannot open scenario file");
  std::stringstream buf;
  buf << in.rdbuf();
  return parse_scenario_text(buf.str(), path);
}

toml::table parse_value(const std::string& text) {
  try {
    toml::table parsed = toml::parse("v = " + text);
    if (parsed.size() == 1) return parsed;  // "1\nw = 2" spells more than one value
  } catch (const toml::parse_error&) {
  }
  return toml::table{{"v", text}};  // not a TOML value: a plain string
}

void set_override(toml::table& table, const std::string& key, const std::string& value) {
  if (key.empty()) throw std::invalid_argument("--set: empty key");
  toml::table* t = &table;
  std::size_t start = 0;
  for (std::size_t dot = key.find('.'); dot != std::string::npos; dot = key.find('.', start)) {
    const std::string part = key.substr(start, dot - start);
    if (part.empty()) throw std::invalid_argument("--set " + key + ": empty key part");
    toml::node* n = t->get(part);
    if (!n) n = &t->insert_or_assign(part, toml::table{}).first->second;
    if (!n->is_table()) throw std::invalid_argument("--set " + key + ": '" + part + "' is not a table");
    t = n->as_table();
    start = dot + 1;
  }
  const std::string leaf = key.substr(start);
  if (leaf.empty()) throw std::invalid_argument("--set " + key + ": empty key part");
  toml::table parsed = parse_value(value);
  t->insert_or_assign(leaf, std::move(*parsed.get("v")));
}

Scenario scenario_from_table(const toml::table& table, const std::string& source) {
  Section root(&table, "", source);
  Scenario s;
  s.cluster = read_cluster(root.sub("cluster"));
  s.model = read_model(root.sub("model"));
  s.parallel = read_parallel(root.sub("parallelism"));
  s.efficiency = read_efficiency(root.sub("efficiency"));
  s.failures = read_failures(root.sub("failures"), s.cluster.domain_size);
  s.failslow = read_failslow(root.sub("failslow"));
  Section sp = root.sub("spares");
  s.spares.domains = sp.small_int("domains", s.spares.domains, 0, 1'000'000);
  s.spares.swap_hours = sp.number("swap_hours", s.spares.swap_hours, 0.0, 1e6);
  sp.finish();
  Section pw = root.sub("power");
  s.power.max_frac = pw.number("max_frac", s.power.max_frac, 1.0, 10.0);
  s.power.alpha = pw.number("alpha", s.power.alpha, 1e-3, 10.0);
  s.power.headroom_w = pw.number("headroom_w", s.power.headroom_w, 0.0, 1e9);
  pw.finish();
  s.policies = read_policies(root.sub("policies"));
  s.run = read_run(root.sub("run"));
  s.snapshot = read_snapshot(root.sub("snapshot"));
  root.get("sweep");  // read by the sweep driver (sweep.h)
  root.finish();
  try {
    validate(s);
  } catch (const std::invalid_argument& e) {
    throw std::invalid_argument(source + ": " + e.what());
  }
  return s;
}

namespace {

toml::table repair_table(const RepairSpec& r) {
  switch (r.kind) {
    case RepairKind::kFixed: return toml::table{{"dist", "fixed"}, {"hours", r.a_hours}};
    case RepairKind::kExponential: return toml::table{{"dist", "exponential"}, {"mean_hours", r.a_hours}};
    case RepairKind::kUniform:
      return toml::table{{"dist", "uniform"}, {"min_hours", r.a_hours}, {"max_hours", r.b}};
    case RepairKind::kLognormal:
      return toml::table{{"dist", "lognormal"}, {"mean_hours", r.a_hours}, {"sigma", r.b}};
  }
  return {};
}

toml::table failures_table(const FailureSpec& f) {
  toml::table t{
      {"rate_per_gpu_day", f.rate_per_gpu_day},
      {"rate_multiplier", f.rate_multiplier},
      {"distribution", f.distribution == FailureDist::kWeibull ? "weibull" : "exponential"},
      {"weibull_shape", f.weibull_shape},
      {"blast_radius", f.blast_radius},
      {"hardware", toml::table{{"share", f.hardware_share}, {"repair", repair_table(f.hardware_repair)}}},
      {"software",
       toml::table{{"share", 1.0 - f.hardware_share}, {"repair", repair_table(f.software_repair)}}}};
  if (!f.trace.empty()) t.insert("trace", f.trace);
  return t;
}

toml::table failslow_table(const FailSlowSpec& f) {
  toml::table slowdown;
  switch (f.slowdown.kind) {
    case SlowdownKind::kFixed: slowdown = toml::table{{"dist", "fixed"}, {"factor", f.slowdown.min}}; break;
    case SlowdownKind::kUniform:
      slowdown = toml::table{{"dist", "uniform"}, {"min", f.slowdown.min}, {"max", f.slowdown.max}};
      break;
    case SlowdownKind::kChoice: {
      toml::array factors, probs;
      for (const double v : f.slowdown.factors) factors.push_back(v);
      for (const double v : f.slowdown.probs) probs.push_back(v);
      slowdown = toml::table{{"dist", "choice"}, {"factors", factors}, {"probs", probs}};
      break;
    }
  }
  return toml::table{{"rate_per_gpu_day", f.rate_per_gpu_day},
                     {"slowdown", slowdown},
                     {"duration", repair_table(f.duration)}};
}

toml::table policies_table(const PolicySpec& p) {
  toml::array compare;
  for (const Policy policy : p.compare) compare.push_back(policy_name(policy));
  toml::table ckpt{{"write_s", p.ckpt.write_s}, {"restart_s", p.ckpt.restart_s}};
  if (p.ckpt.interval_hours > 0.0) {
    ckpt.insert("interval_hours", p.ckpt.interval_hours);
  } else {
    ckpt.insert("interval_hours", "optimal");
  }
  toml::table t{{"compare", compare},
                {"pack", p.pack},
                {"fixed_global_batch", p.fixed_global_batch},
                {"protocol_s", p.protocol_s},
                {"ckpt", ckpt}};
  // A constant pause, or "plan": from the transition plans.
  const auto pause = [&](const char* key, const std::optional<double>& seconds) {
    if (seconds) {
      t.insert(key, *seconds);
    } else {
      t.insert(key, "plan");
    }
  };
  pause("reconfig_s", p.reconfig_s);
  pause("rejoin_s", p.rejoin_s);
  return t;
}

}  // namespace

toml::table scenario_to_table(const Scenario& s) {
  const ClusterSpec& c = s.cluster;
  const ModelSpec& m = s.model;
  const ParallelSpec& p = s.parallel;
  const EfficiencySpec& e = s.efficiency;
  toml::array fractions;
  for (const double f : s.snapshot.failed_fractions) fractions.push_back(f);
  toml::array thresholds;
  for (const double x : s.run.thresholds_percent) thresholds.push_back(x);
  return toml::table{
      {"cluster", toml::table{{"gpus", c.gpus}, {"domain_size", c.domain_size},
                              {"nvlink_gbps", c.nvlink_gbps}, {"nic_gbps", c.nic_gbps},
                              {"peak_tflops", c.peak_tflops}, {"tdp_w", c.tdp_w}}},
      {"model", toml::table{{"layers", m.layers}, {"hidden", m.hidden}, {"heads", m.heads},
                            {"ffn", m.ffn}, {"vocab", m.vocab}, {"seq_len", m.seq_len},
                            {"global_batch_tokens", m.global_batch_tokens},
                            {"micro_batch", m.micro_batch}, {"act_bytes", m.act_bytes},
                            {"grad_bytes", m.grad_bytes}, {"state_bytes", m.state_bytes}}},
      {"parallelism", toml::table{{"tp", p.tp}, {"pp", p.pp}, {"dp", p.dp},
                                  {"virtual_stages", p.virtual_stages}, {"tp_step", p.tp_step},
                                  {"min_tp", p.min_tp}, {"align", p.align}}},
      {"efficiency", toml::table{{"gemm", e.gemm}, {"nvlink", e.nvlink}, {"nic", e.nic},
                                 {"tp_overlap", e.tp_overlap}, {"dp_overlap", e.dp_overlap},
                                 {"gemm_align_elements", e.gemm_align_elements},
                                 {"unaligned_gemm", e.unaligned_gemm}}},
      {"failures", failures_table(s.failures)},
      {"failslow", failslow_table(s.failslow)},
      {"spares", toml::table{{"domains", s.spares.domains}, {"swap_hours", s.spares.swap_hours}}},
      {"power", toml::table{{"max_frac", s.power.max_frac}, {"alpha", s.power.alpha},
                            {"headroom_w", s.power.headroom_w}}},
      {"policies", policies_table(s.policies)},
      {"run", toml::table{{"mode", s.run.mode == Mode::kSnapshot ? "snapshot" : "timeline"},
                          {"duration_days", s.run.duration_days}, {"seeds", s.run.seeds},
                          {"seed", static_cast<std::int64_t>(s.run.seed)},
                          {"threads", s.run.threads}, {"bucket_hours", s.run.bucket_hours},
                          {"warmup_days", s.run.warmup_days},
                          {"thresholds_percent", thresholds}}},
      {"snapshot", toml::table{{"failed_fractions", fractions},
                               {"placements", s.snapshot.placements}}}};
}

}  // namespace ntp::sim
