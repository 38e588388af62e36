#include "elastic/control_plane_cost.h"

#include <algorithm>
#include <cmath>
#include <exception>
#include <functional>
#include <memory>
#include <stdexcept>
#include <thread>
#include <utility>

#include <fmt/format.h>

#include "comm/group.h"
#include "elastic/membership.h"
#include "elastic/process_cpu.h"

namespace ntp::elastic {

double PhaseCost::mean_operations() const {
  double sum = 0;
  for (const auto& c : per_rank) sum += static_cast<double>(c.operations);
  return per_rank.empty() ? 0 : sum / static_cast<double>(per_rank.size());
}

double PhaseCost::mean_bytes() const {
  double sum = 0;
  for (const auto& c : per_rank) sum += static_cast<double>(c.bytes());
  return per_rank.empty() ? 0 : sum / static_cast<double>(per_rank.size());
}

comm::StoreCounts PhaseCost::max() const {
  comm::StoreCounts m;
  for (const auto& c : per_rank) {
    m.operations = std::max(m.operations, c.operations);
    m.bytes_sent = std::max(m.bytes_sent, c.bytes_sent);
    m.bytes_received = std::max(m.bytes_received, c.bytes_received);
  }
  return m;
}

double ControlPlaneCost::mean_agreement_cpu_s() const {
  double sum = 0;
  for (double s : agreement_cpu_s) sum += s;
  return agreement_cpu_s.empty() ? 0 : sum / static_cast<double>(agreement_cpu_s.size());
}

double ControlPlaneCost::max_agreement_cpu_s() const {
  return agreement_cpu_s.empty() ? 0 : *std::max_element(agreement_cpu_s.begin(), agreement_cpu_s.end());
}

namespace {

comm::GroupOptions world_options(const std::vector<int>& ranks, int rank, std::uint64_t epoch,
                                 std::chrono::milliseconds timeout) {
  comm::GroupOptions o;
  o.ranks = ranks;
  o.global_rank = rank;
  o.epoch = epoch;
  o.name = "world";
  o.timeout = timeout;
  o.sparse = true;  // as the trainer's world group
  return o;
}

// Runs body(i) on `count` threads; rethrows the first failure.
void run_ranks(int count, const std::function<void(int)>& body) {
  std::vector<std::exception_ptr> errors(static_cast<std::size_t>(count));
  std::vector<std::thread> threads;
  for (int i = 0; i < count; ++i) {
    threads.emplace_back([&, i] {
      try {
        body(i);
      } catch (...) {
        errors[static_cast<std::size_t>(i)] = std::current_exception();
      }
    });
  }
  for (auto& t : threads) t.join();
  for (const auto& e : errors) {
    if (e) std::rethrow_exception(e);
  }
}

}  // namespace

ControlPlaneCost measure_control_plane(const std::string& store_spec, int ranks, std::chrono::milliseconds timeout) {
  if (ranks < 2) throw std::invalid_argument(fmt::format("control plane cost: need 2 or more ranks, got {}", ranks));
  auto shared = comm::open_store(store_spec);
  std::vector<std::shared_ptr<comm::CountingStore>> stores;
  for (int r = 0; r < ranks; ++r) stores.push_back(std::make_shared<comm::CountingStore>(shared));
  std::vector<int> world(static_cast<std::size_t>(ranks));
  for (int r = 0; r < ranks; ++r) world[static_cast<std::size_t>(r)] = r;

  // Groups live until every member built theirs: a member that closes its
  // connections early fails the others' connects.
  std::vector<std::unique_ptr<comm::Group>> groups(world.size());
  ControlPlaneCost cost;
  cost.ranks = ranks;
  cost.creation.per_rank.resize(world.size());
  run_ranks(ranks, [&](int r) {
    groups[static_cast<std::size_t>(r)] =
        comm::create_group(stores[static_cast<std::size_t>(r)], world_options(world, r, 1, timeout));
    cost.creation.per_rank[static_cast<std::size_t>(r)] = stores[static_cast<std::size_t>(r)]->counts();
  });

  groups.clear();
  groups.resize(world.size());
  const int lost = ranks - 1;
  shared->set(dead_key(lost), comm::to_bytes("measured loss"));
  std::vector<int> survivors(world.begin(), world.end() - 1);
  cost.recovery.per_rank.resize(survivors.size());
  cost.agreement_cpu_s.resize(survivors.size());
  run_ranks(lost, [&](int r) {
    auto& store = *stores[static_cast<std::size_t>(r)];
    const comm::StoreCounts before = store.counts();
    MembershipOptions o;
    o.rank = r;
    o.members = world;
    o.epoch = 2;
    o.applied = 0;
    o.held_epoch = 1;
    o.settle = std::chrono::milliseconds(50);
    o.wait_for_blocked = timeout;
    o.deadline = timeout;
    const double cpu_before = thread_cpu_s();
    const Membership m = agree_membership(store, o);
    cost.agreement_cpu_s[static_cast<std::size_t>(r)] = thread_cpu_s() - cpu_before;
    groups[static_cast<std::size_t>(r)] =
        comm::create_group(stores[static_cast<std::size_t>(r)], world_options(m.ranks(), r, 2, timeout));
    cost.recovery.per_rank[static_cast<std::size_t>(r)] = store.counts() - before;
  });
  return cost;
}

namespace {

// Least squares y = a + b x; throws when the xs do not spread.
std::pair<double, double> least_squares(const std::vector<double>& x, const std::vector<double>& y) {
  double sx = 0, sy = 0, sxx = 0, sxy = 0;
  for (std::size_t i = 0; i < x.size(); ++i) {
    sx += x[i];
    sy += y[i];
    sxx += x[i] * x[i];
    sxy += x[i] * y[i];
  }
  const double k = static_cast<double>(x.size());
  const double spread = k * sxx - sx * sx;
  if (spread <= 0) throw std::invalid_argument("fit: need two distinct n");
  const double b = (k * sxy - sx * sy) / spread;
  return {(sy - b * sx) / k, b};
}

void check_points(const std::vector<double>& n, const std::vector<double>& cost) {
  if (n.size() != cost.size() || n.size() < 2) throw std::invalid_argument("fit: need two or more points");
}

}  // namespace

double PowerFit::at(double n) const { return coefficient * std::pow(n, exponent); }

PowerFit fit_power(const std::vector<double>& n, const std::vector<double>& cost) {
  check_points(n, cost);
  std::vector<double> x, y;
  for (std::size_t i = 0; i < n.size(); ++i) {
    if (n[i] <= 0 || cost[i] <= 0) throw std::invalid_argument("fit_power: points must be positive");
    x.push_back(std::log(n[i]));
    y.push_back(std::log(cost[i]));
  }
  const auto [a, b] = least_squares(x, y);
  return {std::exp(a), b};
}

LinearFit fit_linear(const std::vector<double>& n, const std::vector<double>& cost) {
  check_points(n, cost);
  const auto [a, b] = least_squares(n, cost);
  return {a, b};
}

}  // namespace ntp::elastic
