// The NTP gradient sync (GradSync, and OverlappedSync with its buckets)
// checked element by element against a plain reference (DESIGN §3), on seeded
// random jobs over real Gloo groups, one thread per rank on loopback.
//
// Every replica gives every element of the full model its own gradient: a
// multiple of 1/8 in [-64, 64) hashed from (seed, step, replica, element), so
// neighbouring elements, units, replicas and steps differ, and any sum over a
// few replicas is exact in float. After the sync every rank must hold, for
// each unit it computes and for every replicated tensor, exactly the sum over
// the training replicas (scatter_from_full of the summed full model). A piece
// added to the wrong unit, a replica left out or a stale copy on an extra slot
// is a differing element; the negative tests show that the check sees one.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <memory>
#include <optional>
#include <random>
#include <set>
#include <span>
#include <stdexcept>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "comm/group.h"
#include "comm/store.h"
#include "layout/failed_slots.h"
#include "layout/job_layout.h"
#include "model/parameters.h"
#include "tests/comm/thread_ranks.h"
#include "tests/layout/random_job.h"
#include "train/grad_sync.h"
#include "train/overlapped_sync.h"

namespace ntp::train {
namespace {

using layout::testing::pick;
using model::ParameterLayout;

constexpr std::uint64_t kSeed = 20250611;
constexpr int kSteps = 2;  // the second step reuses every buffer and bucket of the first

// One job to synchronize: the model, the failure pattern and which sync runs.
struct SyncCase {
  std::uint64_t seed = 0;
  model::GptConfig gpt;
  layout::JobConfig job;            // `units` differs per kind: see JobRanks
  std::optional<double> bucket_mb;  // OverlappedSync with these buckets; none: one GradSync
  int mispair_rank = -1;            // this rank mis-pairs its sync buffer (negative tests)
  bool split_embedding = false;     // wte's embedding rows handed apart (OverlappedSync only)
  int misplace_rows_rank = -1;      // this rank hands its embedding rows one column off (negative test)
  bool pipeline = true;             // OverlappedSync's buckets pipelined
  bool exact_values = true;         // false: full-mantissa values whose sums round (bit-identity tests)
};

std::string describe(const SyncCase& c) {
  return fmt::format("seed {}: model {}; tp {}, {} replicas, failed '{}', min_tp {}; {}", c.seed,
                     model::to_string(c.gpt), c.job.tp, c.job.replicas,
                     layout::format_failed_slots(c.job.failed), c.job.min_tp,
                     c.bucket_mb ? fmt::format("OverlappedSync, buckets of {} MB{}{}", *c.bucket_mb,
                                               c.split_embedding ? ", split wte" : "",
                                               c.pipeline ? "" : ", not pipelined")
                                 : std::string("GradSync"));
}

// ---- random cases ----

// Prime unit counts: no TP degree above 1 divides the heads or the vocabulary.
constexpr std::int64_t kHeads[] = {5, 7};
constexpr std::int64_t kPaddedVocab[] = {13, 17, 19, 23, 29, 31};

// Up to 4 replicas of up to 6 slots, failed slots anywhere: often several
// degraded replicas with different k, now and then one dropped by min_tp or
// by losing every slot.
layout::JobConfig random_job(std::mt19937_64& rng) {
  layout::JobConfig job;
  do {
    job.tp = pick(rng, 1, 6);
    job.replicas = pick(rng, 1, 4);
    job.failed = layout::testing::random_failures(rng, job.replicas, job.tp, 0.6);
    job.min_tp = std::bernoulli_distribution(0.2)(rng) ? pick(rng, 1, job.tp) : 1;
  } while (!layout::testing::some_replica_trains(job));
  return job;
}

// A model with at least `tp` heads.
model::GptConfig random_gpt(std::mt19937_64& rng, int tp) {
  model::GptConfig g;
  g.heads = tp > kHeads[0] ? kHeads[1] : kHeads[pick(rng, 0, 1)];
  g.d_model = g.heads * pick(rng, 1, 3);  // FFN = 4 * d_model: 20 to 84 neurons
  g.layers = pick(rng, 1, 2);
  g.max_seq = pick(rng, 1, 3);
  g.padded_vocab = kPaddedVocab[pick(rng, 0, 5)];
  g.vocab = g.padded_vocab - pick(rng, 0, 2);
  return g;
}

// kTiny: every range the backward reports is a bucket of its own (many);
// kHuge: the whole model is one bucket, sent by finish(); kSome: in between.
enum class Buckets { kTiny, kSome, kHuge };
constexpr double kTinyBucketMb = 1e-12;  // below any one tensor
constexpr double kHugeBucketMb = 1e6;    // above any test model

double bucket_mb(Buckets buckets, const model::GptConfig& gpt, std::mt19937_64& rng) {
  const double model_mb =
      static_cast<double>(model::parameter_count(gpt)) * sizeof(float) / (1 << 20);
  switch (buckets) {
    case Buckets::kTiny:
      return kTinyBucketMb;
    case Buckets::kHuge:
      return kHugeBucketMb;
    case Buckets::kSome:
      break;
  }
  return model_mb * std::uniform_real_distribution<double>(0.02, 0.6)(rng);
}

SyncCase random_case(std::uint64_t seed, std::optional<Buckets> buckets) {
  std::mt19937_64 rng(seed);
  SyncCase c;
  c.seed = seed;
  c.job = random_job(rng);
  c.gpt = random_gpt(rng, c.job.tp);
  if (buckets) c.bucket_mb = bucket_mb(*buckets, c.gpt, rng);
  return c;
}

// ---- the job's ranks and groups ----

struct Place {
  int replica = 0;
  int slot = 0;
};

// Each kind's layout of the job, and its ranks: every active slot of every
// training replica, replica-major, as the trainer numbers them.
struct JobRanks {
  layout::JobLayout heads, neurons, vocab;
  std::vector<Place> places;

