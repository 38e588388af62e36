#include "cli/plan_kinds.h"

#include <algorithm>
#include <array>
#include <stdexcept>
#include <vector>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "layout/job_layout.h"

namespace ntp::cli {
namespace {

using json = nlohmann::ordered_json;
using namespace ntp::layout;

constexpr int kKinds = 3;  // heads, neurons, vocabulary rows: the phases attention, MLP, LM head
constexpr const char* kKeys[kKinds] = {"heads", "neurons", "vocab"};
constexpr const char* kPhases[kKinds] = {"attention", "mlp", "lm_head"};
// A GEMM whose width is not a multiple of 8 runs at about a quarter of its
// speed on tensor cores (DESIGN §3); a head is hd >= 8 columns wide anyway.
constexpr Unit kGemmMultiple = 8;

Unit units_of(const ModelShape& s, int kind) {
  if (kind == 0) return s.kv_heads > 0 ? s.kv_heads : s.heads;
  return kind == 1 ? s.ffn : s.vocab;
}

std::string label_of(const ModelShape& s, int kind) {
  if (kind == 0) return s.kv_heads > 0 && s.kv_heads != s.heads ? "KV groups" : "heads";
  return kind == 1 ? "FFN neurons" : "vocabulary rows";
}

// One way of cutting every kind: its layouts.
struct Cut {
  const char* name;
  Unit align;
  bool by_work;
  std::vector<JobLayout> kinds;
};

Cut plan_cut(const KindsRequest& r, const char* name, Unit align, bool by_work) {
  Cut cut{name, align, by_work, {}};
  for (int kind = 0; kind < kKinds; ++kind) {
    const JobConfig config{.units = units_of(r.shape, kind),
                           .tp = r.tp,
                           .replicas = r.replicas,
                           .failed = r.failed,
                           .min_tp = r.min_tp,
                           .align = kind == 0 ? 1 : align,  // heads stay whole
                           .speeds = by_work ? r.speeds : SlotSpeeds{}};
    try {
      cut.kinds.push_back(plan_job(config));
    } catch (const std::invalid_argument& e) {
      throw std::invalid_argument(label_of(r.shape, kind) + ": " + e.what());
    }
  }
  return cut;
}

std::array<Cut, 2> plan_cuts(const KindsRequest& r) {
  return {plan_cut(r, "today", 1, false), plan_cut(r, "configured", r.align, r.by_work)};
}

// One training replica under one cut, timed at the slots' real speeds.
struct ReplicaReport {
  std::array<std::vector<Unit>, kKinds> widths;  // per slot, 0 where failed
  std::array<Unit, kKinds> block{};
  std::array<int, kKinds> unaligned{};  // active slots whose width is not a multiple of 8
  std::array<PhaseLoad, kKinds> phases;
  double step = 0;  // the step's busiest over ideal
};

ReplicaReport report_of(const KindsRequest& r, const Cut& cut, int replica) {
  ReplicaReport out;
  const ReplicaLayout& heads = cut.kinds[0].replica(replica);
  const std::vector<double> speeds = speeds_of(r.speeds, replica, heads.active);
  const StepLoad step = step_load(r.shape, heads, cut.kinds[1].replica(replica),
                                  cut.kinds[2].replica(replica), speeds);
  out.phases = {step.attention, step.mlp, step.lm_head};
  out.step = step.ratio();
  for (int kind = 0; kind < kKinds; ++kind) {
    const ReplicaLayout& layout = cut.kinds[static_cast<size_t>(kind)].replica(replica);
    out.block[static_cast<size_t>(kind)] = layout.block;
    for (const IntervalSet& held : layout.slots)
      out.widths[static_cast<size_t>(kind)].push_back(held.size());
    for (int slot : layout.active)
      out.unaligned[static_cast<size_t>(kind)] +=
          kind > 0 && layout.slots[static_cast<size_t>(slot)].size() % kGemmMultiple != 0;
  }
  return out;
}

// ---- JSON ----------------------------------------------------------------

json cut_json(const KindsRequest& r, const Cut& cut) {
  json kinds = json::array();
  for (int kind = 0; kind < kKinds; ++kind) {
    const JobLayout& job = cut.kinds[static_cast<size_t>(kind)];
    kinds.push_back({{"kind", kKeys[kind]},
                     {"units", job.units},
                     {"block", job.block},
                     {"sync_degree", job.sync_degree}});
  }
  json replicas = json::array();
  for (int rep = 0; rep < r.replicas; ++rep) {
    json entry = {{"replica", rep}, {"dropped", cut.kinds[0].replica(rep).dropped}};
    if (!entry["dropped"]) {
      const ReplicaReport rr = report_of(r, cut, rep);
      for (size_t kind = 0; kind < kKinds; ++kind)
        entry[kKeys[kind]] = {{"widths", rr.widths[kind]},
                              {"block", rr.block[kind]},
                              {"unaligned", rr.unaligned[kind]},
                              {"phase", kPhases[kind]},
                              {"busiest_over_ideal", rr.phases[kind].ratio()},
                              {"busiest_slot", rr.phases[kind].busiest_slot}};
      entry["step_busiest_over_ideal"] = rr.step;
    }
    replicas.push_back(std::move(entry));
  }
  return {{"align", cut.align},
          {"balance", cut.by_work ? "work" : "count"},
          {"kinds", std::move(kinds)},
          {"replica_reports", std::move(replicas)}};
}

// ---- table ---------------------------------------------------------------

std::string widths_text(const std::vector<Unit>& widths, const std::vector<int>& active) {
  std::string out;
  for (size_t slot = 0; slot < widths.size(); ++slot) {
    const bool alive =
        std::find(active.begin(), active.end(), static_cast<int>(slot)) != active.end();
    out += (slot ? " " : "") + (alive ? std::to_string(widths[slot]) : std::string("-"));
  }
  return out;
}

// The body of one replica's table (without its header), for both cuts.
std::string replica_body(const KindsRequest& r, const std::array<Cut, 2>& cuts, int rep) {
  std::array<ReplicaReport, 2> reports = {report_of(r, cuts[0], rep), report_of(r, cuts[1], rep)};
  const std::vector<int>& active = cuts[0].kinds[0].replica(rep).active;
  std::string out = "  kind             cut         block  busiest/ideal  off-8  widths per slot\n";
  for (size_t kind = 0; kind < kKinds; ++kind)
    for (size_t c = 0; c < 2; ++c)
      out += fmt::format("  {:<16} {:<10} {:>6}  {:>13.3f}  {:>5}  {}\n",
                         c == 0 ? label_of(r.shape, static_cast<int>(kind)) : "", cuts[c].name,
                         reports[c].block[kind], reports[c].phases[kind].ratio(),
                         kind == 0 ? "-" : std::to_string(reports[c].unaligned[kind]),
                         widths_text(reports[c].widths[kind], active));
  for (size_t c = 0; c < 2; ++c)
    out += fmt::format("  {:<16} {:<10} {:>6}  {:>13.3f}\n", c == 0 ? "step" : "", cuts[c].name, "",
                       reports[c].step);
  return out;
}

}  // namespace

nlohmann::ordered_json kinds_json(const KindsRequest& r) {
  const std::array<Cut, 2> cuts = plan_cuts(r);
  const UnitCosts costs = unit_costs(r.shape);
  const ModelShape& s = r.shape;
  json speeds = json::object();
  for (const auto& [replica, slots] : r.speeds) speeds[std::to_string(replica)] = slots;
  return {{"model",
           {{"d_model", s.d_model},
            {"heads", s.heads},
            {"kv_heads", s.kv_heads > 0 ? s.kv_heads : s.heads},
            {"ffn", s.ffn},
            {"gated_ffn", s.gated_ffn},
            {"vocab", s.vocab},
            {"seq_len", s.seq_len},
            {"layers", s.layers}}},
          {"unit_flops",
           {{"head", costs.head}, {"neuron", costs.neuron}, {"vocab_row", costs.vocab_row}}},
          {"tp", r.tp},
          {"replicas", r.replicas},
          {"min_tp", r.min_tp},
          {"failed", format_failed_slots(r.failed)},
          {"speeds", std::move(speeds)},
          {"today", cut_json(r, cuts[0])},
          {"configured", cut_json(r, cuts[1])}};
}

std::string kinds_table(const KindsRequest& r) {
  const std::array<Cut, 2> cuts = plan_cuts(r);
  const UnitCosts costs = unit_costs(r.shape);
  const ModelShape& s = r.shape;
  std::string out = fmt::format(
      "model: d_model {}, heads {}, kv heads {}, ffn {}{}, vocab {}, seq_len {}, layers {}\n"
      "FLOPs per unit and token (forward + backward): head {:.4g} (= {:.1f} neurons), "
      "neuron {:.4g}, vocabulary row {:.4g}\n"
      "cuts: today = align 1, count; configured = align {}, {}\n"
      "busiest/ideal: the busiest slot's work / speed over the phase's work / the replica's speed; "
      "off-8: slots whose width is not a multiple of 8\n",
      s.d_model, s.heads, s.kv_heads > 0 ? s.kv_heads : s.heads, s.ffn,
      s.gated_ffn ? " (SwiGLU)" : "", s.vocab, s.seq_len, s.layers, costs.head,
      costs.head / costs.neuron, costs.neuron, costs.vocab_row, r.align,
      r.by_work ? "work" : "count");
  std::string previous;
  for (int rep = 0; rep < r.replicas; ++rep) {
    const ReplicaLayout& heads = cuts[0].kinds[0].replica(rep);
    const int k = static_cast<int>(heads.active.size());
    std::string body = heads.dropped ? "" : replica_body(r, cuts, rep);
    if (const auto listed = r.speeds.find(rep); listed != r.speeds.end())
      body += fmt::format("  speeds: {:.3g}\n", fmt::join(listed->second, " "));
    if (heads.dropped) {
      out += fmt::format("\nreplica {}: sits out ({} of {} slots alive, min_tp {})\n", rep, k, r.tp,
                         r.min_tp);
      continue;
    }
    if (rep > 0 && body == previous) {
      out += fmt::format("replica {}: same as replica {}\n", rep, rep - 1);
      continue;
    }
    out += fmt::format("\nreplica {}: trains on {} of {} slots\n", rep, k, r.tp) + body;
    previous = body;
  }
  return out;
}

}  // namespace ntp::cli
