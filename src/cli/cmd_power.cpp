// `ntp power`: the power policy's command-line face.
//   ntp power plan  - what the boost-and-rebalance policy would do (pure)
//   ntp power show  - devices, their limits, draw and clocks, through a controller
//                     (reads only: it never sets anything)
//   ntp power reset - put devices back to their default limits (after a job
//                     was killed with SIGKILL while boosted)
// Formats and formulas: docs/power.md.
#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include <charconv>
#include <cmath>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include <spdlog/spdlog.h>

#include "cli/command.h"
#include "power/boost_policy.h"
#include "power/power_mode.h"

namespace ntp::cli {
namespace {

namespace pw = ntp::power;

// Bad input to a flag: the message names the flag; main maps it to exit 2.
struct FlagError : std::invalid_argument {
  FlagError(const std::string& flag, const std::string& what)
      : std::invalid_argument(flag + ": " + what) {}
};

struct PlanArgs {
  int tp = 0;
  std::string active;
  std::string need;  // per-replica needed speed-ups; empty = n/k
  pw::DevicePowerModel model;
  double headroom_w = 0.0;
  long global_batch = 0;
  bool json = false;
};

// "a, b,c" -> {"a", "b", "c"}: entries trimmed, empty ones kept (and rejected
// by the caller), so "8,,8" is an error rather than two replicas.
std::vector<std::string> split_commas(const std::string& text) {
  std::vector<std::string> entries;
  std::size_t begin = 0;
  while (begin <= text.size()) {
    const std::size_t end = std::min(text.find(',', begin), text.size());
    std::string entry = text.substr(begin, end - begin);
    entry.erase(0, entry.find_first_not_of(" \t"));
    entry.erase(entry.find_last_not_of(" \t") + 1);
    entries.push_back(std::move(entry));
    begin = end + 1;
  }
  return entries;
}

// "8,7,4" -> {8, 7, 4}; each entry an integer in [0, tp].
std::vector<int> parse_active(const std::string& text, int tp) {
  std::vector<int> active;
  for (const std::string& entry : split_commas(text)) {
    int k = 0;
    const auto [ptr, ec] = std::from_chars(entry.data(), entry.data() + entry.size(), k);
    const std::string where = fmt::format("entry {} ('{}')", active.size(), entry);
    if (entry.empty() || ec != std::errc() || ptr != entry.data() + entry.size()) {
      throw FlagError("--active", where + " is not an integer; expected e.g. \"8,7,8\"");
    }
    if (k < 0 || k > tp) {
      throw FlagError("--active", fmt::format("{} is outside 0..--tp {}", where, tp));
    }
    active.push_back(k);
  }
  return active;
}

// "1.14,0,1.2" -> one needed speed-up per replica (0 = n/k).
std::vector<double> parse_need(const std::string& text, std::size_t replicas) {
  std::vector<double> needs;
  if (text.empty()) return needs;
  for (const std::string& entry : split_commas(text)) {
    double v = 0.0;
    const auto [ptr, ec] = std::from_chars(entry.data(), entry.data() + entry.size(), v);
    const std::string where = fmt::format("entry {} ('{}')", needs.size(), entry);
    if (entry.empty() || ec != std::errc() || ptr != entry.data() + entry.size() ||
        !std::isfinite(v) || v < 0.0) {
      throw FlagError("--need", where + " is not a speed-up >= 0; expected e.g. \"1.14,0\"");
    }
    needs.push_back(v);
  }
  if (needs.size() != replicas) {
    throw FlagError("--need", fmt::format("{} entries for {} replicas in --active", needs.size(),
                                          replicas));
  }
  return needs;
}

void check_finite(double value, const std::string& flag, bool ok, const std::string& rule) {
  if (!std::isfinite(value) || !ok) throw FlagError(flag, fmt::format("{} {}", rule, value));
}

void validate_plan_args(const PlanArgs& a) {
  if (a.tp < 1) throw FlagError("--tp", fmt::format("must be >= 1, got {}", a.tp));
  check_finite(a.model.tdp_w, "--tdp", a.model.tdp_w > 0, "must be > 0 W, got");
  check_finite(a.model.max_frac, "--max-frac", a.model.max_frac >= 1, "must be >= 1, got");
  check_finite(a.model.alpha, "--alpha", a.model.alpha > 0, "must be > 0, got");
  check_finite(a.headroom_w, "--headroom-w", a.headroom_w >= 0, "must be >= 0 W, got");
  if (a.global_batch < 1 || a.global_batch > (1L << 53)) {
    throw FlagError("--global-batch", fmt::format("must be in [1, 2^53], got {}", a.global_batch));
  }
}

void print_json(const pw::BoostPlan& plan) {
  nlohmann::ordered_json replicas = nlohmann::ordered_json::array();
  for (const pw::ReplicaBoost& r : plan.replicas) {
    replicas.push_back({{"active", r.active},
                        {"limit_w", r.limit_w},
                        {"speedup", r.speedup},
                        {"share", r.share},
                        {"need", r.need},
                        {"cap", pw::to_string(r.cap)}});
  }
  std::printf("%s\n", nlohmann::ordered_json{{"replicas", replicas}}.dump().c_str());
}

void print_table(const PlanArgs& a, const pw::BoostPlan& plan) {
  std::printf("TP %d: domain budget %d x %.1f W + %.1f W headroom = %.1f W; device max %.1f W; "
              "alpha %.3g\n",
              a.tp, a.tp, a.model.tdp_w, a.headroom_w, a.tp * a.model.tdp_w + a.headroom_w,
              a.model.max_frac * a.model.tdp_w, a.model.alpha);
  std::printf("%7s %8s %9s %8s %8s %8s  %s\n", "replica", "active", "limit_w", "need", "speedup",
              "share", "cap");
  for (std::size_t i = 0; i < plan.replicas.size(); ++i) {
    const pw::ReplicaBoost& r = plan.replicas[i];
    const std::string active = fmt::format("{}/{}", r.active, a.tp);
    const std::string need = r.active == 0 ? "-" : fmt::format("{:.4f}", r.need);
    const char* cap = r.cap == pw::BoostCap::none ? "-" : pw::to_string(r.cap);
    std::printf("%7zu %8s %9.1f %8s %8.4f %8ld  %s\n", i, active.c_str(), r.limit_w, need.c_str(),
                r.speedup, r.share, cap);
  }
}

int run_plan(const PlanArgs& args) {
  validate_plan_args(args);
  const std::vector<int> active = parse_active(args.active, args.tp);
  bool any_active = false;
  for (const int k : active) any_active = any_active || k > 0;
  if (!any_active) {
    spdlog::error("ntp power plan: every replica sits out (--active \"{}\"): no one can take the global batch",
                  args.active);
    return kExitImpossible;
  }
  const std::vector<double> needs = parse_need(args.need, active.size());
  const pw::BoostPlan plan =
      pw::plan_boost(args.tp, active, needs, args.headroom_w, args.global_batch, args.model);
  if (args.json) {
    print_json(plan);
  } else {
    print_table(args, plan);
  }
  return kExitOk;
}

struct DeviceArgs {
  std::string backend = "nvml";
  std::string devices;  // comma-separated NVML indices or UUIDs; empty = all
  std::string nvml_library = "libnvidia-ml.so.1";
  int simulated_devices = 4;
};

std::unique_ptr<pw::PowerController> open_controller(const DeviceArgs& args) {
  pw::ControllerOptions options;
  options.simulated_devices = args.simulated_devices;
  if (!args.devices.empty()) options.nvml.devices = split_commas(args.devices);
  options.nvml.library = args.nvml_library;
  pw::PowerMode mode = pw::PowerMode::off;
  try {
    mode = pw::parse_power_mode(args.backend);
  } catch (const std::invalid_argument&) {
    throw FlagError("--backend", "must be nvml or simulated, got '" + args.backend + "'");
  }
  if (mode == pw::PowerMode::off) throw FlagError("--backend", "must be nvml or simulated");
  if (args.simulated_devices < 0) {
    throw FlagError("--simulated-devices", fmt::format("must be >= 0, got {}", args.simulated_devices));
  }
  return pw::make_power_controller(mode, options);
}

// "1980", or "-" where the device does not report the clock.
std::string mhz_text(const std::optional<unsigned>& mhz) { return mhz ? std::to_string(*mhz) : "-"; }

// Reads every device, sets nothing.
int run_show(const DeviceArgs& args) {
  const auto controller = open_controller(args);
  std::printf("%-48s %-24s %9s %9s %9s %9s %9s %7s %7s\n", "device", "model", "min_w", "max_w",
              "default_w", "limit_w", "usage_w", "sm_mhz", "mem_mhz");
  for (int d = 0; d < controller->device_count(); ++d) {
    const pw::LimitRange range = controller->limit_range(d);
    const std::string model = controller->product_name(d);
    const pw::Clocks clocks = controller->clocks(d);
    std::printf("%-48s %-24s %9.1f %9.1f %9.1f %9.1f %9.1f %7s %7s\n", controller->device_name(d).c_str(),
                model.empty() ? "-" : model.c_str(), range.min_w, range.max_w, controller->default_limit_w(d),
                controller->get_limit_w(d), controller->power_usage_w(d), mhz_text(clocks.sm_mhz).c_str(),
                mhz_text(clocks.mem_mhz).c_str());
  }
  return kExitOk;
}

int run_reset(const DeviceArgs& args) {
  const auto controller = open_controller(args);
  for (int d = 0; d < controller->device_count(); ++d) {
    const double limit = controller->default_limit_w(d);
    controller->set_limit_w(d, limit);
    std::printf("%s: limit %.1f W (default)\n", controller->device_name(d).c_str(), limit);
  }
  return kExitOk;
}

void add_device_options(CLI::App& command, DeviceArgs& args) {
  command.add_option("--backend", args.backend, "nvml or simulated")->capture_default_str();
  command.add_option("--devices", args.devices,
                     "comma-separated NVML indices or UUIDs (default: all)");
  command.add_option("--nvml-library", args.nvml_library, "NVML shared library to load")
      ->capture_default_str();
  command.add_option("--simulated-devices", args.simulated_devices,
                     "device count of the simulated backend")
      ->capture_default_str();
}

int run_power(int argc, char** argv) {
  CLI::App app{"Power boosting: plan limits and batch shares, inspect and reset devices",
               "ntp power"};
  app.require_subcommand(1);
  PlanArgs plan;
  CLI::App* plan_cmd = app.add_subcommand(
      "plan", "what the boost-and-rebalance policy does for one k per replica");
  plan_cmd->add_option("--tp", plan.tp, "TP degree n of a healthy replica (GPUs per domain)")
      ->required();
  plan_cmd->add_option("--active", plan.active, "active GPUs k per replica, e.g. \"8,7,8\"")
      ->required();
  plan_cmd->add_option("--need", plan.need,
                       "per-replica speed-up needed to keep pace, e.g. \"0,1.14\" (0 = n/k, the "
                       "default)");
  plan_cmd->add_option("--tdp", plan.model.tdp_w, "TDP per GPU in W")->capture_default_str();
  plan_cmd->add_option("--max-frac", plan.model.max_frac, "device maximum as a multiple of TDP")
      ->capture_default_str();
  plan_cmd->add_option("--headroom-w", plan.headroom_w,
                       "power per domain beyond n x TDP (W)")->capture_default_str();
  plan_cmd->add_option("--alpha", plan.model.alpha, "speed-vs-power exponent")
      ->capture_default_str();
  plan_cmd->add_option("--global-batch", plan.global_batch, "sequences per step")->required();
  plan_cmd->add_flag("--json", plan.json, "print JSON instead of a table");
  DeviceArgs device;
  CLI::App* show_cmd =
      app.add_subcommand("show", "devices: model, limit ranges, limits, usage and clocks (reads only)");
  add_device_options(*show_cmd, device);
  CLI::App* reset_cmd = app.add_subcommand("reset", "set devices back to their default limits");
  add_device_options(*reset_cmd, device);

  try {
    app.parse(argc, argv);
    if (plan_cmd->parsed()) return run_plan(plan);
    if (show_cmd->parsed()) return run_show(device);
    return run_reset(device);
  } catch (const CLI::ParseError& e) {
    if (e.get_exit_code() == 0) return app.exit(e);  // --help
    spdlog::error("ntp power: {}", e.what());
    return kExitBadInput;
  } catch (const std::invalid_argument& e) {  // FlagError, or the policy's own checks
    spdlog::error("ntp power: {}", e.what());
    return kExitBadInput;
  } catch (const pw::PowerError& e) {
    spdlog::error("ntp power: {}", e.what());
    return kExitFailure;
  }
}

}  // namespace

NTP_REGISTER_COMMAND("power", "plan power boosts and batch shares; show or reset device limits",
                     run_power);

}  // namespace ntp::cli