  explicit JobRanks(const SyncCase& c)
      : heads(plan(c, c.gpt.heads)),
        neurons(plan(c, c.gpt.ffn())),
        vocab(plan(c, c.gpt.padded_vocab)) {
    for (int r = 0; r < heads.num_replicas(); ++r) {
      if (heads.replica(r).dropped) continue;
      for (int slot : heads.replica(r).active) places.push_back({r, slot});
    }
  }
  static layout::JobLayout plan(const SyncCase& c, std::int64_t units) {
    layout::JobConfig config = c.job;
    config.units = units;
    return layout::plan_job(config);
  }
  int rank_of(int replica, int slot) const {
    for (std::size_t i = 0; i < places.size(); ++i) {
      if (places[i].replica == replica && places[i].slot == slot) return static_cast<int>(i);
    }
    throw std::logic_error(fmt::format("replica {} slot {} has no rank", replica, slot));
  }
  KindViews views(Place p) const {
    return {heads.slot_view(p.replica, p.slot), neurons.slot_view(p.replica, p.slot),
            vocab.slot_view(p.replica, p.slot)};
  }
};

std::unique_ptr<comm::Group> join(std::shared_ptr<comm::Store> store, std::vector<int> members,
                                  int rank, std::string name) {
  comm::GroupOptions o;
  o.ranks = std::move(members);
  o.global_rank = rank;
  o.epoch = 1;
  o.name = std::move(name);
  o.timeout = std::chrono::seconds(20);
  return comm::create_group(std::move(store), o);
}

// The TP group of the rank's replica, and its DP sync group when it is a core
// slot: built from the layout's core lists, as the trainer does.
struct RankGroups {
  std::unique_ptr<comm::Group> tp;
  std::unique_ptr<comm::Group> dp;

