#include <gtest/gtest.h>

#include <sstream>

#include "sim/report.h"
#include "sim/scenario_toml.h"
#include "sim/svg.h"
#include "test_scenarios.h"

namespace ntp::sim {
namespace {

int count(const std::string& text, const std::string& what) {
  int n = 0;
  for (auto pos = text.find(what); pos != std::string::npos; pos = text.find(what, pos + 1)) ++n;
  return n;
}

TEST(Svg, DrawsOneLinePerSeriesWithALegend) {
  Chart c{"t & t", "x", "y", "y2", {}};
  c.series.push_back({"a<b", {0, 1, 2}, {1, 2, 3}, false, true, false});
  c.series.push_back({"steps", {0, 1, 2}, {5, 6, 7}, true, false, true});
  const std::string svg = render_svg(c);
  EXPECT_EQ(count(svg, "<polyline"), 2);
  EXPECT_EQ(count(svg, "<circle"), 3);
  EXPECT_NE(svg.find("a&lt;b"), std::string::npos);
  EXPECT_NE(svg.find("t &amp; t"), std::string::npos);
  EXPECT_NE(svg.find("</svg>"), std::string::npos);
  c.series[0].y.pop_back();
  EXPECT_THROW(render_svg(c), std::invalid_argument);
}

TEST(Svg, AFlatNonNegativeLineIsDrawnFromZero) {
  Chart c{"flat", "x", "y", "", {}};
  c.series.push_back({"zero", {0, 1, 2}, {0, 0, 0}, false, false, false});
  EXPECT_EQ(render_svg(c).find(">-"), std::string::npos) << "a negative tick label";
  c.series[0].y = {-1, -1, -1};
  EXPECT_NE(render_svg(c).find(">-"), std::string::npos);
}

// 0..1700 rounds to 0..1800 by 200s; asked again of 0..1800 the step would
// be 500 and the top of the axis (1800) would carry no label.
TEST(Svg, TheTopOfEveryAxisIsALabelledTick) {
  Chart c{"rate", "x", "tokens/s", "", {}};
  c.series.push_back({"tokens/s", {0, 1}, {0, 1700}, false, false, false});
  const std::string svg = render_svg(c);
  EXPECT_NE(svg.find(">1800<"), std::string::npos) << svg;
  EXPECT_NE(svg.find(">1600<"), std::string::npos) << "the ticks go by the step the range was rounded to";
  EXPECT_EQ(svg.find(">1500<"), std::string::npos);
  c.series[0].y = {0, 1.2};  // steps of 0.2 summed would drift past 1.2 and drop it
  EXPECT_NE(render_svg(c).find(">1.2<"), std::string::npos) << render_svg(c);
}

// Two series of equal values: the offset one is drawn beside the other, not under it.
TEST(Svg, AnOffsetSeriesIsDrawnBesideAnEqualOne) {
  Chart c{"tp", "t", "tp", "", {}};
  c.series.push_back({"replica 0", {0, 1, 2}, {4, 4, 4}, true, false, false});
  c.series.push_back({"replica 1", {0, 1, 2}, {4, 4, 4}, true, false, false});
  const auto points = [](const std::string& svg, std::size_t n) {
    std::size_t at = 0;
    for (std::size_t i = 0; i <= n; ++i) at = svg.find("points='", at) + 8;
    return svg.substr(at, svg.find('\'', at) - at);
  };
  EXPECT_EQ(points(render_svg(c), 0), points(render_svg(c), 1)) << "equal values: one line hides the other";
  c.series[1].offset_px = 3;
  const std::string svg = render_svg(c);
  EXPECT_NE(points(svg, 0), points(svg, 1));
}

const char* const kSmall = testing::small_scenario_toml();

double j_energy(const Study& study) {
  return study_json(study)["points"][0]["timeline"]["policies"]["ntp-pw"]["boost_energy_kwh_per_day"]
      .get<double>();
}

TEST(Report, SweepOverSparesWritesTablesAndCharts) {
  const toml::table t = parse_scenario_text(kSmall, "small.toml");
  const Study study = run_study(t, "small.toml", parse_sweep_flag("spares.domains=0,2"));
  ASSERT_EQ(study.points.size(), 2u);
  EXPECT_EQ(study.points[1].scenario.spares.domains, 2);
  const std::string csv = timeline_summary_csv(study);
  EXPECT_EQ(count(csv, "\n"), 1 + 2 * 5);  // header + 2 points x 5 policies
  EXPECT_EQ(count(timeline_series_csv(study), "\n"), 1 + 2 * 10);
  EXPECT_EQ(spares_vs_pause_chart(study).series.size(), 5u);
  EXPECT_EQ(sweep_chart(study).series.size(), 5u);
  // Spares per policy (not ckpt-restart) on the left, ntp-pw's energy on the right.
  const Chart boost = spares_vs_boost_chart(study);
  ASSERT_EQ(boost.series.size(), 5u);
  EXPECT_EQ(boost.series.back().name, "ntp-pw energy");
  EXPECT_TRUE(boost.series.back().right_axis);
  EXPECT_EQ(boost.series[0].y[0], study.points[0].timeline->policy[0].spares_needed_max);
  EXPECT_GT(j_energy(study), 0.0);
  const nlohmann::json j = study_json(study);
  EXPECT_EQ(j["sweep_key"], "spares.domains");
  EXPECT_TRUE(j["points"][0]["timeline"]["policies"].contains("ntp-pw"));
  EXPECT_GT(j["points"][0]["healthy_step"]["mfu"].get<double>(), 0.0);
  // ckpt-restart pauses at every failure whatever the spares: no count.
  EXPECT_TRUE(j["points"][0]["timeline"]["policies"]["ckpt-restart"]["spares_for_zero_pause"].is_null());
  EXPECT_TRUE(j["points"][0]["timeline"]["policies"]["dp-drop"]["spares_for_zero_pause"].is_number());
  EXPECT_NE(csv.find(",ckpt-restart,"), std::string::npos);
  std::istringstream rows(csv);
  for (std::string row; std::getline(rows, row);) {
    if (row.find(",ckpt-restart,") == std::string::npos) continue;
    EXPECT_NE(row.find(",,"), std::string::npos) << row;  // empty spares_for_zero_pause
  }
}

TEST(Report, ScenarioAsRunParsesBackToTheSameStudy) {
  toml::table t = parse_scenario_text(kSmall, "small.toml");
  set_override(t, "failures.rate_multiplier", "3");
  const Study study = run_study(t, "small.toml", parse_sweep_flag("spares.domains=0,2"));
  toml::table again = parse_scenario_text(study.scenario_toml, "scenario.toml");
  const SweepSpec sweep = sweep_from_table(again, "scenario.toml");
  EXPECT_EQ(sweep.key, "spares.domains");
  EXPECT_EQ(sweep.values, (std::vector<std::string>{"0", "2"}));
  again.erase("sweep");
  const Study rerun = run_study(again, "scenario.toml", sweep);
  EXPECT_EQ(rerun.points[1].scenario.failures.rate_multiplier, 3.0);
  EXPECT_EQ(study_json(rerun)["points"], study_json(study)["points"]);
}

TEST(Report, SnapshotTableHasARowPerFractionAndPolicy) {
  toml::table t = parse_scenario_text(kSmall, "small.toml");
  set_override(t, "run.mode", "snapshot");
  const Study study = run_study(t, "small.toml", SweepSpec{});
  EXPECT_EQ(count(snapshot_csv(study), "\n"), 1 + 3 * 4);  // ckpt-restart has no static value
  EXPECT_EQ(loss_vs_failed_fraction_chart(study.points[0]).series.size(), 4u);
  // The table is fixed-width: header and every row of the same length.
  std::istringstream table(text_summary(study));
  std::string line;
  std::getline(table, line);  // healthy step
  std::getline(table, line);  // reconfiguration pause
  std::getline(table, line);
  EXPECT_NE(line.find("healthy_TP"), std::string::npos);
  const std::size_t width = line.size();
  for (int row = 0; row < 3; ++row) {
    std::getline(table, line);
    EXPECT_EQ(line.size(), width) << line;
  }
}

TEST(Report, TimelineTableIsAlignedAndSparesAreNotCountedForCheckpointRestart) {
  const toml::table t = parse_scenario_text(kSmall, "small.toml");
  const Study study = run_study(t, "small.toml", SweepSpec{});
  std::istringstream table(text_summary(study));
  std::string line;
  std::getline(table, line);  // healthy step
  std::getline(table, line);  // reconfiguration pause
  std::getline(table, line);  // seeds x days
  std::getline(table, line);
  ASSERT_EQ(line.rfind("policy", 0), 0u) << line;
  const std::size_t width = line.size();
  for (int row = 0; row < 5; ++row) {
    std::getline(table, line);
    EXPECT_EQ(line.size(), width) << line;
    if (line.rfind("ckpt-restart", 0) == 0) {
      EXPECT_EQ(line.back(), '-') << line;
    }
  }
}

TEST(Report, StringSweepValuesRoundTripThroughTheScenarioAsRun) {
  // --sweep takes bare words; scenario.toml must quote them to be TOML again.
  const toml::table t = parse_scenario_text(kSmall, "small.toml");
  const Study study =
      run_study(t, "small.toml", parse_sweep_flag("failures.distribution=weibull,exponential"));
  toml::table again = parse_scenario_text(study.scenario_toml, "scenario.toml");
  const SweepSpec sweep = sweep_from_table(again, "scenario.toml");
  EXPECT_EQ(sweep.key, "failures.distribution");
  ASSERT_EQ(sweep.values.size(), 2u);
  again.erase("sweep");
  const Study rerun = run_study(again, "scenario.toml", sweep);
  EXPECT_EQ(rerun.points[0].scenario.failures.distribution, FailureDist::kWeibull);
  EXPECT_EQ(rerun.points[1].scenario.failures.distribution, FailureDist::kExponential);
  EXPECT_EQ(study_json(rerun)["points"], study_json(study)["points"]);  // sweep values too
}

TEST(Report, ModeAndPolicyListCannotBeSwept) {
  const toml::table t = parse_scenario_text(kSmall, "small.toml");
  for (const char* flag : {"run.mode=snapshot,timeline", "policies.compare=ntp"}) {
    try {
      run_study(t, "small.toml", parse_sweep_flag(flag));
      FAIL() << flag;
    } catch (const std::invalid_argument& e) {
      const std::string key = std::string(flag).substr(0, std::string(flag).find('='));
      EXPECT_NE(std::string(e.what()).find("sweep: " + key), std::string::npos) << e.what();
    }
  }
}

TEST(Report, SweepValuesAreValidatedNamingTheKey) {
  const toml::table t = parse_scenario_text(kSmall, "small.toml");
  try {
    run_study(t, "small.toml", parse_sweep_flag("parallelism.tp=8,3"));
    FAIL();
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("parallelism.tp"), std::string::npos);
  }
}

}  // namespace
}  // namespace ntp::sim
