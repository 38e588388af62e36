// Event-driven timeline (see timeline.h and docs/sim.md, "Timeline mode").
#include "sim/timeline.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <limits>
#include <map>
#include <queue>

#include "sim/fleet.h"
#include "sim/parallel.h"
#include "sim/random.h"

namespace ntp::sim {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();
// Stream keys: each seed's failures, repairs and ckpt-restart's replacement
// hardware draw from streams of their own (docs/sim.md, "Random streams").
constexpr std::uint64_t kCkptStream = 0x636b7074;    // "ckpt"
constexpr std::uint64_t kUptimeStream = 0x75707469;  // "upti"
constexpr std::uint64_t kRepairStream = 0x72657061;  // "repa"
constexpr std::uint64_t kSlowStream = 0x736c6f77;    // "slow"

enum class EventKind { kFail = 0, kRepair = 1, kSwapDone = 2, kSlowStart = 3, kSlowEnd = 4 };

struct Event {
  double hours;
  EventKind kind;
  int a;         // element, or logical domain of a swap
  int b;         // trace index (kFail from a trace), or spare domain of a swap
  int pool = 0;  // the spare pool of a swap (index into SeedRun::served_)
  bool operator>(const Event& o) const {
    if (hours != o.hours) return hours > o.hours;
    if (kind != o.kind) return kind > o.kind;
    if (pool != o.pool) return pool > o.pool;
    if (a != o.a) return a > o.a;
    return b > o.b;
  }
};

// The job as a spare pool serves it: which spares stand in for which job
// domains, and the job's TP groups as they then are.
struct ServedJob {
  ServedJob(const Topology& topo, const Scenario& s, int complete_below)
      : pool(topo, complete_below), view(s.groups(), s.parallel.pp, s.parallel.tp) {}
  SparePool pool;
  ReplicaView view;
  bool touched = false;  // this event changed `view`
};

// Adds rate * (overlap hours) to each bucket that [a, b) touches.
void accumulate(std::vector<double>& buckets, double bucket_h, double a, double b, double rate) {
  if (b <= a || rate == 0.0) return;
  auto i = static_cast<std::size_t>(a / bucket_h);
  while (i < buckets.size() && a < b) {
    const double end = std::min(b, (static_cast<double>(i) + 1.0) * bucket_h);
    buckets[i] += rate * (end - a);
    a = end;
    ++i;
  }
}

// Adds the compute of [a, b) to each bucket it touches, when [a, b) repeats
// `compute` hours of training then `cycle - compute` hours of checkpointing.
// Closed form per bucket (cumulative work at each bucket edge), so a short
// interval costs O(buckets), not O(cycles).
void accumulate_cycles(std::vector<double>& buckets, double bucket_h, double a, double b,
                       double compute, double cycle) {
  const auto work = [&](double t) {
    const double x = t - a;
    const double done = std::floor(x / cycle);
    return done * compute + std::clamp(x - done * cycle, 0.0, compute);
  };
  auto i = static_cast<std::size_t>(a / bucket_h);
  for (double from = a; i < buckets.size() && from < b; ++i) {
    const double end = std::min(b, (static_cast<double>(i) + 1.0) * bucket_h);
    buckets[i] += work(end) - work(from);
    from = end;
  }
}

// One seed of the timeline. Hours are the time unit throughout.
class SeedRun {
 public:
  SeedRun(const Scenario& s, const Pricing& pricing, const std::vector<TraceFailure>* trace,
          int seed_index)
      : s_(s),
        pricing_(pricing),
        trace_(trace),
        topo_(s),
        fleet_(topo_),
        raw_(s.groups(), s.parallel.pp, s.parallel.tp),
        seed_key_(Rng::mix(s.run.seed, static_cast<std::uint64_t>(seed_index))),
        uptime_key_(Rng::mix(seed_key_, kUptimeStream)),
        repair_key_(Rng::mix(seed_key_, kRepairStream)),
        draws_(static_cast<std::size_t>(topo_.elements()), 0),
        ckpt_rng_(Rng::mix(seed_key_, kCkptStream)),
        slow_rng_(Rng::mix(seed_key_, kSlowStream)),
        start_(-s.run.warmup_days * 24.0),
        end_(s.run.duration_days * 24.0),
        bucket_h_(s.run.bucket_hours),
        buckets_(static_cast<std::size_t>(std::ceil(end_ / bucket_h_ - 1e-9))),
        ckpt_tau_(ckpt_interval_hours(s, trace)),
        ckpt_write_(s.policies.ckpt.write_s / 3600.0) {
    // Pool 0 completes every failed domain (dp-drop, spares); with a fixed
    // global batch the NTP policies have a pool of their own that keeps
    // spares free to form replicas (Pricing::complete_below).
    served_.emplace_back(topo_, s, s.parallel.tp);
    if (s.policies.fixed_global_batch) {
      served_.emplace_back(topo_, s, pricing.complete_below(Policy::kNtp));
    }
    for (auto& series : series_) series.assign(buckets_, 0.0);
    for (const double x : s.run.thresholds_percent) threshold_gpus_.push_back(x / 100.0 * s.cluster.gpus);
    above_h_.assign(threshold_gpus_.size(), 0.0);
    now_ = start_;
    failed_series_.assign(buckets_, 0.0);
    for (const Policy p : s.policies.compare) active_[static_cast<std::size_t>(p)] = true;
    for (std::size_t p = 0; p < kPolicyCount; ++p) value_[p] = 1.0;
    slow_value_.fill(1.0);
  }

