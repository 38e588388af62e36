// The run report's charts from metrics and events alone (cli/run_report.h):
// replicas at the same TP are both seen, one failure is one mark, and the
// page names the model that trained.
#include "cli/run_report.h"

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "train/run_dir.h"

namespace ntp::cli {
namespace {

namespace fs = std::filesystem;

// Steps 0..n-1 at one second each, every replica at `tp`.
std::vector<train::StepMetrics> steps(int n, std::vector<std::int64_t> tp) {
  std::vector<train::StepMetrics> out;
  for (int s = 0; s < n; ++s) {
    train::StepMetrics m;
    m.step = s;
    m.tokens = 1000;
    m.step_time_s = 1;
    m.tp = tp;
    m.time = 100.0 + s;
    m.loss = 5.0 - 0.1 * s;
    out.push_back(m);
  }
  return out;
}

const sim::Series* series(const sim::Chart& chart, const std::string& name) {
  for (const sim::Series& s : chart.series) {
    if (s.name.rfind(name, 0) == 0) return &s;
  }
  return nullptr;
}

TEST(RunReport, ReplicasAtTheSameTpAreDrawnApartAndSaidToOverlap) {
  const std::vector<sim::Chart> charts = run_charts(steps(4, {4, 4, 3}), {{{"event", "run_started"}, {"time", 99.0}}});
  const sim::Chart& tp = charts.at(3);
  const sim::Series* r0 = series(tp, "replica 0");
  const sim::Series* r1 = series(tp, "replica 1");
  ASSERT_TRUE(r0 && r1);
  EXPECT_EQ(r0->y, r1->y);
  EXPECT_NE(r0->offset_px, r1->offset_px) << "equal lines drawn on one another hide the first";
  EXPECT_NE(tp.title.find("(2 lines overlap: drawn 3 px apart)"), std::string::npos) << tp.title;
  EXPECT_EQ(run_charts(steps(4, {4, 3}), {}).at(3).title.find("overlap"), std::string::npos)
      << "replicas at different TPs overlap nowhere";
}

// A kill logged by the rank (failure_injected) and by its launcher
// (worker_exited) 20 ms apart is one failure; the same rank failing again
// after the recovery is another.
TEST(RunReport, OneFailureIsMarkedOnce) {
  const std::vector<nlohmann::json> events = {
      {{"event", "run_started"}, {"time", 99.0}},
      {{"event", "failure_injected"}, {"time", 101.00}, {"rank", 3}, {"step", 2}},
      {{"event", "worker_exited"}, {"time", 101.02}, {"rank", 3}, {"signal", 9}},
      {{"event", "rank_fenced"}, {"time", 101.05}, {"rank", 3}},
      {{"event", "worker_exited"}, {"time", 101.03}, {"rank", 1}, {"signal", 9}},
      {{"event", "step_resumed"}, {"time", 102.0}, {"epoch", 1}, {"step", 2}},
      {{"event", "failure_injected"}, {"time", 103.0}, {"rank", 3}, {"step", 4}},
  };
  const std::vector<sim::Chart> charts = run_charts(steps(6, {2, 2}), events);
  const sim::Series* failures = series(charts.at(3), "failure");
  ASSERT_NE(failures, nullptr);
  // Three points a mark (up the axis and down again): ranks 3 and 1, then rank 3 again.
  const std::vector<double> want = {2.0, 2.0, 2.0, 2.03, 2.03, 2.03, 4.0, 4.0, 4.0};
  ASSERT_EQ(failures->x.size(), want.size());
  for (std::size_t i = 0; i < want.size(); ++i) EXPECT_NEAR(failures->x[i], want[i], 1e-9) << i;
}

TEST(RunReport, ThePageNamesTheModelThatTrained) {
  const fs::path dir = fs::temp_directory_path() / ("ntp_run_report_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  const train::RunDir run = train::RunDir::create(dir);
  run.event("run_started", {{"job", "model gpt2_124M.bin (gpt2: 12 layers, 12 heads, hidden 768, vocab 50257, "
                                    "124.5M parameters) & more"}});
  for (const train::StepMetrics& m : steps(2, {1})) run.append_metrics(m);
  std::ifstream in(write_run_report(dir));
  const std::string html{std::istreambuf_iterator<char>(in), {}};
  EXPECT_NE(html.find("<p>model gpt2_124M.bin (gpt2: 12 layers, 12 heads, hidden 768, vocab 50257, 124.5M "
                      "parameters) &amp; more</p>"),
            std::string::npos)
      << html.substr(0, 600);
  fs::remove_all(dir);
}

}  // namespace
}  // namespace ntp::cli