  RankGroups(const JobRanks& job, const std::shared_ptr<comm::Store>& store, int rank) {
    const Place me = job.places[static_cast<std::size_t>(rank)];
    std::vector<int> replica;
    for (int slot : job.heads.replica(me.replica).active)
      replica.push_back(job.rank_of(me.replica, slot));
    tp = join(store, replica, rank, fmt::format("tp/r{}", me.replica));
    const int j = job.heads.slot_view(me.replica, me.slot).sync_group;
    if (j < 0) return;
    std::vector<int> core;
    for (const auto& [r, slot] : job.heads.sync_group_members(j))
      core.push_back(job.rank_of(r, slot));
    dp = join(store, core, rank, fmt::format("dp/core{}", j));
  }
};

// ---- the sync under test ----

// The tensor ranges Model::backward reports as final, in its order: the
// final layer norm, the blocks from last to first, then the embeddings; with a
// split wte, its LM-head part comes first and the end brings wpe alone.
std::vector<std::pair<std::size_t, std::size_t>> backward_ranges(const ParameterLayout& layout,
                                                                 bool split) {
  const std::size_t wte = layout.index_of("wte"), wpe = layout.index_of("wpe");
  std::vector<std::pair<std::size_t, std::size_t>> ranges;
  if (split) ranges.emplace_back(wte, wte + 1);
  ranges.emplace_back(layout.index_of("lnf_w"), layout.tensors().size());
  for (int l = static_cast<int>(layout.config().layers) - 1; l >= 0; --l)
    ranges.push_back(layout.layer_range(l));
  ranges.emplace_back(split ? wpe : wte, wpe + 1);
  return ranges;
}

std::uint64_t mix(std::uint64_t x);

// Takes a third of this rank's wte rows (chosen per step and replica) out of
// `grads` as embedding rows: each element keeps value - 1 and the row holds 1,
// so the sum over replicas is unchanged and still exact in float. A
// misplacing rank names each row one column off.
model::EmbeddingRows carve_embedding_rows(const ParameterLayout& mine, std::span<float> grads,
                                          std::uint64_t salt, bool misplace) {
  const model::TensorSpec& wte = mine["wte"];
  model::EmbeddingRows rows;
  rows.dim = wte.unit_size;
  const std::int64_t units = wte.units.size();
  for (std::int64_t col = 0; col < units; ++col) {
    if (mix(salt + static_cast<std::uint64_t>(wte.units.unit_at(col))) % 3 != 0) continue;
    rows.cols.push_back(misplace ? (col + 1) % units : col);
    for (std::int64_t j = 0; j < rows.dim; ++j) {
      grads[static_cast<std::size_t>(wte.offset + col * rows.dim + j)] -= 1.0f;
      rows.values.push_back(1.0f);
    }
  }
  if (misplace) {  // keep the columns ascending, as the model hands them
    std::vector<std::size_t> order(rows.cols.size());
    for (std::size_t i = 0; i < order.size(); ++i) order[i] = i;
    std::sort(order.begin(), order.end(), [&](auto a, auto b) { return rows.cols[a] < rows.cols[b]; });
    model::EmbeddingRows sorted{rows.dim, {}, {}};
    for (std::size_t i : order) sorted.cols.push_back(rows.cols[i]);
    sorted.values = rows.values;  // every row is ones
    rows = std::move(sorted);
  }
  return rows;
}

// One rank's sync, built once and run every step, as the trainer does.
class RankSync {
 public:
  RankSync(const SyncCase& c, const ParameterLayout& full, const ParameterLayout& mine,
           const KindViews& views, std::vector<int> active, RankGroups& groups, bool mispair)
      : mine_(mine), split_(c.split_embedding) {
    if (c.bucket_mb) {
      overlapped_ = std::make_unique<OverlappedSync>(
          mine, full, views, std::move(active), *groups.tp, groups.dp.get(),
          SyncOptions{*c.bucket_mb, c.split_embedding, c.pipeline});
      overlapped_->mispair_for_test(mispair);
    } else {
      blocking_ =
          std::make_unique<GradSync>(mine, views, std::move(active), *groups.tp, groups.dp.get());
      blocking_->mispair_for_test(mispair);
    }
  }