  TimelineSeed run() {
    schedule_initial_failures();
    schedule_next_slow(start_);
    while (!events_.empty() && events_.top().hours < end_) {
      const Event e = events_.top();
      events_.pop();
      advance(e.hours);
      handle(e);
    }
    advance(end_);
    ckpt_commit(ckpt_up_since_, end_, true);
    return finish();
  }

 private:
  // --- failure process -----------------------------------------------------
  double element_mean_uptime() const {
    const double rate = s_.failures.rate_per_gpu_hour() * topo_.blast;
    return rate > 0.0 ? 1.0 / rate : kInf;
  }

  // Element e's i-th uptime and i-th repair come from streams keyed by
  // (seed, e, i): a job element's history is the same whatever the spare
  // pool, the policies compared or the repair model (for its failure times).
  double sample_uptime(int element) {
    const double mean = element_mean_uptime();
    if (!std::isfinite(mean)) return kInf;
    Rng rng = element_draw(uptime_key_, element, draws_[static_cast<std::size_t>(element)]);
    if (s_.failures.distribution == FailureDist::kWeibull) {
      return sample_weibull(rng, s_.failures.weibull_shape, mean);
    }
    return sample_exponential(rng, mean);
  }

  double sample_repair(int element) {
    Rng rng = element_draw(repair_key_, element, draws_[static_cast<std::size_t>(element)]);
    const bool hardware = rng.open01() < s_.failures.hardware_share;
    return sample_repair_hours(rng, hardware ? s_.failures.hardware_repair
                                             : s_.failures.software_repair);
  }

  void push(double hours, EventKind kind, int a, int b, int pool = 0) {
    if (hours < end_) events_.push({hours, kind, a, b, pool});
  }

  void schedule_initial_failures() {
    if (trace_) {
      for (std::size_t i = 0; i < trace_->size(); ++i) {
        const TraceFailure& f = (*trace_)[i];
        push(f.hours, EventKind::kFail, f.gpu / topo_.blast, static_cast<int>(i));
      }
      return;
    }
    for (int e = 0; e < topo_.elements(); ++e) {
      push(start_ + sample_uptime(e), EventKind::kFail, e, -1);
    }
  }

