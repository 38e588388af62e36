// `ntp plan`: the layouts, gradient-sync plans and transition plan of one unit
// kind for a job (--units), or the widths and phase loads of every kind of a
// model (--model, plan_kinds.h), as a readable table or one JSON object
// (docs/plan.md).
#include <CLI/CLI.hpp>
#include <algorithm>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include <spdlog/spdlog.h>

#include "cli/command.h"
#include "cli/plan_kinds.h"
#include "layout/errors.h"
#include "layout/job_layout.h"
#include "layout/transition.h"
#include "model/config.h"

namespace ntp::cli {
namespace {

using json = nlohmann::ordered_json;
using namespace ntp::layout;

// Bad input from one flag; the message names the flag.
struct BadInput : std::invalid_argument {
  using std::invalid_argument::invalid_argument;
};

struct PlanOptions {
  std::optional<Unit> units;
  int tp = 0;
  int replicas = 0;
  int min_tp = 1;
  std::string failed;
  std::optional<std::string> to_failed;
  std::optional<Unit> align;  // --units: 1; --model: 64 (parallel.align's default)
  std::string balance = "work";
  std::string speeds;
  bool as_json = false;
  // --model: a preset, and overrides of its shape.
  std::optional<std::string> model;
  std::optional<Unit> d_model, heads, kv_heads, ffn, vocab, seq_len, layers;
};

// ---- JSON ----------------------------------------------------------------

json intervals_json(const IntervalSet& set) {
  json out = json::array();
  for (const Interval& iv : set.intervals()) out.push_back({iv.start, iv.end});
  return out;
}

json transfers_json(const std::vector<SlotTransfer>& plan) {
  json out = json::array();
  for (const SlotTransfer& t : plan)
    out.push_back({{"from", t.from}, {"to", t.to}, {"units", intervals_json(t.units)}});
  return out;
}

json replica_json(int replica, const ReplicaLayout& layout) {
  json slots = json::array();
  for (const IntervalSet& s : layout.slots) slots.push_back(intervals_json(s));
  return {{"replica", replica},
          {"dropped", layout.dropped},
          {"active", layout.active},
          {"core", layout.core},
          {"layout", std::move(slots)},
          {"pre_sync", transfers_json(layout.pre_sync)},
          {"post_sync", transfers_json(layout.post_sync)},
          {"block", layout.block}};
}

json job_json(const JobLayout& job, const std::string& failed, Unit align) {
  json partition = json::array();
  for (const IntervalSet& s : job.sync_partition) partition.push_back(intervals_json(s));
  json replicas = json::array();
  for (int r = 0; r < job.num_replicas(); ++r) replicas.push_back(replica_json(r, job.replica(r)));
  return {{"units", job.units},
          {"tp", job.tp},
          {"replicas", job.num_replicas()},
          {"min_tp", job.min_tp},
          {"failed", failed},
          {"align", align},
          {"block", job.block},
          {"sync_degree", job.sync_degree},
          {"sync_partition", std::move(partition)},
          {"replica_layouts", std::move(replicas)}};
}

json transition_json(const TransitionPlan& plan) {
  json moves = json::array();
  for (const Move& m : plan.moves)
    moves.push_back({{"from", {m.from.replica, m.from.slot}},
                     {"to", {m.to.replica, m.to.slot}},
                     {"units", intervals_json(m.units)},
                     {"cross_domain", m.cross_domain}});
  return moves;
}

// ---- table ---------------------------------------------------------------

std::string slot_role(const ReplicaLayout& layout, int slot) {
  if (!layout.is_active(slot)) return "failed";
  if (layout.dropped) return "idle";
  const int j = layout.sync_group(slot);
  return j >= 0 ? "core " + std::to_string(j) : "extra";
}

std::string transfers_text(const std::vector<SlotTransfer>& plan) {
  std::string out;
  for (const SlotTransfer& t : plan)
    out += "  " + std::to_string(t.from) + "->" + std::to_string(t.to) + " " + t.units.to_string();
  return out;
}

void append_replica_table(std::string& out, int r, const ReplicaLayout& layout, int tp,
                          int min_tp) {
  const int k = static_cast<int>(layout.active.size());
  char line[160];
  if (layout.dropped) {
    std::snprintf(line, sizeof line, "replica %d: sits out (%d of %d slots alive, min_tp %d)\n", r,
                  k, tp, min_tp);
    out += line;
    return;
  }
  std::snprintf(line, sizeof line, "replica %d: trains on %d of %d slots\n", r, k, tp);
  out += line;
  out += "  slot  role      units  layout\n";
  for (int slot = 0; slot < tp; ++slot) {
    const IntervalSet& units = layout.slots[static_cast<size_t>(slot)];
    std::snprintf(line, sizeof line, "  %4d  %-8s %6lld  ", slot, slot_role(layout, slot).c_str(),
                  static_cast<long long>(units.size()));
    out += line + (units.empty() ? std::string("-") : units.to_string()) + "\n";
  }
  if (!layout.pre_sync.empty())
    out += "  pre-sync (extra->core):" + transfers_text(layout.pre_sync) +
           "\n  post-sync: the inverse\n";
}

// One block per replica; a run of replicas identical to the previous one is
// folded into one line, so a large healthy job stays readable.
void append_job_table(std::string& out, const JobLayout& job, const std::string& title) {
  out += title + ": " + std::to_string(job.units) + " units, tp " + std::to_string(job.tp) + ", " +
         std::to_string(job.num_replicas()) + " replicas, min_tp " + std::to_string(job.min_tp) +
         "\nsync degree K = " + std::to_string(job.sync_degree) + ", sync partition:";
  for (const IntervalSet& s : job.sync_partition) out += " " + s.to_string();
  out += "\n";
  for (int r = 0; r < job.num_replicas();) {
    const ReplicaLayout& layout = job.replica(r);
    append_replica_table(out, r, layout, job.tp, job.min_tp);
    int same = r + 1;
    while (same < job.num_replicas() && job.replica(same) == layout) ++same;
    if (same == r + 2)
      out += "replica " + std::to_string(r + 1) + ": same as replica " + std::to_string(r) + "\n";
    if (same > r + 2)
      out += "replicas " + std::to_string(r + 1) + "-" + std::to_string(same - 1) +
             ": same as replica " + std::to_string(r) + "\n";
    r = same;
  }
}

void append_transition_table(std::string& out, const TransitionPlan& plan) {
  out += "transition: " + std::to_string(plan.moves.size()) + " moves\n";
  for (const Move& m : plan.moves)
    out += "  (" + std::to_string(m.from.replica) + "," + std::to_string(m.from.slot) + ") -> (" +
           std::to_string(m.to.replica) + "," + std::to_string(m.to.slot) + ")  " +
           (m.cross_domain ? "cross" : "intra") + "  " + m.units.to_string() + "\n";
  out += "moved units: intra " + std::to_string(plan.intra_units) + ", cross " +
         std::to_string(plan.cross_units) + "\n";
}

// ---- planning ------------------------------------------------------------

// The job for one failure spec. Errors in the spec name its flag; errors of
// the job as a whole (units too few for a replica, no replica trains) name the
// field and say which spec they arise with.
// The slot speeds of --speeds, checked against the job.
SlotSpeeds speeds_option(const PlanOptions& o) {
  try {
    SlotSpeeds speeds = parse_slot_speeds(o.speeds);
    validate_slot_speeds(speeds, o.replicas, o.tp);
    return speeds;
  } catch (const std::invalid_argument& e) {
    throw BadInput(std::string("--speeds: ") + e.what());
  }
}

FailedSlots failed_option(const PlanOptions& o, const std::string& spec, const std::string& flag) {
  try {
    FailedSlots failed = parse_failed_slots(spec);
    validate_failed_slots(failed, o.replicas, o.tp);
    return failed;
  } catch (const std::invalid_argument& e) {
    throw BadInput(flag + ": " + e.what());
  }
}

JobLayout plan_for(const PlanOptions& o, const std::string& spec, const std::string& flag) {
  JobConfig config{.units = *o.units,
                   .tp = o.tp,
                   .replicas = o.replicas,
                   .failed = failed_option(o, spec, flag),
                   .min_tp = o.min_tp,
                   .align = o.align.value_or(1),
                   .speeds = o.balance == "work" ? speeds_option(o) : SlotSpeeds{}};
  const std::string with = " (with " + flag + " \"" + spec + "\")";
  try {
    return plan_job(config);
  } catch (const InfeasibleError& e) {
    throw InfeasibleError(e.what() + with);
  } catch (const std::invalid_argument& e) {
    throw BadInput(e.what() + with);
  }
}

void check_min_tp(const PlanOptions& o) {
  if (o.min_tp > o.tp)
    throw BadInput("--min-tp " + std::to_string(o.min_tp) + " exceeds --tp " +
                   std::to_string(o.tp));
}

// The model of --model: a preset of either family (the name picks it) with
// the shape flags on top. A GPT-2 FFN follows d_model (4 d) unless --ffn.
ModelShape model_shape(const PlanOptions& o) {
  const bool llama = o.model->starts_with("llama");
  model::GptConfig c;
  try {
    c = model::preset(*o.model, llama ? model::Family::kLlama : model::Family::kGpt2);
  } catch (const std::invalid_argument& e) {
    throw BadInput(std::string("--model: ") + e.what());
  }
  const Unit d_model = o.d_model.value_or(c.d_model);
  ModelShape shape{.d_model = d_model,
                   .heads = o.heads.value_or(c.heads),
                   .kv_heads = llama ? o.kv_heads.value_or(c.kv_heads) : o.kv_heads.value_or(0),
                   .ffn = o.ffn.value_or(llama ? c.ffn_hidden : 4 * d_model),
                   .gated_ffn = llama,
                   .vocab = o.vocab.value_or(c.padded_vocab),
                   .seq_len = o.seq_len.value_or(c.max_seq),
                   .layers = o.layers.value_or(c.layers)};
  try {
    unit_costs(shape);
  } catch (const std::invalid_argument& e) {
    throw BadInput(e.what());
  }
  return shape;
}

std::string run_kinds(const PlanOptions& o) {
  KindsRequest request{.shape = model_shape(o),
                       .tp = o.tp,
                       .replicas = o.replicas,
                       .min_tp = o.min_tp,
                       .failed = failed_option(o, o.failed, "--failed"),
                       .speeds = speeds_option(o),
                       .align = o.align.value_or(64),
                       .by_work = o.balance == "work"};
  try {
    return o.as_json ? kinds_json(request).dump() + "\n" : kinds_table(request);
  } catch (const std::invalid_argument& e) {
    throw BadInput(e.what());
  }
}

// Plans everything and returns the text for stdout; throws on any error so
// that nothing reaches stdout unless the whole request succeeded.
std::string run_plan(const PlanOptions& o) {
  check_min_tp(o);
  if (o.model) return run_kinds(o);
  const JobLayout from = plan_for(o, o.failed, "--failed");
  std::optional<JobLayout> to;
  TransitionPlan transition;
  if (o.to_failed) {
    to = plan_for(o, *o.to_failed, "--to-failed");
    transition = plan_transition(from, *to);
    transition.require_recoverable();
  }
  if (o.as_json) {
    json out =
        job_json(from, format_failed_slots(parse_failed_slots(o.failed)), o.align.value_or(1));
    if (to) {
      out["to"] =
          job_json(*to, format_failed_slots(parse_failed_slots(*o.to_failed)), o.align.value_or(1));
      out["transition"] = transition_json(transition);
      out["transition_units"] = {{"intra", transition.intra_units},
                                 {"cross", transition.cross_units}};
    }
    return out.dump() + "\n";
  }
  std::string text;
  append_job_table(text, from, "job");
  if (to) {
    text += "\n";
    append_job_table(text, *to, "after --to-failed");
    text += "\n";
    append_transition_table(text, transition);
  }
  return text;
}

void add_options(CLI::App& app, PlanOptions& o) {
  app.description(
      "Layouts, gradient-sync plans and the transition plan of one unit kind (--units), or the "
      "widths and phase loads of every kind of a model, today's cut beside the configured one "
      "(--model) (docs/plan.md).");
  CLI::Option* units =
      app.add_option("--units", o.units, "units of one kind (heads, neurons, vocabulary rows)")
          ->check(CLI::Range(Unit{1}, Unit{1} << 40));
  CLI::Option* model =
      app.add_option("--model", o.model,
                     "a model preset (tiny, small, gpt2, llama-tiny, ...): every kind")
          ->excludes(units);
  app.add_option("--tp", o.tp, "base TP degree n (slots per domain)")
      ->required()
      ->check(CLI::Range(1, 4096));
  app.add_option("--replicas", o.replicas, "DP replicas")->required()->check(CLI::Range(1, 65536));
  app.add_option("--failed", o.failed, "failed slots, e.g. \"0:2,5;3:7\"");
  app.add_option("--to-failed", o.to_failed,
                 "failed slots of the next configuration (\"\" = all repaired); with --units")
      ->excludes(model);
  app.add_option("--min-tp", o.min_tp, "replicas with fewer alive slots sit out")
      ->check(CLI::Range(1, 4096));
  app.add_option("--align", o.align,
                 "shares in blocks of up to this many units (--units: default 1; --model: "
                 "neuron-like kinds, default 64)")
      ->check(CLI::Range(Unit{1}, Unit{1} << 40));
  app.add_option("--balance", o.balance, "work: shares follow --speeds; count: unit counts")
      ->check(CLI::IsMember({"work", "count"}));
  app.add_option("--speeds", o.speeds,
                 "slot speeds, one per slot, e.g. \"0:1,1,0.5,1\" (default 1.0)");
  const auto shape = [&](const char* flag, std::optional<Unit>& field, const char* what) {
    app.add_option(flag, field, what)->check(CLI::Range(Unit{1}, Unit{1} << 40))->needs(model);
  };
  shape("--d-model", o.d_model, "hidden size (overrides the preset's)");
  shape("--heads", o.heads, "query heads");
  shape("--kv-heads", o.kv_heads, "key/value heads (grouped-query attention)");
  shape("--ffn", o.ffn, "FFN neurons per layer (GPT-2 default: 4 x d_model)");
  shape("--vocab", o.vocab, "vocabulary rows (padded)");
  shape("--seq-len", o.seq_len, "tokens per sequence (attention's cost)");
  shape("--layers", o.layers, "transformer blocks");
  app.add_flag("--json", o.as_json, "print one JSON object instead of tables");
}

// "--to-failed=" (an empty value) becomes "--to-failed" "": the parser would
// otherwise take the next argument as the value.
std::vector<std::string> split_empty_assignments(int argc, char** argv) {
  std::vector<std::string> args;
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    const bool empty_value = arg.size() > 3 && arg.starts_with("--") && arg.back() == '=';
    if (empty_value) arg.pop_back();
    args.push_back(arg);
    if (empty_value) args.emplace_back();
  }
  std::reverse(args.begin(), args.end());  // CLI11 takes the arguments in reverse order
  return args;
}

int run(int argc, char** argv) {
  CLI::App app{"", "ntp plan"};
  PlanOptions options;
  add_options(app, options);
  try {
    std::vector<std::string> args = split_empty_assignments(argc, argv);
    app.parse(args);
    if (!options.units && !options.model) throw CLI::RequiredError("--units or --model");
  } catch (const CLI::CallForHelp&) {
    std::fputs(app.help().c_str(), stdout);
    return kExitOk;
  } catch (const CLI::ParseError& e) {
    spdlog::error("ntp plan: error: {}\n(see ntp plan --help)", e.what());
    return kExitBadInput;
  }
  try {
    const std::string text = run_plan(options);
    std::fputs(text.c_str(), stdout);
    return kExitOk;
  } catch (const std::invalid_argument& e) {
    spdlog::error("ntp plan: error: {}", e.what());
    return kExitBadInput;
  } catch (const InfeasibleError& e) {
    spdlog::error("ntp plan: {}", e.what());
    return kExitImpossible;
  }
}

}  // namespace

NTP_REGISTER_COMMAND("plan", "shard layouts, gradient-sync and transition plans", run);

}  // namespace ntp::cli
