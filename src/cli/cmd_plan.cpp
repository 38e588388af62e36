// `ntp plan`: the layouts, gradient-sync plans and transition plan of one unit
// kind for a job, as a readable table or one JSON object (docs/plan.md).
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
#include "layout/errors.h"
#include "layout/job_layout.h"
#include "layout/transition.h"

namespace ntp::cli {
namespace {

using json = nlohmann::ordered_json;
using namespace ntp::layout;

// Bad input from one flag; the message names the flag.
struct BadInput : std::invalid_argument {
  using std::invalid_argument::invalid_argument;
};

struct PlanOptions {
  Unit units = 0;
  int tp = 0;
  int replicas = 0;
  int min_tp = 1;
  std::string failed;
  std::optional<std::string> to_failed;
  bool as_json = false;
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
          {"post_sync", transfers_json(layout.post_sync)}};
}

json job_json(const JobLayout& job, const std::string& failed) {
  json partition = json::array();
  for (const IntervalSet& s : job.sync_partition) partition.push_back(intervals_json(s));
  json replicas = json::array();
  for (int r = 0; r < job.num_replicas(); ++r) replicas.push_back(replica_json(r, job.replica(r)));
  return {{"units", job.units},
          {"tp", job.tp},
          {"replicas", job.num_replicas()},
          {"min_tp", job.min_tp},
          {"failed", failed},
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
JobLayout plan_for(const PlanOptions& o, const std::string& spec, const std::string& flag) {
  JobConfig config{o.units, o.tp, o.replicas, {}, o.min_tp};
  try {
    config.failed = parse_failed_slots(spec);
    validate_failed_slots(config.failed, o.replicas, o.tp);
  } catch (const std::invalid_argument& e) {
    throw BadInput(flag + ": " + e.what());
  }
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

// Plans everything and returns the text for stdout; throws on any error so
// that nothing reaches stdout unless the whole request succeeded.
std::string run_plan(const PlanOptions& o) {
  check_min_tp(o);
  const JobLayout from = plan_for(o, o.failed, "--failed");
  std::optional<JobLayout> to;
  TransitionPlan transition;
  if (o.to_failed) {
    to = plan_for(o, *o.to_failed, "--to-failed");
    transition = plan_transition(from, *to);
    transition.require_recoverable();
  }
  if (o.as_json) {
    json out = job_json(from, format_failed_slots(parse_failed_slots(o.failed)));
    if (to) {
      out["to"] = job_json(*to, format_failed_slots(parse_failed_slots(*o.to_failed)));
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
      "Layouts, gradient-sync plans and the transition plan of one unit kind (docs/plan.md).");
  app.add_option("--units", o.units, "units of this kind (heads, neurons, vocabulary rows)")
      ->required()
      ->check(CLI::Range(Unit{1}, Unit{1} << 40));
  app.add_option("--tp", o.tp, "base TP degree n (slots per domain)")
      ->required()
      ->check(CLI::Range(1, 4096));
  app.add_option("--replicas", o.replicas, "DP replicas")->required()->check(CLI::Range(1, 65536));
  app.add_option("--failed", o.failed, "failed slots, e.g. \"0:2,5;3:7\"");
  app.add_option("--to-failed", o.to_failed,
                 "failed slots of the next configuration (\"\" = all repaired)");
  app.add_option("--min-tp", o.min_tp, "replicas with fewer alive slots sit out")
      ->check(CLI::Range(1, 4096));
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