  // --- fail-slow -----------------------------------------------------------
  // GPUs of the job turn slow as one Poisson process (rate per GPU x GPUs, a
  // uniform GPU each time) on a stream of its own, so the fail-stop history
  // is untouched; a GPU already slow that is drawn again is left as it is.
  void schedule_next_slow(double from) {
    const double rate = s_.failslow.rate_per_gpu_hour() * s_.cluster.gpus;
    if (rate > 0.0) push(from + sample_exponential(slow_rng_, 1.0 / rate), EventKind::kSlowStart, -1, -1);
  }

  int replica_of(int gpu) const {
    const int group = gpu / s_.cluster.domain_size * topo_.groups_per_domain +
                      gpu % s_.cluster.domain_size / s_.parallel.tp;
    return group / s_.parallel.pp;
  }

  void on_slow_start() {
    const int gpu = static_cast<int>(slow_rng_.below(static_cast<std::uint64_t>(s_.cluster.gpus)));
    const double factor = sample_slowdown(slow_rng_, s_.failslow.slowdown);
    const double hours = sample_repair_hours(slow_rng_, s_.failslow.duration);
    schedule_next_slow(now_);
    if (slow_.count(gpu)) return;
    slow_[gpu] = SlowGpu{replica_of(gpu), factor};
    push(now_ + hours, EventKind::kSlowEnd, gpu, -1);
    if (now_ >= 0.0) ++slow_events_;
    reprice_slow(pricing_.pause().failure_s / 3600.0);
  }

  // drop and ntp-slow reconfigure at every change (the replica leaves or
  // rejoins; the group is laid out again); ignore never does.
  void reprice_slow(double pause_h) {
    std::vector<SlowGpu> slow;
    for (const auto& [gpu, g] : slow_) slow.push_back(g);
    for (std::size_t t = 0; t < kSlowTreatmentCount; ++t) {
      const auto treatment = static_cast<SlowTreatment>(t);
      slow_value_[t] = pricing_.failslow().value(treatment, slow);
      if (treatment != SlowTreatment::kIgnore) slow_pause_until_[t] = std::max(slow_pause_until_[t], now_ + pause_h);
    }
  }

  // --- state changes -------------------------------------------------------
  void handle(const Event& e) {
    if (e.kind == EventKind::kSlowStart) return on_slow_start();
    if (e.kind == EventKind::kSlowEnd) {
      slow_.erase(e.a);
      return reprice_slow(pricing_.pause().rejoin_s / 3600.0);
    }
    raw_touched_ = false;
    job_failed_ = false;
    for (ServedJob& served : served_) served.touched = false;
    double pause_s = pricing_.pause().rejoin_s;
    switch (e.kind) {
      case EventKind::kFail:
        if (fleet_.down(e.a)) return;  // a trace failure on a GPU already down
        on_fail(e.a, e.b >= 0 ? (*trace_)[static_cast<std::size_t>(e.b)].repair_hours
                              : sample_repair(e.a));
        pause_s = pricing_.pause().failure_s;
        break;
      case EventKind::kRepair:
        on_repair(e.a);
        break;
      case EventKind::kSlowStart:
      case EventKind::kSlowEnd:
        return;  // handled above
      case EventKind::kSwapDone: {
        ServedJob& served = served_[static_cast<std::size_t>(e.pool)];
        const SparePool::Swap swap{e.a, e.b};
        served.pool.on_swap_done(swap, fleet_, swaps_);
        refresh_served(served, swap.spare);
        start_swaps(e.pool);
        break;
      }
    }
    reprice(pause_s / 3600.0);
  }

  void on_fail(int element, double repair_hours) {
    const int domain = topo_.domain_of(element);
    const bool job = domain < topo_.job_domains;
    fleet_.fail(element);
    push(now_ + repair_hours, EventKind::kRepair, element, -1);
    if (job) {
      refresh_raw(domain, element);
      job_failed_ = true;
      failed_gpus_ += topo_.blast;
      if (now_ >= 0.0) {  // the warm-up only sets the state at time 0
        ++failures_;
        digest_ = Rng::mix(Rng::mix(digest_, static_cast<std::uint64_t>(element)),
                           std::bit_cast<std::uint64_t>(now_));
        peak_failed_gpus_ = std::max(peak_failed_gpus_, failed_gpus_);
        ckpt_failure(now_);
      }
    }
    for (std::size_t i = 0; i < served_.size(); ++i) {
      refresh_served(served_[i], domain);
      served_[i].pool.on_failure(domain, fleet_, swaps_);
      start_swaps(static_cast<int>(i));
    }
  }

