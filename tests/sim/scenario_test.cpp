#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "sim/scenario_toml.h"
#include "sim/study.h"

namespace ntp::sim {
namespace {

// Parses TOML text and returns the error message ("" when it is accepted).
std::string error_of(const std::string& text) {
  try {
    scenario_from_table(parse_scenario_text(text, "s.toml"), "s.toml");
  } catch (const std::invalid_argument& e) {
    return e.what();
  }
  return "";
}

// Pauses are "plan" by default; a number (as scenario files had) is kept as
// a constant; any other word is refused naming the key.
TEST(Scenario, ReconfigurationPausesArePlannedUnlessSet) {
  const auto parse = [](const std::string& text) {
    return scenario_from_table(parse_scenario_text(text, "s.toml"), "s.toml");
  };
  const Scenario planned = parse("");
  EXPECT_FALSE(planned.policies.reconfig_s.has_value());
  EXPECT_FALSE(planned.policies.rejoin_s.has_value());
  EXPECT_EQ(planned.policies.protocol_s, 10.0);
  EXPECT_EQ(planned.model.state_bytes, 12);
  const Scenario constant = parse("[policies]\nreconfig_s = 60\nrejoin_s = \"plan\"\n");
  EXPECT_EQ(constant.policies.reconfig_s, 60.0);
  EXPECT_FALSE(constant.policies.rejoin_s.has_value());
  EXPECT_NE(error_of("[policies]\nreconfig_s = \"auto\"\n").find("policies.reconfig_s"), std::string::npos);
  EXPECT_NE(error_of("[policies]\nrejoin_s = -1\n").find("policies.rejoin_s"), std::string::npos);
}

TEST(Scenario, EmptyFileGivesTheReferenceDefaults) {
  const Scenario s = scenario_from_table(parse_scenario_text("", "s.toml"), "s.toml");
  EXPECT_EQ(s.cluster.gpus, 32768);
  EXPECT_EQ(s.dp(), 256);
  EXPECT_EQ(s.ffn(), 4 * 20480);
  EXPECT_EQ(s.min_tp(), 16);
}

TEST(Scenario, ShippedExamplesParse) {
  for (const char* name : {"b200_32k.toml", "gb200_nvl72.toml", "failslow.toml"}) {
    const std::string path = std::string(NTP_SOURCE_DIR) + "/examples/sim/" + name;
    const Scenario s = scenario_from_table(load_scenario_file(path), path);
    EXPECT_GT(s.dp(), 0) << name;
  }
}

// Written, read back and written again gives the same text: every key
// scenario_to_table writes is read to the value it wrote.
std::string resolved_text(const Scenario& s) {
  std::ostringstream os;
  os << scenario_to_table(s);
  return os.str();
}

TEST(Scenario, ResolvedScenarioReadsBackToItself) {
  std::vector<std::string> texts;
  for (const char* name : {"b200_32k.toml", "gb200_nvl72.toml", "failslow.toml"}) {
    const std::string path = std::string(NTP_SOURCE_DIR) + "/examples/sim/" + name;
    texts.push_back(resolved_text(scenario_from_table(load_scenario_file(path), path)));
  }
  texts.push_back(resolved_text(scenario_from_table(parse_scenario_text(
      "[failures]\ndistribution='weibull'\nweibull_shape=0.7\nblast_radius='domain'\n"
      "[failures.hardware.repair]\ndist='lognormal'\nmean_hours=50\nsigma=0.5\n"
      "[failures.software.repair]\ndist='uniform'\nmin_hours=1\nmax_hours=3\n"
      "[policies]\ncompare=['ntp','dp-drop']\npack=true\n[policies.ckpt]\ninterval_hours=2\n"
      "[run]\nmode='snapshot'\n",
      "s.toml"), "s.toml")));
  for (const std::string& text : texts) {
    const Scenario again = scenario_from_table(parse_scenario_text(text, "r.toml"), "r.toml");
    EXPECT_EQ(resolved_text(again), text);
  }
  EXPECT_NE(texts[3].find("lognormal"), std::string::npos);
  EXPECT_NE(texts[3].find("weibull"), std::string::npos);
  // A broken writer is caught: dropping a key changes what is read back.
  toml::table lossy = scenario_to_table(scenario_from_table(parse_scenario_text(
      "[spares]\ndomains = 7\n", "s.toml"), "s.toml"));
  lossy["spares"].as_table()->erase("domains");
  std::ostringstream os;
  os << lossy;
  EXPECT_NE(resolved_text(scenario_from_table(parse_scenario_text(os.str(), "l.toml"), "l.toml")),
            resolved_text(scenario_from_table(parse_scenario_text("[spares]\ndomains = 7\n", "s.toml"), "s.toml")));
}

// The default column of docs/sim.md's key tables, checked against the code:
// every number, bool and quoted string default equals the resolved default
// scenario's value for that key.
struct DocDefault {
  std::string key;   // dotted
  std::string cell;  // the default column, trimmed
};

std::vector<DocDefault> documented_defaults(const std::string& markdown) {
  std::vector<DocDefault> out;
  std::istringstream in(markdown);
  std::string section;
  for (std::string line; std::getline(in, line);) {
    if (line.rfind("### `[", 0) == 0) {
      section = line.substr(6, line.find(']') - 6);
      if (line.find("`, `[") != std::string::npos) section.clear();  // keys carry their table
      continue;
    }
    if (line.rfind("## ", 0) == 0) section = "-";  // past the scenario tables
    if (section == "-" || line.rfind("| `", 0) != 0) continue;
    std::vector<std::string> cells;
    for (std::size_t at = 1, bar; (bar = line.find('|', at)) != std::string::npos; at = bar + 1) {
      std::string c = line.substr(at, bar - at);
      c.erase(0, c.find_first_not_of(' '));
      c.erase(c.find_last_not_of(' ') + 1);
      cells.push_back(c);
    }
    if (cells.size() < 4 || cells[0].find("`,") != std::string::npos) continue;
    const std::string key = cells[0].substr(1, cells[0].size() - 2);
    out.push_back({section.empty() ? key : section + "." + key, cells[2]});
  }
  return out;
}

TEST(Scenario, DocumentedDefaultsMatchTheCode) {
  std::ifstream in(std::string(NTP_SOURCE_DIR) + "/docs/sim.md");
  std::stringstream text;
  text << in.rdbuf();
  const toml::table defaults = scenario_to_table(Scenario{});
  int checked = 0;
  for (const DocDefault& d : documented_defaults(text.str())) {
    const toml::node_view<const toml::node> value = defaults.at_path(d.key);
    std::size_t used = 0;
    double number = 0;
    try {
      number = std::stod(d.cell, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    if (used == d.cell.size() && used > 0) {
      ASSERT_TRUE(value.is_number()) << d.key;
      EXPECT_NEAR(value.value<double>().value(), number, 1e-4 * std::max(1.0, std::abs(number)))
          << d.key;
      ++checked;
    } else if (d.cell == "false" || d.cell == "true") {
      EXPECT_EQ(value.value<bool>(), d.cell == "true") << d.key;
      ++checked;
    } else if (d.cell.size() > 4 && d.cell.rfind("`\"", 0) == 0) {
      EXPECT_EQ(value.value<std::string>(), d.cell.substr(2, d.cell.size() - 4)) << d.key;
      ++checked;
    }
  }
  EXPECT_GT(checked, 50);  // the tables were found and read
  // A wrong default in the docs is caught: it is read with its key and differs.
  const std::vector<DocDefault> wrong =
      documented_defaults("### `[cluster]`\n| `gpus` | GPUs | 32769 | GPUs |\n");
  ASSERT_EQ(wrong.size(), 1u);
  EXPECT_EQ(wrong[0].key, "cluster.gpus");
  EXPECT_NE(defaults.at_path(wrong[0].key).value<double>().value(), std::stod(wrong[0].cell));
}

TEST(Scenario, RejectsUnknownKeysNamingThem) {
  EXPECT_NE(error_of("[cluster]\ngpuz = 8\n").find("cluster.gpuz: unknown key"), std::string::npos);
  EXPECT_NE(error_of("[clusterr]\n").find("clusterr: unknown key"), std::string::npos);
  EXPECT_NE(error_of("[failures.hardware.repair]\ndist='fixed'\nhourz=1\n")
                .find("failures.hardware.repair.hourz"),
            std::string::npos);
}

TEST(Scenario, RejectsBadValuesNamingTheField) {
  EXPECT_NE(error_of("[model]\nlayers = 0\n").find("model.layers"), std::string::npos);
  EXPECT_NE(error_of("[cluster]\ngpus = 'many'\n").find("cluster.gpus: expected an integer"),
            std::string::npos);
  EXPECT_NE(error_of("[efficiency]\ngemm = 1.5\n").find("efficiency.gemm"), std::string::npos);
  EXPECT_NE(error_of("[run]\nmode = 'fast'\n").find("run.mode: 'fast' is not one of"),
            std::string::npos);
  EXPECT_NE(error_of("[policies]\ncompare = ['ntp', 'magic']\n").find("policies.compare[1]"),
            std::string::npos);
  EXPECT_NE(error_of("[failures.software]\nshare = 0.5\n").find("failures.software.share"),
            std::string::npos);
  EXPECT_NE(error_of("[failures.hardware.repair]\ndist='uniform'\nmin_hours=5\nmax_hours=1\n")
                .find("failures.hardware.repair.max_hours"),
            std::string::npos);
  EXPECT_NE(error_of("[failures]\nrate_per_gpu_day=1\nmtbf_gpu_hours=5\n").find("mtbf_gpu_hours"),
            std::string::npos);
  EXPECT_NE(error_of("[parallelism]\nalign = 0\n").find("parallelism.align"), std::string::npos);
  EXPECT_NE(error_of("[efficiency]\nunaligned_gemm = 0\n").find("efficiency.unaligned_gemm"),
            std::string::npos);
  EXPECT_NE(error_of("[efficiency]\ngemm_align_elements = 0\n").find("efficiency.gemm_align_elements"),
            std::string::npos);
  EXPECT_NE(error_of("[model]\nffn = 16\n").find("parallelism.tp"), std::string::npos);
  EXPECT_NE(error_of("[failslow]\nslowdown = { dist = 'uniform', min = 2, max = 1.5 }\n").find("failslow.slowdown.max"),
            std::string::npos);
  EXPECT_NE(error_of("[failslow]\nslowdown = { dist = 'choice', factors = [2, 3], probs = [0.5, 0.6] }\n")
                .find("failslow.slowdown.probs"),
            std::string::npos);
  EXPECT_NE(error_of("[failslow]\nslowdown = { dist = 'fixed', factor = 0.5 }\n").find("failslow.slowdown.factor"),
            std::string::npos);
  EXPECT_NE(error_of("[failslow]\nrate = 1\n").find("failslow.rate: unknown key"), std::string::npos);
  EXPECT_NE(error_of("[snapshot]\nfailed_fractions = [0.1, 2]\n")
                .find("snapshot.failed_fractions[1]"),
            std::string::npos);
}

TEST(Scenario, RejectsInconsistentShapesNamingTheField) {
  EXPECT_NE(error_of("[parallelism]\ntp = 12\n").find("parallelism.tp"), std::string::npos);
  EXPECT_NE(error_of("[parallelism]\ndp = 7\n").find("parallelism.dp"), std::string::npos);
  EXPECT_NE(error_of("[parallelism]\npp = 3\n").find("parallelism.pp"), std::string::npos);
  EXPECT_NE(error_of("[failures]\nblast_radius = 3\n").find("failures.blast_radius"),
            std::string::npos);
  EXPECT_NE(error_of("[cluster]\ngpus = 1000\n").find("cluster.gpus"), std::string::npos);
}

TEST(Scenario, AcceptsWordValuesAndMtbf) {
  const Scenario s = scenario_from_table(
      parse_scenario_text("[failures]\nblast_radius = 'domain'\nmtbf_gpu_hours = 48000\n"
                          "[policies.ckpt]\ninterval_hours = 'optimal'\n",
                          "s.toml"),
      "s.toml");
  EXPECT_EQ(s.failures.blast_radius, 32);
  EXPECT_DOUBLE_EQ(s.failures.rate_per_gpu_day, 24.0 / 48000.0);
  EXPECT_EQ(s.policies.ckpt.interval_hours, 0.0);
}

TEST(Scenario, OverridesParseTomlOrFallBackToStrings) {
  toml::table t = parse_scenario_text("[run]\nseeds = 3\n", "s.toml");
  set_override(t, "run.seeds", "7");
  set_override(t, "run.mode", "snapshot");  // not TOML: a plain string
  set_override(t, "power.headroom_w", "1.5e3");
  const Scenario s = scenario_from_table(t, "s.toml");
  EXPECT_EQ(s.run.seeds, 7);
  EXPECT_EQ(s.run.mode, Mode::kSnapshot);
  EXPECT_DOUBLE_EQ(s.power.headroom_w, 1500.0);
  EXPECT_THROW(set_override(t, "run.seeds.x", "1"), std::invalid_argument);
}

TEST(Scenario, SweepSpecsFromFlagAndTable) {
  const SweepSpec flag = parse_sweep_flag("spares.domains=0,4,8");
  EXPECT_EQ(flag.key, "spares.domains");
  EXPECT_EQ(flag.values, (std::vector<std::string>{"0", "4", "8"}));
  EXPECT_THROW(parse_sweep_flag("spares.domains"), std::invalid_argument);
  const toml::table t =
      parse_scenario_text("[sweep]\nkey = 'parallelism.tp'\nvalues = [8, 16]\n", "s.toml");
  const SweepSpec table = sweep_from_table(t, "s.toml");
  EXPECT_EQ(table.key, "parallelism.tp");
  EXPECT_EQ(table.values, (std::vector<std::string>{"8", "16"}));
  const toml::table bad = parse_scenario_text("[sweep]\nkey = 'x'\nvalue = [1]\n", "s.toml");
  EXPECT_THROW(sweep_from_table(bad, "s.toml"), std::invalid_argument);
}

}  // namespace
}  // namespace ntp::sim
