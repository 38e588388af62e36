// Snapshot mode (see snapshot.h and docs/sim.md, "Snapshot mode").
#include "sim/snapshot.h"

#include <algorithm>
#include <cmath>

#include "sim/fleet.h"
#include "sim/parallel.h"
#include "sim/random.h"
#include "sim/replica_view.h"

namespace ntp::sim {
namespace {

constexpr int kChunk = 64;  // placements per task: state is allocated once per task

struct Sample {
  std::array<double, kPolicyCount> value{};
  double healthy_groups = 0;
};

// Reusable state for many placements: fail, measure, undo.
class Placer {
 public:
  Placer(const Scenario& s, const Pricing& pricing)
      : s_(s), pricing_(pricing), topo_(s), fleet_(topo_),
        raw_(s.groups(), s.parallel.pp, s.parallel.tp),
        spared_(s.groups(), s.parallel.pp, s.parallel.tp),
        marked_(static_cast<std::size_t>(topo_.job_domains), 0) {}

  Sample measure(double fraction, Rng& rng) {
    const auto target = static_cast<int>(std::llround(fraction * topo_.job_elements()));
    failed_.clear();
    domains_.clear();
    while (static_cast<int>(failed_.size()) < target) {
      const auto e = static_cast<int>(rng.below(static_cast<std::uint64_t>(topo_.job_elements())));
      if (fleet_.down(e)) continue;
      fleet_.fail(e);
      failed_.push_back(e);
      const auto d = static_cast<std::size_t>(topo_.domain_of(e));
      if (!marked_[d]) domains_.push_back(static_cast<int>(d));
      marked_[d] = 1;
    }
    // Spares replace the first failed domains, in the order failures were placed.
    const auto covered = std::min(domains_.size(), static_cast<std::size_t>(s_.spares.domains));
    const int free_spares = s_.spares.domains - static_cast<int>(covered);
    for (std::size_t i = 0; i < domains_.size(); ++i) set_domain(domains_[i], i < covered);

    Sample out;
    for (std::size_t i = 0; i < kPolicyCount; ++i) {
      out.value[i] = pricing_.value(static_cast<Policy>(i), raw_, spared_, free_spares);
    }
    out.healthy_groups = static_cast<double>(raw_.groups_with()[static_cast<std::size_t>(s_.parallel.tp)]) /
                         raw_.groups();
    for (const int e : failed_) fleet_.repair(e);
    for (const int d : domains_) {
      set_domain(d, true);
      marked_[static_cast<std::size_t>(d)] = 0;
    }
    return out;
  }

 private:
  void set_domain(int domain, bool spared_healthy) {
    for (int g = 0; g < topo_.groups_per_domain; ++g) {
      const int group = domain * topo_.groups_per_domain + g;
      raw_.set_active(group, fleet_.active(domain, g));
      spared_.set_active(group, spared_healthy ? s_.parallel.tp : fleet_.active(domain, g));
    }
  }

  const Scenario& s_;
  const Pricing& pricing_;
  Topology topo_;
  Fleet fleet_;
  ReplicaView raw_;
  ReplicaView spared_;
  std::vector<int> failed_;
  std::vector<int> domains_;   // failed domains in the order they were hit
  std::vector<char> marked_;   // per job domain: already in domains_
};

void mean_and_stderr(const std::vector<double>& xs, double& mean, double& err) {
  const double n = static_cast<double>(xs.size());
  double sum = 0.0, sq = 0.0;
  for (const double x : xs) sum += x;
  mean = sum / n;
  for (const double x : xs) sq += (x - mean) * (x - mean);
  err = xs.size() > 1 ? std::sqrt(sq / (n - 1.0) / n) : 0.0;
}

}  // namespace

SnapshotResult run_snapshot(const Scenario& s, const Pricing& pricing) {
  const auto& fractions = s.snapshot.failed_fractions;
  const int placements = s.snapshot.placements;
  const int chunks = (placements + kChunk - 1) / kChunk;
  const int tasks = static_cast<int>(fractions.size()) * chunks;
  std::vector<std::vector<Sample>> samples(fractions.size(),
                                           std::vector<Sample>(static_cast<std::size_t>(placements)));
  parallel_for(tasks, s.run.threads, [&](int task) {
    const auto f = static_cast<std::size_t>(task / chunks);
    const int first = (task % chunks) * kChunk;
    Placer placer(s, pricing);
    for (int p = first; p < std::min(placements, first + kChunk); ++p) {
      Rng rng(Rng::mix(Rng::mix(s.run.seed, f), static_cast<std::uint64_t>(p)));
      samples[f][static_cast<std::size_t>(p)] = placer.measure(fractions[f], rng);
    }
  });
  SnapshotResult r;
  r.placements = placements;
  std::vector<double> xs(static_cast<std::size_t>(placements));
  for (std::size_t f = 0; f < fractions.size(); ++f) {
    SnapshotPoint point;
    point.failed_fraction = fractions[f];
    for (std::size_t i = 0; i < kPolicyCount; ++i) {
      for (std::size_t p = 0; p < xs.size(); ++p) xs[p] = samples[f][p].value[i];
      mean_and_stderr(xs, point.mean[i], point.stderr_[i]);
    }
    for (std::size_t p = 0; p < xs.size(); ++p) xs[p] = samples[f][p].healthy_groups;
    mean_and_stderr(xs, point.healthy_groups_mean, point.healthy_groups_stderr);
    r.points.push_back(point);
  }
  return r;
}

}  // namespace ntp::sim