  void on_repair(int element) {
    const int domain = topo_.domain_of(element);
    const bool job = domain < topo_.job_domains;
    fleet_.repair(element);
    if (job) {
      refresh_raw(domain, element);
      failed_gpus_ -= topo_.blast;
    }
    for (std::size_t i = 0; i < served_.size(); ++i) {
      refresh_served(served_[i], domain);
      served_[i].pool.on_repair(domain, fleet_, swaps_);
      start_swaps(static_cast<int>(i));
    }
    ++draws_[static_cast<std::size_t>(element)];
    if (!trace_) push(now_ + sample_uptime(element), EventKind::kFail, element, -1);
  }

  void refresh_raw(int domain, int element) {
    const int first = topo_.first_group(element);
    for (int g = first; g < first + topo_.group_span(element); ++g) {
      raw_.set_active(domain * topo_.groups_per_domain + g, fleet_.active(domain, g));
    }
    raw_touched_ = true;
  }

  void refresh_served(ServedJob& served, int physical_domain) {
    const int logical = served.pool.logical(physical_domain);
    if (logical < 0) return;
    for (int g = 0; g < topo_.groups_per_domain; ++g) {
      served.view.set_active(logical * topo_.groups_per_domain + g,
                             fleet_.active(physical_domain, g));
    }
    served.touched = true;
  }

  void start_swaps(int pool) {
    for (const SparePool::Swap& swap : swaps_) {
      push(now_ + s_.spares.swap_hours, EventKind::kSwapDone, swap.logical, swap.spare, pool);
    }
    swaps_.clear();
  }

  const ServedJob& served_for(Policy p) const {
    const bool own = (p == Policy::kNtp || p == Policy::kNtpPw) && served_.size() > 1;
    return served_[own ? 1 : 0];
  }

  // A policy reconfigures (and pauses) when its throughput changes, and the
  // NTP policies also whenever a GPU of their job leaves or joins: the
  // layouts change even if a boost keeps the throughput.
  void reprice(double pause_h) {
    for (std::size_t i = 0; i < kPolicyCount; ++i) {
      const auto p = static_cast<Policy>(i);
      if (!active_[i] || p == Policy::kCkptRestart) continue;
      const ServedJob& served = served_for(p);
      const double v = pricing_.value(p, raw_, served.view, served.pool.free_spares());
      // Shares only grow with k, so only a failure can raise the need.
      if (job_failed_ && now_ >= 0.0) note_spares_needed(i);
      const bool ntp = p == Policy::kNtp || p == Policy::kNtpPw;
      const bool touched = pricing_.uses_spares(p) ? served.touched : raw_touched_;
      if (v != value_[i] || (ntp && touched)) {
        pause_until_[i] = std::max(pause_until_[i], now_ + pause_h);
      }
      value_[i] = v;
      if (p == Policy::kNtpPw) boost_w_ = boost_power_w(served);
    }
  }

  // Upper bound: every degraded group that can run is boosted, whether or
  // not its replica is admitted.
  double boost_power_w(const ServedJob& served) const {
    const ReplicaView& view = pricing_.uses_spares(Policy::kNtpPw) ? served.view : raw_;
    const std::vector<double>& extra = pricing_.table(Policy::kNtpPw).extra_w;
    double w = 0.0;
    for (std::size_t k = 0; k < extra.size(); ++k) w += view.groups_with()[k] * extra[k];
    return w;
  }

