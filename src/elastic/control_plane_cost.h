#pragma once
// The control plane's cost per rank, measured on a real store: N ranks as
// threads, each with its own CountingStore over one shared store, create the
// world group of epoch 1 (Gloo over loopback); then the last rank is
// reported dead (as its launcher would) and the N-1 survivors agree on epoch
// 2 and create its world group: one recovery. For each phase, every rank's
// store operations and bytes. The benchmark (bench/elastic) runs it at N = 8
// to 64 and projects the fit; a test asserts the growth on small N.
#include <chrono>
#include <string>
#include <vector>

#include "comm/counting_store.h"

namespace ntp::elastic {

struct PhaseCost {
  std::vector<comm::StoreCounts> per_rank;
  double mean_operations() const;
  double mean_bytes() const;
  comm::StoreCounts max() const;  // the largest count of each kind over the ranks
};

struct ControlPlaneCost {
  int ranks = 0;
  PhaseCost creation;  // the world group of epoch 1, every rank
  PhaseCost recovery;  // agreement on epoch 2 and its world group, the survivors
  // Per survivor: the CPU seconds its thread spent in the agreement alone
  // (agree_membership). The ranks are threads that mostly wait in the store,
  // not training processes sharing the cores, so this is the protocol's own
  // work per rank.
  std::vector<double> agreement_cpu_s;
  double mean_agreement_cpu_s() const;
  double max_agreement_cpu_s() const;
};

// Throws std::runtime_error when a phase fails (the first rank's error).
ControlPlaneCost measure_control_plane(const std::string& store_spec, int ranks,
                                       std::chrono::milliseconds timeout = std::chrono::seconds(60));

// cost = coefficient * n^exponent, least squares on log-log: exponent 0 is a
// constant cost per rank, 1 linear, 2 quadratic. Pure; needs two distinct n.
struct PowerFit {
  double coefficient = 0;
  double exponent = 0;
  double at(double n) const;
};
PowerFit fit_power(const std::vector<double>& n, const std::vector<double>& cost);

// cost = intercept + slope * n, least squares: for projecting a cost that is
// a constant plus a linear part, where the power fit's exponent reads a bit
// above 1 on small n.
struct LinearFit {
  double intercept = 0;
  double slope = 0;
  double at(double n) const { return intercept + slope * n; }
};
LinearFit fit_linear(const std::vector<double>& n, const std::vector<double>& cost);

}  // namespace ntp::elastic
