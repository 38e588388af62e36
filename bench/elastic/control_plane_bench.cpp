// Store operations and bytes per rank of the control plane, on a real
// redis-server: group creation (the world group) and one recovery (agreement
// and the survivors' world group) at N = 8, 16, 32, 64 ranks as threads, with
// per column the exponent of a power-law fit (0: constant per rank, 1:
// linear, 2: quadratic), a linear fit, and its projection to 10k and 100k
// ranks.
//
//   build/bench/elastic/control_plane_bench [--ranks 8,16,32,64]
//
// Counts, not times: the same run on any machine gives the same operations
// per rank except for the census taker's polls, which follow how fast the
// survivors register (its row is the max). Last, the CPU each survivor's
// thread spent in the agreement (ranks as threads that mostly wait in the
// store: the protocol's own work, not a host's oversubscription).
#include <cstdio>
#include <cstring>
#include <sstream>
#include <string>
#include <vector>

#include "elastic/control_plane_cost.h"
#include "tests/comm/redis_server.h"

namespace {

using ntp::elastic::ControlPlaneCost;
using ntp::elastic::PhaseCost;

std::vector<int> parse_ranks(int argc, char** argv) {
  std::vector<int> ranks = {8, 16, 32, 64};
  for (int i = 1; i + 1 < argc; ++i) {
    if (std::strcmp(argv[i], "--ranks") != 0) continue;
    ranks.clear();
    std::stringstream in(argv[i + 1]);
    for (std::string item; std::getline(in, item, ',');) ranks.push_back(std::stoi(item));
  }
  return ranks;
}

struct Column {
  const char* name;
  double (*value)(const PhaseCost&);
};

const Column kColumns[] = {
    {"mean ops", [](const PhaseCost& p) { return p.mean_operations(); }},
    {"max ops", [](const PhaseCost& p) { return static_cast<double>(p.max().operations); }},
    {"mean bytes", [](const PhaseCost& p) { return p.mean_bytes(); }},
    {"max bytes", [](const PhaseCost& p) { return static_cast<double>(p.max().bytes_sent + p.max().bytes_received); }},
};

void report(const char* phase, const std::vector<ControlPlaneCost>& runs, PhaseCost ControlPlaneCost::*member) {
  std::printf("\n%s (per rank)\n%8s", phase, "N");
  for (const Column& c : kColumns) std::printf(" %12s", c.name);
  std::printf("\n");
  std::vector<double> n;
  for (const auto& run : runs) {
    n.push_back(run.ranks);
    std::printf("%8d", run.ranks);
    for (const Column& c : kColumns) std::printf(" %12.1f", c.value(run.*member));
    std::printf("\n");
  }
  std::printf("%8s", "power");
  std::vector<ntp::elastic::LinearFit> lines;
  for (const Column& c : kColumns) {
    std::vector<double> y;
    for (const auto& run : runs) y.push_back(c.value(run.*member));
    const auto fit = ntp::elastic::fit_power(n, y);
    lines.push_back(ntp::elastic::fit_linear(n, y));
    std::printf("   N^%-7.2f", fit.exponent);
  }
  std::printf("\n%8s", "linear");
  for (const auto& line : lines) std::printf(" %5.0f%+6.1fN", line.intercept, line.slope);
  std::printf("\n");
  for (double big : {1e4, 1e5}) {
    std::printf("%8.0f", big);
    for (const auto& line : lines) std::printf(" %12.4g", line.at(big));
    std::printf("\n");
  }
}

// The agreement's own CPU per rank: mean over the survivors, and the most
// (the census taker's, which reads every registration).
void report_agreement_cpu(const std::vector<ControlPlaneCost>& runs) {
  std::printf("\nagreement: CPU of each survivor's thread in agree_membership, ms\n%8s %12s %12s\n", "N", "mean",
              "max");
  std::vector<double> n, mean, most;
  for (const auto& run : runs) {
    n.push_back(run.ranks);
    mean.push_back(1e3 * run.mean_agreement_cpu_s());
    most.push_back(1e3 * run.max_agreement_cpu_s());
    std::printf("%8d %12.3f %12.3f\n", run.ranks, mean.back(), most.back());
  }
  std::printf("%8s   N^%-7.2f   N^%-7.2f\n", "power", ntp::elastic::fit_power(n, mean).exponent,
              ntp::elastic::fit_power(n, most).exponent);
}

}  // namespace

int main(int argc, char** argv) {
  if (!ntp::comm::testing::RedisServer::available()) {
    std::printf("control_plane_bench: redis-server is not installed; nothing measured\n");
    return 0;
  }
  ntp::comm::testing::RedisServer server;
  std::vector<ControlPlaneCost> runs;
  for (int n : parse_ranks(argc, argv)) {
    runs.push_back(ntp::elastic::measure_control_plane(server.spec("bench" + std::to_string(n)), n));
  }
  std::printf("store operations and bytes per rank on %s (ranks as threads, Gloo over loopback)\n",
              server.spec().c_str());
  report("group creation: the world group", runs, &ControlPlaneCost::creation);
  report("one recovery: agreement + the survivors' world group", runs, &ControlPlaneCost::recovery);
  report_agreement_cpu(runs);
  return 0;
}