  void note_spares_needed(std::size_t i) {
    // dp-drop and spares share one table: price it once.
    const auto drop = static_cast<std::size_t>(Policy::kDpDrop);
    const bool same = static_cast<Policy>(i) == Policy::kSpares && active_[drop];
    const double need = same ? need_now_[drop] : pricing_.spares_needed(static_cast<Policy>(i), raw_);
    need_now_[i] = need;
    peak_spares_[i] = std::max(peak_spares_[i], need);
  }

  // --- integration ---------------------------------------------------------
  void advance(double to) {
    if (to <= now_) return;
    if (now_ < 0.0) {  // warm-up: nothing is measured before time 0
      if (to <= 0.0) {
        now_ = to;
        return;
      }
      now_ = 0.0;
      start_measuring();
    }
    for (std::size_t j = 0; j < threshold_gpus_.size(); ++j) {
      if (failed_gpus_ > threshold_gpus_[j]) above_h_[j] += to - now_;
    }
    ckpt_replacement_failures(to);
    boost_wh_ += boost_w_ * (to - now_);
    accumulate(failed_series_, bucket_h_, now_, to, failed_gpus_);
    for (std::size_t i = 0; i < kPolicyCount; ++i) {
      if (!active_[i] || static_cast<Policy>(i) == Policy::kCkptRestart) continue;
      const double run_from = std::clamp(pause_until_[i], now_, to);
      pause_h_[i] += run_from - now_;
      if (value_[i] <= 0.0) pause_h_[i] += to - run_from;
      accumulate(series_[i], bucket_h_, run_from, to, value_[i]);
    }
    for (std::size_t t = 0; t < kSlowTreatmentCount; ++t) {
      const double run_from = std::clamp(slow_pause_until_[t], now_, to);
      slow_pause_h_[t] += run_from - now_;
      slow_work_[t] += slow_value_[t] * (to - run_from);
    }
    now_ = to;
  }

  // Time 0 after a warm-up: the state the warm-up left is where the measured
  // run starts (its peaks, and the spares it already needs).
  void start_measuring() {
    peak_failed_gpus_ = failed_gpus_;
    for (std::size_t i = 0; i < kPolicyCount; ++i) {
      if (active_[i] && static_cast<Policy>(i) != Policy::kCkptRestart) note_spares_needed(i);
    }
  }

  // ckpt-restart: every failure of a job GPU stops the job for restart_s and
  // loses what was computed since the last completed checkpoint. While up,
  // the job alternates tau hours of compute with write_s of checkpointing.
  void ckpt_failure(double at) {
    if (!active_[static_cast<std::size_t>(Policy::kCkptRestart)]) return;
    const double restart_h = s_.policies.ckpt.restart_s / 3600.0;
    if (at >= ckpt_up_since_) ckpt_commit(ckpt_up_since_, at, false);
    ckpt_up_since_ = std::max(ckpt_up_since_, at + restart_h);
  }

  // ckpt-restart runs at full size on replacement hardware: in place of the
  // job GPUs the fleet has down it holds others, which fail at the same rate
  // (memoryless, on their own random stream so the shared failure history is
  // untouched). With them its job fails at rate * gpus whatever the fleet.
  void ckpt_replacement_failures(double to) {
    if (!active_[static_cast<std::size_t>(Policy::kCkptRestart)] || trace_) return;
    const double rate = s_.failures.rate_per_gpu_hour() * failed_gpus_;
    if (rate <= 0.0) return;
    // Past this, a restart plus one checkpoint cycle succeeds with chance
    // < e^-50: no progress until the rate drops, so skip to `to`.
    const double attempt_h = s_.policies.ckpt.restart_s / 3600.0 +
                             (std::isfinite(ckpt_tau_) ? ckpt_tau_ + ckpt_write_ : 0.0);
    for (double t = now_ + sample_exponential(ckpt_rng_, 1.0 / rate); t < to;
         t += sample_exponential(ckpt_rng_, 1.0 / rate)) {
      ckpt_failure(t);
      if (rate * attempt_h > 50.0) {
        ckpt_up_since_ = std::max(ckpt_up_since_, to);
        return;
      }
    }
  }