  // `rows`: the embedding rows carved out of `grads` (split_embedding only).
  void run(std::span<float> grads, std::int64_t step, const model::EmbeddingRows& rows) {
    if (blocking_) {
      blocking_->run(grads);
      return;
    }
    overlapped_->begin(grads, step);
    for (const auto& [first, last] : backward_ranges(mine_, split_)) overlapped_->grads_ready(first, last);
    if (split_) overlapped_->embedding_rows(rows);
    overlapped_->finish();
  }

 private:
  const ParameterLayout& mine_;
  bool split_;
  std::unique_ptr<GradSync> blocking_;
  std::unique_ptr<OverlappedSync> overlapped_;
};

// ---- values and the reference ----

std::uint64_t mix(std::uint64_t x) {  // splitmix64's finalizer
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

// Replica `replica`'s gradient of every element of the full model at `step`.
// Exact: multiples of 1/8 in [-64, 64), 10 significant bits, so sums of up to
// 2^14 of them are exact in float whatever the order of addition. Otherwise:
// 24 significant bits at exponents spread over 2^-23 .. 2^8, so nearly every
// sum rounds and a different order of addition shows in the bits.
std::vector<float> replica_grads(std::uint64_t seed, int step, int replica, std::int64_t size,
                                 bool exact) {
  std::vector<float> grads(static_cast<std::size_t>(size));
  const std::uint64_t salt = mix(
      seed ^ mix((static_cast<std::uint64_t>(step) << 32) + static_cast<std::uint64_t>(replica)));
  for (std::size_t i = 0; i < grads.size(); ++i) {
    const std::uint64_t bits = mix(salt + i);
    if (exact) {
      grads[i] = static_cast<float>(static_cast<std::int64_t>(bits % 1024) - 512) / 8.0f;
    } else {
      const auto mantissa = static_cast<std::int64_t>(bits >> 40) - (std::int64_t{1} << 23);
      grads[i] = std::ldexp(static_cast<float>(mantissa), -23 + static_cast<int>(bits % 9));
    }
  }
  return grads;
}

// The inputs and the expected result of one step, on the full model.
struct StepValues {
  std::vector<std::vector<float>> per_replica;  // each replica's gradients
  std::vector<float> sum;                       // their sum over the training replicas
};

StepValues step_values(const SyncCase& c, const JobRanks& job, const ParameterLayout& full,
                       int step) {
  StepValues v{{}, std::vector<float>(static_cast<std::size_t>(full.size()), 0.0f)};
  for (int r = 0; r < c.job.replicas; ++r) {
    v.per_replica.push_back(replica_grads(c.seed, step, r, full.size(), c.exact_values));
    if (job.heads.replica(r).dropped) continue;
    for (std::size_t i = 0; i < v.sum.size(); ++i) v.sum[i] += v.per_replica.back()[i];
  }
  return v;
}

// Differing elements of one rank: how many, and the first few by name; and
// what the rank's sync made of its gradients, every step in turn.
struct Mismatches {
  std::string rank;  // "rank 3 (replica 1 slot 2)"
  std::int64_t count = 0;
  std::vector<std::string> first;
  std::vector<float> synced;
};

std::string element_name(const ParameterLayout& layout, std::size_t i) {
  const auto at = static_cast<std::int64_t>(i);
  for (const model::TensorSpec& t : layout.tensors()) {
    if (at < t.offset || at >= t.offset + t.count) continue;
    const std::int64_t local = at - t.offset;
    if (t.kind == model::UnitKind::kReplicated) return fmt::format("{}[{}]", t.name, local);
    return fmt::format("{} unit {} element {}", t.name, t.units.unit_at(local / t.unit_size),
                       local % t.unit_size);
  }
  return fmt::format("element {} outside the layout", i);
}

void compare(const ParameterLayout& mine, std::span<const float> got, std::span<const float> want,
             int step, Mismatches& out) {
  for (std::size_t i = 0; i < want.size(); ++i) {
    if (got[i] == want[i]) continue;
    if (out.first.size() < 5) {
      out.first.push_back(fmt::format("step {}, {}: got {}, want {}", step, element_name(mine, i),
                                      got[i], want[i]));
    }
    ++out.count;
  }
}

// Runs the case on one thread per rank; returns each rank's mismatches.
std::vector<Mismatches> run_case(const SyncCase& c) {
  const JobRanks job(c);
  const ParameterLayout full(c.gpt, model::Shard::full(c.gpt));
  std::vector<StepValues> steps;
  for (int s = 0; s < kSteps; ++s) steps.push_back(step_values(c, job, full, s));

  comm::testing::TempStoreDir dir;
  const std::shared_ptr<comm::Store> store = comm::open_store(dir.spec());
  std::vector<Mismatches> result(job.places.size());
  comm::testing::rethrow_first(
      comm::testing::run_threads(static_cast<int>(job.places.size()), [&](int rank) {
        const Place me = job.places[static_cast<std::size_t>(rank)];
        const KindViews views = job.views(me);
        const ParameterLayout mine(c.gpt,
                                   {views.heads.units, views.neurons.units, views.vocab.units});
        Mismatches& out = result[static_cast<std::size_t>(rank)];
        out.rank = fmt::format("rank {} (replica {} slot {})", rank, me.replica, me.slot);
        RankGroups groups(job, store, rank);
        RankSync sync(c, full, mine, views, job.heads.replica(me.replica).active, groups,
                      rank == c.mispair_rank);
        std::vector<float> grads(static_cast<std::size_t>(mine.size()));
        std::vector<float> want(grads.size());
        for (int s = 0; s < kSteps; ++s) {
          const StepValues& v = steps[static_cast<std::size_t>(s)];
          model::scatter_from_full(full, v.per_replica[static_cast<std::size_t>(me.replica)], mine,
                                   grads);
          model::EmbeddingRows rows;
          if (c.split_embedding) {
            rows = carve_embedding_rows(mine, grads, mix(c.seed ^ mix(static_cast<std::uint64_t>(s * 64 + me.replica))),
                                        rank == c.misplace_rows_rank);
          }
          sync.run(grads, s, rows);
          out.synced.insert(out.synced.end(), grads.begin(), grads.end());
          model::scatter_from_full(full, v.sum, mine, want);
          compare(mine, grads, want, s, out);
        }
      }));
  return result;
}

// Every rank, every element, every step: exactly the sum over the replicas.
void expect_exact(const SyncCase& c) {
  SCOPED_TRACE(describe(c));
  std::vector<Mismatches> result;
  ASSERT_NO_THROW(result = run_case(c));
  for (const Mismatches& m : result) {
    EXPECT_EQ(m.count, 0) << m.rank << ": " << fmt::format("{}", fmt::join(m.first, "; "));
  }
}

// The random cases of each suite: GradSync over the whole model, and
// OverlappedSync with tiny, some and huge buckets in turn.
constexpr int kCases = 12;

SyncCase grad_sync_case(int i) {
  return random_case(kSeed + static_cast<std::uint64_t>(i), std::nullopt);
}

SyncCase overlapped_case(int i) {
  constexpr Buckets kCycle[] = {Buckets::kTiny, Buckets::kSome, Buckets::kHuge};
  return random_case(kSeed + 1000 + static_cast<std::uint64_t>(i), kCycle[i % 3]);
}

// Split wte: healthy jobs (every replica at the sync degree), 2 to 4 replicas.
SyncCase split_case(int i) {
  constexpr Buckets kCycle[] = {Buckets::kTiny, Buckets::kSome, Buckets::kHuge};
  std::mt19937_64 rng(kSeed + 2000 + static_cast<std::uint64_t>(i));
  SyncCase c;
  c.seed = kSeed + 2000 + static_cast<std::uint64_t>(i);
  c.job.tp = pick(rng, 1, 4);
  c.job.replicas = pick(rng, 2, 4);
  c.gpt = random_gpt(rng, c.job.tp);
  c.bucket_mb = bucket_mb(kCycle[i % 3], c.gpt, rng);
  c.split_embedding = true;
  return c;
}

class GradSyncRandom : public ::testing::TestWithParam<int> {};
TEST_P(GradSyncRandom, EveryElementIsTheSumOverReplicas) {
  expect_exact(grad_sync_case(GetParam()));
}
INSTANTIATE_TEST_SUITE_P(Seeds, GradSyncRandom, ::testing::Range(0, kCases));

class OverlappedSyncRandom : public ::testing::TestWithParam<int> {};
TEST_P(OverlappedSyncRandom, EveryElementIsTheSumOverReplicas) {
  expect_exact(overlapped_case(GetParam()));
}
INSTANTIATE_TEST_SUITE_P(Seeds, OverlappedSyncRandom, ::testing::Range(0, kCases));

class SplitEmbeddingRandom : public ::testing::TestWithParam<int> {};
TEST_P(SplitEmbeddingRandom, EveryElementIsTheSumOverReplicas) {
  expect_exact(split_case(GetParam()));
}
INSTANTIATE_TEST_SUITE_P(Seeds, SplitEmbeddingRandom, ::testing::Range(0, 6));

// The seeds above do reach the shapes the sync must survive, so that a change
// of generator or seed cannot quietly leave them out.
TEST(SyncRandomCases, ReachTheAwkwardShapes) {
  bool different_k = false, failed_inside = false, dropped = false, extra_slots = false;
  for (int i = 0; i < kCases; ++i) {
    for (const SyncCase& c : {grad_sync_case(i), overlapped_case(i)}) {
      const JobRanks job(c);
      std::set<std::size_t> degraded_k;
      for (int r = 0; r < job.heads.num_replicas(); ++r) {
        const layout::ReplicaLayout& replica = job.heads.replica(r);
        dropped |= replica.dropped;
        if (replica.dropped) continue;
        if (replica.active.size() < static_cast<std::size_t>(c.job.tp)) {
          degraded_k.insert(replica.active.size());
        }
        extra_slots |= replica.active.size() > replica.core.size();
        // Active slots are not 0..k-1: a failed slot lies before an active one.
        failed_inside |= replica.active.back() != static_cast<int>(replica.active.size()) - 1;
      }
      different_k |= degraded_k.size() >= 2;
    }
  }
  EXPECT_TRUE(different_k) << "no two training replicas degraded to different k";
  EXPECT_TRUE(failed_inside) << "no failed slot before an active one";
  EXPECT_TRUE(dropped) << "no dropped replica";
  EXPECT_TRUE(extra_slots) << "no extra slot (every replica at the sync degree)";
}

// ---- the check shown to fail ----

// tp 3, replica 1 lost slot 0, so K = 2 and S_0 = heads [0, 3): rank 0 (core
// slot 0 of replica 0) swaps head units 0 and 1 in its sync buffer.
SyncCase mispaired(std::optional<double> bucket_mb) {
  SyncCase c;
  c.seed = kSeed;
  c.gpt = {13, 13, 1, 10, 5, 2};
  c.job.tp = 3;
  c.job.replicas = 2;
  c.job.failed = {{1, {0}}};
  c.bucket_mb = bucket_mb;
  c.mispair_rank = 0;
  return c;
}

// The broken case `c` differs from the reference, and only in the tensors
// `may_differ` accepts.
void expect_caught(const SyncCase& c, const std::function<bool(const std::string&)>& may_differ,
                   const char* unnoticed) {
  SCOPED_TRACE(describe(c));
  std::vector<Mismatches> result;
  ASSERT_NO_THROW(result = run_case(c));
  std::int64_t differing = 0;
  for (const Mismatches& m : result) {
    differing += m.count;
    for (const std::string& what : m.first) EXPECT_TRUE(may_differ(what)) << what;
  }
  EXPECT_GT(differing, 0) << unnoticed;
}

// Only head tensors are mis-paired.
void expect_caught(const SyncCase& c) {
  expect_caught(
      c,
      [](const std::string& what) {
        return what.find(".qkv_") != std::string::npos || what.find(".proj_wt") != std::string::npos;
      },
      "a mis-paired sync buffer went unnoticed");
}

TEST(GradSyncCheck, CatchesAMispairedRank) {
  expect_caught(mispaired(std::nullopt));
}
TEST(OverlappedSyncCheck, CatchesAMispairedRank) {
  expect_caught(mispaired(kTinyBucketMb));
}

// One rank hands its embedding rows one column off: only wte may differ, and it must.
TEST(SplitEmbeddingCheck, CatchesMisplacedRows) {
  SyncCase c = split_case(0);
  c.misplace_rows_rank = 0;
  expect_caught(
      c, [](const std::string& what) { return what.find("wte") != std::string::npos; },
      "embedding rows added to the wrong column went unnoticed");
}

// ---- the pipeline changes when, never what ----

// The same job, inputs and buckets with the pipeline on and off, on values
// whose sums round: every rank must end with the same bits, every step.
SyncCase inexact_case(std::uint64_t seed, layout::JobConfig job, Buckets buckets, bool split) {
  std::mt19937_64 rng(seed);
  SyncCase c;
  c.seed = seed;
  c.job = std::move(job);
  c.gpt = random_gpt(rng, c.job.tp);
  c.bucket_mb = bucket_mb(buckets, c.gpt, rng);
  c.split_embedding = split;
  c.exact_values = false;
  return c;
}

// Elements whose bits differ between two runs, over every rank and step, and
// the first few by name.
struct BitDiff {
  std::int64_t count = 0;
  std::vector<std::string> first;
};

BitDiff differing_bits(const SyncCase& a, const SyncCase& b) {
  const std::vector<Mismatches> x = run_case(a), y = run_case(b);
  const JobRanks job(a);
  const ParameterLayout full(a.gpt, model::Shard::full(a.gpt));
  BitDiff diff;
  for (std::size_t r = 0; r < x.size(); ++r) {
    const KindViews views = job.views(job.places[r]);
    const ParameterLayout mine(a.gpt, {views.heads.units, views.neurons.units, views.vocab.units});
    for (std::size_t i = 0; i < x[r].synced.size(); ++i) {
      if (std::memcmp(&x[r].synced[i], &y[r].synced[i], sizeof(float)) == 0) continue;
      if (diff.first.size() < 5) {
        diff.first.push_back(fmt::format("{}: {}", x[r].rank,
                                         element_name(mine, i % static_cast<std::size_t>(mine.size()))));
      }
      ++diff.count;
    }
  }
  return diff;
}

layout::JobConfig job_of(int tp, int replicas, layout::FailedSlots failed = {}) {
  layout::JobConfig job;
  job.tp = tp;
  job.replicas = replicas;
  job.failed = std::move(failed);
  return job;
}

// Uniform (split wte and whole) and nonuniform jobs: replicas at reduced TP
// (extra slots reshard every bucket), a failed slot before an active one.
std::vector<SyncCase> pipeline_cases() {
  std::vector<SyncCase> cases;
  std::uint64_t seed = kSeed + 3000;
  for (Buckets b : {Buckets::kTiny, Buckets::kSome}) {
    cases.push_back(inexact_case(++seed, job_of(2, 3), b, true));
    cases.push_back(inexact_case(++seed, job_of(2, 2), b, false));
    cases.push_back(inexact_case(++seed, job_of(3, 3, {{1, {0}}}), b, false));
    cases.push_back(inexact_case(++seed, job_of(4, 2, {{0, {1}}, {1, {0, 3}}}), b, false));
  }
  return cases;
}

TEST(PipelinedSync, BitIdenticalToTheSerialSync) {
  for (const SyncCase& pipelined : pipeline_cases()) {
    SyncCase serial = pipelined;
    serial.pipeline = false;
    SCOPED_TRACE(describe(pipelined));
    BitDiff diff;
    ASSERT_NO_THROW(diff = differing_bits(pipelined, serial));
    EXPECT_EQ(diff.count, 0) << fmt::format("{}", fmt::join(diff.first, "; "));
  }
}

// The bit check sees a reassociated sum: the split wte adds (lm0 + lm1) +
// (rows0 + rows1) where the whole one adds (lm0 + rows0) + (lm1 + rows1).
// Two replicas, so that only wte differs (with three, Gloo's ring sums an
// element in an order that depends on where the all-reduce's buffer starts,
// and the split moves wpe to a bucket of its own).
TEST(PipelinedSync, TheBitCheckSeesAReassociatedSum) {
  const SyncCase split = inexact_case(kSeed + 3100, job_of(2, 2), Buckets::kTiny, true);
  SyncCase whole = split;
  whole.split_embedding = false;
  SCOPED_TRACE(describe(split));
  BitDiff diff;
  ASSERT_NO_THROW(diff = differing_bits(split, whole));
  EXPECT_GT(diff.count, 0) << "a reassociated wte sum went unnoticed";
  for (const std::string& what : diff.first) EXPECT_NE(what.find("wte"), std::string::npos) << what;
}

// A rank that dies while the buckets are in flight: every other rank's
// finish() throws the CommError that recovery handles, with or without the
// pipeline, and no rank hangs (a survivor aborts its groups on the error, as
// the trainer does, so that its peers fail fast too).
void expect_comm_errors_on_death(bool pipeline) {
  SyncCase c;
  c.seed = kSeed;
  c.gpt = {13, 13, 1, 10, 5, 2};
  c.job = job_of(3, 2, {{1, {0}}});  // replica 0: a core pair and an extra slot; replica 1: two cores
  c.bucket_mb = kTinyBucketMb;
  c.pipeline = pipeline;
  SCOPED_TRACE(describe(c));
  const JobRanks job(c);
  const ParameterLayout full(c.gpt, model::Shard::full(c.gpt));
  const int dying = job.rank_of(1, 1);  // core slot 0 of replica 1
  comm::testing::TempStoreDir dir;
  const std::shared_ptr<comm::Store> store = comm::open_store(dir.spec());
  const auto errors = comm::testing::run_threads(static_cast<int>(job.places.size()), [&](int rank) {
    const Place me = job.places[static_cast<std::size_t>(rank)];
    const KindViews views = job.views(me);
    const ParameterLayout mine(c.gpt, {views.heads.units, views.neurons.units, views.vocab.units});
    RankGroups groups(job, store, rank);
    OverlappedSync sync(mine, full, views, job.heads.replica(me.replica).active, *groups.tp,
                        groups.dp.get(), SyncOptions{*c.bucket_mb, false, c.pipeline});
    std::vector<float> grads(static_cast<std::size_t>(mine.size()), 1.0f);
    const auto ranges = backward_ranges(mine, false);
    const auto abort_all = [&] {
      for (comm::Group* g : {groups.tp.get(), groups.dp.get()})
        if (g != nullptr) g->abort("a member failed");
    };
    sync.begin(grads, 0);
    for (std::size_t i = 0; i < ranges.size(); ++i) {
      if (rank == dying && i == ranges.size() / 2) {
        std::this_thread::sleep_for(std::chrono::milliseconds(50));  // peers' buckets in flight
        abort_all();
        throw std::runtime_error("died");
      }
      sync.grads_ready(ranges[i].first, ranges[i].second);
    }
    try {
      sync.finish();
    } catch (const comm::CommError&) {
      abort_all();
      throw;
    }
  });
  for (std::size_t r = 0; r < errors.size(); ++r) {
    SCOPED_TRACE(fmt::format("rank {}", r));
    ASSERT_TRUE(errors[r] != nullptr) << "finished a sync with a dead peer";
    if (static_cast<int>(r) == dying) continue;
    EXPECT_THROW(std::rethrow_exception(errors[r]), comm::CommError);
  }
}

TEST(PipelinedSync, APeerDeathIsACommError) { expect_comm_errors_on_death(true); }
TEST(SerialSync, APeerDeathIsACommError) { expect_comm_errors_on_death(false); }

}  // namespace
}  // namespace ntp::train
