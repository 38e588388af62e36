// The control plane's store cost per rank grows at most linearly with the
// number of ranks: measured (operations and bytes, not time) on a real
// redis-server at N = 4, 8, 16, and fitted.
#include "elastic/control_plane_cost.h"

#include <gtest/gtest.h>

#include "tests/comm/redis_server.h"

namespace ntp::elastic {
namespace {

// Exponent of cost ~ n^e over the runs.
double exponent(const std::vector<ControlPlaneCost>& runs, double (*value)(const ControlPlaneCost&)) {
  std::vector<double> n, y;
  for (const auto& run : runs) {
    n.push_back(run.ranks);
    y.push_back(value(run));
  }
  return fit_power(n, y).exponent;
}

// A cost per rank that is constant reads near 0; linear near 1 (a little
// more on small n, where a constant part weighs); quadratic near 2.
constexpr double kConstant = 0.3;
constexpr double kLinear = 1.3;

TEST(ControlPlaneCost, OperationsPerRankStayConstantAndBytesGrowLinearlyOnRedis) {
  if (!comm::testing::RedisServer::available()) GTEST_SKIP() << "redis-server is not installed";
  comm::testing::RedisServer server;
  std::vector<ControlPlaneCost> runs;
  for (int n : {4, 8, 16}) runs.push_back(measure_control_plane(server.spec("n" + std::to_string(n)), n));
  for (const auto& run : runs) {
    ASSERT_EQ(run.creation.per_rank.size(), static_cast<std::size_t>(run.ranks));
    ASSERT_EQ(run.recovery.per_rank.size(), static_cast<std::size_t>(run.ranks - 1));
    EXPECT_GT(run.creation.max().operations, 0u);
  }
  const auto creation_ops = [](const ControlPlaneCost& c) { return static_cast<double>(c.creation.max().operations); };
  const auto creation_bytes = [](const ControlPlaneCost& c) { return static_cast<double>(c.creation.max().bytes()); };
  const auto recovery_ops = [](const ControlPlaneCost& c) { return c.recovery.mean_operations(); };
  const auto recovery_bytes = [](const ControlPlaneCost& c) { return static_cast<double>(c.recovery.max().bytes()); };
  EXPECT_LT(exponent(runs, creation_ops), kConstant);
  EXPECT_LT(exponent(runs, creation_bytes), kLinear);
  EXPECT_LT(exponent(runs, recovery_ops), kConstant);
  EXPECT_LT(exponent(runs, recovery_bytes), kLinear);
}

// The bounds above reject the costs the control plane had before: every rank
// reading every member's join record (N ranks each) and every member's
// address record (N-1 addresses of 136 bytes each).
TEST(ControlPlaneCost, TheBoundsRejectAQuadraticCostPerRank) {
  std::vector<double> n = {4, 8, 16}, quadratic, linear, constant;
  for (double x : n) {
    quadratic.push_back(x * (x * 3 + (x - 1) * 136));
    linear.push_back(200 + 300 * x);
    constant.push_back(5);
  }
  EXPECT_GT(fit_power(n, quadratic).exponent, kLinear);
  EXPECT_LT(fit_power(n, linear).exponent, kLinear);
  EXPECT_GT(fit_power(n, linear).exponent, kConstant);
  EXPECT_NEAR(fit_power(n, constant).exponent, 0.0, 1e-9);
  const LinearFit line = fit_linear(n, linear);
  EXPECT_NEAR(line.intercept, 200, 1e-6);
  EXPECT_NEAR(line.slope, 300, 1e-6);
  EXPECT_THROW(fit_power({4, 4}, {1, 2}), std::invalid_argument);
}

}  // namespace
}  // namespace ntp::elastic