  void ckpt_commit(double a, double b, bool final) {
    if (!active_[static_cast<std::size_t>(Policy::kCkptRestart)] || b <= a) return;
    auto& series = series_[static_cast<std::size_t>(Policy::kCkptRestart)];
    double compute = b - a;  // what is left after the completed cycles
    if (std::isfinite(ckpt_tau_)) {
      const double cycle = ckpt_tau_ + ckpt_write_;
      const double cycles = std::floor((b - a) / cycle);
      accumulate_cycles(series, bucket_h_, a, a + cycles * cycle, ckpt_tau_, cycle);
      a += cycles * cycle;
      compute = std::clamp(b - a, 0.0, ckpt_tau_);  // b - a may round below 0
    }
    if (final) {
      accumulate(series, bucket_h_, a, a + compute, 1.0);
    } else {
      ckpt_lost_h_ += compute;
    }
  }

  TimelineSeed finish() const {
    TimelineSeed out;
    out.series.assign(buckets_, PolicyValues{});
    out.failed_series.assign(buckets_, 0.0);
    for (std::size_t b = 0; b < buckets_; ++b) {
      const double width = std::min(bucket_h_, end_ - static_cast<double>(b) * bucket_h_);
      out.failed_series[b] = failed_series_[b] / width;
      for (std::size_t i = 0; i < kPolicyCount; ++i) out.series[b][i] = series_[i][b] / width;
    }
    double failed_h = 0.0;
    for (const double v : failed_series_) failed_h += v;
    out.failed_fraction = failed_h / (end_ * s_.cluster.gpus);
    for (std::size_t i = 0; i < kPolicyCount; ++i) {
      double work = 0.0;
      for (const double v : series_[i]) work += v;
      out.goodput[i] = work / end_;
      out.pause_hours[i] = pause_h_[i];
      out.spares_needed[i] = peak_spares_[i];
    }
    const auto ck = static_cast<std::size_t>(Policy::kCkptRestart);
    out.ckpt_lost_hours = ckpt_lost_h_;
    out.boost_energy_kwh = boost_wh_ / 1000.0;
    out.pause_hours[ck] = end_ - out.goodput[ck] * end_ - ckpt_lost_h_;
    out.peak_failed_gpus = peak_failed_gpus_;
    out.failures = failures_;
    out.failure_digest = digest_;
    for (const double h : above_h_) out.above_threshold.push_back(h / end_);
    for (std::size_t t = 0; t < kSlowTreatmentCount; ++t) {
      out.slow_goodput[t] = slow_work_[t] / end_;
      out.slow_pause_hours[t] = slow_pause_h_[t];
    }
    out.slow_events = slow_events_;
    return out;
  }

  const Scenario& s_;
  const Pricing& pricing_;
  const std::vector<TraceFailure>* trace_;
  Topology topo_;
  Fleet fleet_;
  ReplicaView raw_;
  std::uint64_t seed_key_;
  std::uint64_t uptime_key_;
  std::uint64_t repair_key_;
  std::vector<std::uint32_t> draws_;  // per element: failures so far (its stream position)
  Rng ckpt_rng_;  // ckpt-restart's replacement hardware
  Rng slow_rng_;  // the fail-slow process
  std::priority_queue<Event, std::vector<Event>, std::greater<>> events_;
  std::vector<SparePool::Swap> swaps_;
  bool raw_touched_ = false;     // this event changed the job without spares
  std::vector<ServedJob> served_;  // the job as each spare pool serves it

  double start_;  // -warm-up hours
  double end_;
  double bucket_h_;
  std::size_t buckets_;
  double now_ = 0.0;
  std::array<bool, kPolicyCount> active_{};
  PolicyValues value_{};
  PolicyValues pause_until_{};
  PolicyValues pause_h_{};
  std::array<std::vector<double>, kPolicyCount> series_;
  std::vector<double> failed_series_;
  std::vector<double> threshold_gpus_;  // run.thresholds_percent as GPU counts
  std::vector<double> above_h_;         // hours above each threshold

