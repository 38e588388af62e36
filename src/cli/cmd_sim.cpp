// `ntp sim`: the cluster-scale goodput simulator (docs/sim.md).
//   ntp sim run SCENARIO.toml [--mode snapshot|timeline] [--sweep key=v1,v2,..]
//                             [--set key=value]... [--seeds N] [--threads N] [--threshold X,..]
//                             [--out DIR [--force]]
//   ntp sim model SCENARIO.toml [--set key=value]...
#include <algorithm>
#include <cstdio>
#include <stdexcept>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include <spdlog/spdlog.h>

#include "cli/command.h"
#include "cli/path_args.h"
#include "sim/policy_table.h"
#include "sim/report.h"
#include "sim/scenario_toml.h"
#include "sim/reconfig_pause.h"
#include "sim/step_model.h"
#include "sim/study.h"

namespace {

using namespace ntp::sim;

struct SimOptions {
  std::string scenario;
  std::vector<std::string> sets;
  std::string mode;
  std::string sweep;
  std::string out;
  std::string thresholds;  // --threshold X[,Y...]: percent of GPUs failed
  int seeds = 0;
  int threads = 0;
  bool json = false;
  bool force = false;
};

toml::table load(const SimOptions& o) {
  toml::table table = load_scenario_file(o.scenario);
  for (const std::string& kv : o.sets) {
    const auto eq = kv.find('=');
    if (eq == std::string::npos) throw std::invalid_argument("--set '" + kv + "': expected key=value");
    set_override(table, kv.substr(0, eq), kv.substr(eq + 1));
  }
  if (!o.mode.empty()) set_override(table, "run.mode", "\"" + o.mode + "\"");
  if (o.seeds > 0) set_override(table, "run.seeds", std::to_string(o.seeds));
  if (o.threads > 0) set_override(table, "run.threads", std::to_string(o.threads));
  if (!o.thresholds.empty()) set_override(table, "run.thresholds_percent", "[" + o.thresholds + "]");
  return table;
}

int run(const SimOptions& o) {
  const toml::table table = load(o);
  SweepSpec sweep = sweep_from_table(table, o.scenario);
  if (!o.sweep.empty()) sweep = parse_sweep_flag(o.sweep);
  toml::table base = table;
  base.erase("sweep");
  if (!o.out.empty()) prepare_output_dir(o.out, o.force);  // before the run, not after
  const Study study = run_study(base, o.scenario, sweep);
  if (o.json) {
    std::printf("%s\n", study_json(study).dump(2).c_str());
  } else {
    std::printf("%s", text_summary(study).c_str());
  }
  std::fflush(stdout);  // the table before the list of files on stderr
  if (!o.out.empty()) {
    for (const std::string& path : write_report(study, o.out)) spdlog::info("wrote {}", path);
  }
  return ntp::cli::kExitOk;
}

int model(const SimOptions& o) {
  const Scenario s = scenario_from_table(load(o), o.scenario);
  const StepModel m(s);
  const StepBreakdown b = m.healthy();
  std::printf("healthy step: %.3f s  MFU %.1f %%  %.3g tokens/s  %.3g params\n", b.step_s,
              100.0 * b.mfu, b.tokens_per_s, b.params);
  std::printf("  per microbatch and stage: compute %.4f s, TP all-reduce %.4f s (%.4f exposed), "
              "p2p %.4f s -> %.4f s\n",
              b.compute_s, b.tp_comm_s, b.tp_exposed_s, b.p2p_s, b.microbatch_s);
  std::printf("  %.2f microbatches, bubble %.4f s, DP sync %.4f s (%.4f exposed)\n",
              b.microbatches, b.bubble_s, b.dp_sync_s, b.dp_exposed_s);
  const ReconfigPause pause = reconfig_pause(s, m);
  std::printf("reconfiguration: the busiest GPU moves %.3g B over NVLink + %.3g B over the NICs after a "
              "failure (%.2f s), %.3g + %.3g B after a repair (%.2f s); pause %.1f s / %.1f s (%s)\n",
              pause.failure_bytes_up, pause.failure_bytes_out, pause.failure_move_s, pause.rejoin_bytes_up,
              pause.rejoin_bytes_out, pause.rejoin_move_s, pause.failure_s, pause.rejoin_s,
              s.policies.reconfig_s || s.policies.rejoin_s ? "constants set in the scenario" : "from the plans");
  // What the layout costs per TP degree: the busiest GPU's compute (aligned
  // blocks of parallelism.align, unaligned GEMMs slowed) against TP n and
  // against the ideal (the same FLOPs spread evenly, all GEMMs aligned).
  const int n = s.parallel.tp;
  std::printf("\ncompute of a TP group of k (align %d; unaligned GEMMs at %.2f of full speed)\n", s.parallel.align,
              s.efficiency.unaligned_gemm);
  std::printf("      k  compute_s  vs_tp%-3d  ideal(%d/k)  over_ideal\n", n, n);
  for (int k = n; k >= std::max(1, s.min_tp()); --k) {
    std::printf(" %6d  %9.4f  %8.3f  %11.3f  %10.3f\n", k, m.compute_s(k), m.compute_s(k) / m.compute_s(n),
                static_cast<double>(n) / k, m.compute_s(k) / m.ideal_compute_s(k));
  }
  std::printf("\n active  ntp_runs_at  ntp_speed  ntp_share  pw_runs_at   need  boost  pw_cap        "
              "pw_speed  pw_share  ntp_step_s\n");
  const PolicyTable ntp = make_policy_table(Policy::kNtp, s, m);
  const PolicyTable pw = make_policy_table(Policy::kNtpPw, s, m);
  for (int k = s.parallel.tp; k >= 1; --k) {
    const auto i = static_cast<std::size_t>(k);
    if (ntp.run_tp[i] == 0) break;
    const ntp::power::DomainBoost boost = boost_for(s, m, pw.run_tp[i]);
    std::printf(" %6d  %11d  %9.4f  %9.4f  %10d  %5.3f  %5.3f  %-13s %8.4f  %8.4f  %.4f\n", k,
                ntp.run_tp[i], ntp.speed[i], ntp.share[i], pw.run_tp[i], boost.need, boost.speedup,
                ntp::power::to_string(boost.cap), pw.speed[i], pw.share[i],
                m.step_s(ntp.run_tp[i]));
  }
  return ntp::cli::kExitOk;
}

int run_sim(int argc, char** argv) {
  CLI::App app{"Cluster-scale goodput simulator: compare dp-drop, spares, ckpt-restart, ntp and "
               "ntp-pw on a scenario (docs/sim.md).",
               "ntp sim"};
  app.require_subcommand(1);
  SimOptions o;
  auto add_common = [&o](CLI::App* sub) {
    sub->add_option("scenario", o.scenario, "scenario TOML file")->required()->check(ntp::cli::input_file());
    sub->add_option("--set", o.sets, "override a scenario key (TOML value), repeatable");
  };
  CLI::App* run_cmd = app.add_subcommand("run", "run a scenario (snapshot or timeline mode)");
  add_common(run_cmd);
  run_cmd->add_option("--mode", o.mode, "snapshot or timeline (overrides run.mode)")
      ->check(CLI::IsMember({"snapshot", "timeline"}));
  run_cmd->add_option("--sweep", o.sweep, "sweep one key: key=v1,v2,... (overrides [sweep])");
  run_cmd->add_option("--seeds", o.seeds, "Monte-Carlo seeds (overrides run.seeds)")
      ->check(CLI::Range(1, 10'000'000));
  run_cmd->add_option("--threads", o.threads, "threads (overrides run.threads)")
      ->check(CLI::Range(1, 1024));
  run_cmd->add_option("--threshold", o.thresholds,
                      "report the share of time with more than X % of GPUs failed: X[,Y...] "
                      "(overrides run.thresholds_percent)");
  run_cmd->add_option("--out", o.out, "write summary.json, CSV tables and SVG charts here")
      ->check(ntp::cli::output_folder());
  run_cmd->add_flag("--force", o.force, "write into a non-empty --out folder");
  run_cmd->add_flag("--json", o.json, "print the JSON summary instead of the text table");
  CLI::App* model_cmd = app.add_subcommand("model", "print the step-time model of a scenario");
  add_common(model_cmd);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? ntp::cli::kExitOk : ntp::cli::kExitBadInput;
  }
  try {
    return run_cmd->parsed() ? run(o) : model(o);
  } catch (const std::invalid_argument& e) {
    spdlog::error("ntp sim: {}", e.what());
    return ntp::cli::kExitBadInput;
  } catch (const std::exception& e) {
    spdlog::error("ntp sim: {}", e.what());
    return ntp::cli::kExitFailure;
  }
}

}  // namespace

NTP_REGISTER_COMMAND("sim", "cluster-scale goodput simulator (snapshot, timeline, sweeps)", run_sim);