  double ckpt_tau_;
  double ckpt_write_;
  double ckpt_up_since_ = 0.0;
  double ckpt_lost_h_ = 0.0;
  double boost_w_ = 0.0;   // ntp-pw's power above TDP now
  double boost_wh_ = 0.0;  // and its integral since time 0

  int failed_gpus_ = 0;
  int peak_failed_gpus_ = 0;
  int failures_ = 0;
  std::uint64_t digest_ = 0;
  PolicyValues peak_spares_{};  // peak over the run of spares_needed, per policy
  PolicyValues need_now_{};     // spares_needed at the last failure, per policy
  bool job_failed_ = false;     // this event is a failure of a job element

  std::map<int, SlowGpu> slow_;  // the job's slow GPUs now, by GPU
  SlowValues slow_value_{};      // per treatment, throughput now
  SlowValues slow_pause_until_{};
  SlowValues slow_pause_h_{};
  SlowValues slow_work_{};       // integral of throughput since time 0
  int slow_events_ = 0;
};

void add_seed(TimelineResult& r, const TimelineSeed& seed) {
  for (std::size_t i = 0; i < kPolicyCount; ++i) {
    PolicySummary& p = r.policy[i];
    p.goodput_mean += seed.goodput[i];
    p.goodput_stderr += seed.goodput[i] * seed.goodput[i];  // sum of squares until the end
    p.goodput_min = std::min(p.goodput_min, seed.goodput[i]);
    p.pause_hours_mean += seed.pause_hours[i];
    p.spares_needed_max = std::max(p.spares_needed_max, seed.spares_needed[i]);
    p.spares_needed_mean += seed.spares_needed[i];
  }
  r.ckpt_lost_hours_mean += seed.ckpt_lost_hours;
  r.boost_energy_kwh_mean += seed.boost_energy_kwh;
  r.failed_fraction_mean += seed.failed_fraction;
  r.peak_failed_gpus_mean += seed.peak_failed_gpus;
  r.peak_failed_gpus_max = std::max(r.peak_failed_gpus_max, seed.peak_failed_gpus);
  r.failures_mean += seed.failures;
  for (std::size_t t = 0; t < kSlowTreatmentCount; ++t) {
    PolicySummary& p = r.slow[t];
    p.goodput_mean += seed.slow_goodput[t];
    p.goodput_stderr += seed.slow_goodput[t] * seed.slow_goodput[t];
    p.goodput_min = std::min(p.goodput_min, seed.slow_goodput[t]);
    p.pause_hours_mean += seed.slow_pause_hours[t];
  }
  r.slow_events_mean += seed.slow_events;
  for (std::size_t j = 0; j < seed.above_threshold.size(); ++j) {
    r.above_threshold_mean[j] += seed.above_threshold[j];
    r.above_threshold_max[j] = std::max(r.above_threshold_max[j], seed.above_threshold[j]);
  }
  for (std::size_t b = 0; b < seed.series.size(); ++b) {
    r.failed_series_mean[b] += seed.failed_series[b];
    for (std::size_t i = 0; i < kPolicyCount; ++i) r.series_mean[b][i] += seed.series[b][i];
  }
}

void finish_means(TimelineResult& r) {
  const double n = r.seeds;
  r.slow_events_mean /= n;
  for (PolicySummary& p : r.slow) {
    p.goodput_mean /= n;
    const double var = std::max(0.0, p.goodput_stderr / n - p.goodput_mean * p.goodput_mean);
    p.goodput_stderr = r.seeds > 1 ? std::sqrt(var * n / (n - 1.0) / n) : 0.0;
    p.pause_hours_mean /= n;
  }
  for (PolicySummary& p : r.policy) {
    p.goodput_mean /= n;
    const double var = std::max(0.0, p.goodput_stderr / n - p.goodput_mean * p.goodput_mean);
    p.goodput_stderr = r.seeds > 1 ? std::sqrt(var * n / (n - 1.0) / n) : 0.0;
    p.pause_hours_mean /= n;
    p.spares_needed_mean /= n;
  }
  r.ckpt_lost_hours_mean /= n;
  r.boost_energy_kwh_mean /= n;
  r.failed_fraction_mean /= n;
  r.peak_failed_gpus_mean /= n;
  r.failures_mean /= n;
  for (double& v : r.above_threshold_mean) v /= n;
  for (std::size_t b = 0; b < r.series_mean.size(); ++b) {
    r.failed_series_mean[b] /= n;
    for (double& v : r.series_mean[b]) v /= n;
  }
}

}  // namespace

double ckpt_interval_hours(const Scenario& s, const std::vector<TraceFailure>* trace) {
  if (s.policies.ckpt.interval_hours > 0.0) return s.policies.ckpt.interval_hours;
  double failures_per_hour = s.failures.rate_per_gpu_hour() * s.cluster.gpus;
  if (trace) {
    // Only the failures within the run count; a trace may run past it.
    const double hours = s.run.duration_days * 24.0;
    const auto within = std::count_if(trace->begin(), trace->end(),
                                      [&](const TraceFailure& f) { return f.hours < hours; });
    failures_per_hour = static_cast<double>(within) / hours;
  }
  if (failures_per_hour <= 0.0) return kInf;
  const double write_h = s.policies.ckpt.write_s / 3600.0;
  const double mtbf_h = 1.0 / failures_per_hour;
  // Young (1974): tau = sqrt(2 * C * M); with C = 0 checkpoints are free, so
  // take them as often as one step would allow (a minute).
  return std::max(std::sqrt(2.0 * write_h * mtbf_h), 1.0 / 60.0);
}

TimelineSeed run_timeline_seed(const Scenario& s, const Pricing& pricing,
                               const std::vector<TraceFailure>* trace, int seed_index) {
  return SeedRun(s, pricing, trace, seed_index).run();
}

TimelineResult run_timeline(const Scenario& s, const Pricing& pricing,
                            const std::vector<TraceFailure>* trace) {
  TimelineResult r;
  r.duration_hours = s.run.duration_days * 24.0;
  r.bucket_hours = s.run.bucket_hours;
  r.seeds = s.run.seeds;
  r.ckpt_interval_hours = ckpt_interval_hours(s, trace);
  for (PolicySummary& p : r.policy) p.goodput_min = kInf;
  for (PolicySummary& p : r.slow) p.goodput_min = kInf;
  r.failslow = s.failslow.rate_per_gpu_day > 0.0;
  r.above_threshold_mean.assign(s.run.thresholds_percent.size(), 0.0);
  r.above_threshold_max.assign(s.run.thresholds_percent.size(), 0.0);
  // Seeds run in blocks so memory stays bounded with millions of seeds; each
  // block is summed in seed order, so the sums do not depend on the threads.
  constexpr int kBlock = 256;
  std::vector<TimelineSeed> block;
  for (int first = 0; first < s.run.seeds; first += kBlock) {
    const int count = std::min(kBlock, s.run.seeds - first);
    block.assign(static_cast<std::size_t>(count), TimelineSeed{});
    parallel_for(count, s.run.threads, [&](int i) {
      block[static_cast<std::size_t>(i)] = run_timeline_seed(s, pricing, trace, first + i);
    });
    if (first == 0) {
      r.series_mean.assign(block.front().series.size(), PolicyValues{});
      r.failed_series_mean.assign(block.front().series.size(), 0.0);
    }
    for (const TimelineSeed& seed : block) add_seed(r, seed);
    if (first == 0) r.first_seed = std::move(block.front());
  }
  finish_means(r);
  return r;
}

}  // namespace ntp::sim
