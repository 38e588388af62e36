#include "elastic/recovery.h"

#include <algorithm>
#include <exception>
#include <optional>
#include <sstream>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

#include "comm/counting_store.h"
#include "comm/error.h"
#include "comm/group.h"
#include "elastic/process_cpu.h"
#include "elastic/recovery_plan.h"
#include "layout/errors.h"
#include "layout/slot_speeds.h"
#include "train/recovery_source.h"
#include "train/run_dir.h"
#include "train/schedule.h"

namespace ntp::elastic {
namespace {

static_assert(std::chrono::duration<double>(kMaxDerivedSettle).count() == train::kMaxDerivedSettleS,
              "the config's settle bound is the agreement's");

using train::unix_time_s;

std::chrono::milliseconds ms(double seconds) {
  return std::chrono::milliseconds(static_cast<long>(seconds * 1000));
}

// What one phase of a recovery cost this rank: wall and CPU seconds, of the
// whole process (`cpu_s`: communication, pool, heartbeat and loss-watch
// threads included) and of the recovering thread alone (`thread_cpu_s`: the
// phase's own work; the background threads' share grows with the phase's
// wall time, which on an oversubscribed host grows with N), and the store
// operations and bytes made through `store` (the recovery's own calls; the
// heartbeat's are not counted). recovery_scale_bench sums them over ranks.
class PhaseMeter {
 public:
  explicit PhaseMeter(const comm::CountingStore& store)
      : store_(store), wall_(unix_time_s()), cpu_(process_cpu_s()), thread_cpu_(thread_cpu_s()),
        counts_(store.counts()) {}
  nlohmann::json fields() const {
    const comm::StoreCounts c = store_.counts() - counts_;
    return {{"seconds", unix_time_s() - wall_}, {"cpu_s", process_cpu_s() - cpu_},
            {"thread_cpu_s", thread_cpu_s() - thread_cpu_}, {"store_ops", c.operations}, {"store_bytes", c.bytes()}};
  }

 private:
  const comm::CountingStore& store_;
  double wall_;
  double cpu_;
  double thread_cpu_;
  comm::StoreCounts counts_;
};

nlohmann::json with(nlohmann::json fields, const nlohmann::json& more) {
  fields.update(more);
  return fields;
}

// The store's copy of an epoch's configuration, for ranks that rejoin
// without its history: parallel.failed as "replica:slot,slot;replica:slot"
// (a stage other than 0 as "replica.stage:slot,slot"), then "|" and
// parallel.speeds in its text form.
std::string layout_text(const train::ParallelConfig& p) {
  std::string text;
  for (const auto& [at, slots] : p.failed) {
    if (slots.empty()) continue;
    const std::string where = at.stage == 0 ? fmt::format("{}", at.replica) : fmt::format("{}.{}", at.replica, at.stage);
    text += fmt::format("{}{}:{}", text.empty() ? "" : ";", where, fmt::join(slots, ","));
  }
  return text + "|" + layout::slot_speeds_text(p.speeds);
}

train::ParallelConfig parse_layout(const train::ParallelConfig& base, const std::string& text) {
  train::ParallelConfig p = base;
  p.failed.clear();
  const std::size_t bar = text.find('|');
  p.speeds = layout::parse_slot_speeds(bar == std::string::npos ? "" : text.substr(bar + 1));
  std::stringstream in(text.substr(0, bar));
  for (std::string item; std::getline(in, item, ';');) {
    const std::size_t colon = item.find(':');
    const std::string where = item.substr(0, colon);
    const std::size_t dot = where.find('.');
    const train::ReplicaStage at{std::stoll(where.substr(0, dot)),
                                 dot == std::string::npos ? 0 : std::stoll(where.substr(dot + 1))};
    std::vector<std::int64_t>& slots = p.failed[at];
    std::stringstream list(item.substr(colon + 1));
    for (std::string slot; std::getline(list, slot, ',');) slots.push_back(std::stoll(slot));
  }
  return p;
}

std::string config_key(std::uint64_t epoch) { return fmt::format("ntp/e{}/config", epoch); }
// The speeds a relayout into `epoch` asks for, written before its agreement
// (first writer wins; every member that asks writes the same).
std::string speeds_key(std::uint64_t epoch) { return fmt::format("ntp/e{}/speeds", epoch); }
constexpr const char* kEpochKey = "ntp/epoch";

}  // namespace

std::string join_key(int rank) { return fmt::format("ntp/join/{}", rank); }
std::string done_key() { return "ntp/done"; }

Recovery::Recovery(train::RecoveryExecutor& trainer, const train::WorkerOptions& options,
                   std::shared_ptr<comm::Store> store)
    : trainer_(trainer),
      options_(options),
      store_(std::move(store)),
      members_(trainer.plan().members()),
      next_epoch_(trainer.plan().epoch() + 1) {
  plans_.emplace(trainer.plan().epoch(), trainer.plan());
}

const train::JobPlan& Recovery::plan_of(std::uint64_t epoch) {
  auto it = plans_.find(epoch);
  if (it != plans_.end()) return it->second;
  const auto text = store_->try_get(config_key(epoch));
  if (!text) throw RecoveryError(fmt::format("rank {}: the store has no configuration of epoch {}", options_.rank, epoch));
  const train::JobPlan& any = trainer_.plan();
  return plans_.emplace(epoch, any.at(parse_layout(any.parallel(), comm::to_text(*text)), epoch)).first->second;
}

std::vector<int> Recovery::candidates() const {
  std::vector<int> out;
  if (!config().elastic.rejoin) return out;
  for (int r = 0; r < trainer_.plan().world_size(); ++r) {
    if (!std::binary_search(members_.begin(), members_.end(), r)) out.push_back(r);
  }
  return out;
}

RecoveryOutcome Recovery::recover(const std::string& error) { return run(error, true); }

RecoveryOutcome Recovery::grow() { return run("a repaired rank asks to rejoin", false); }

RecoveryOutcome Recovery::join() {
  const std::shared_ptr<comm::Store> store = store_;
  const train::Config& config = this->config();
  store->set(join_key(options_.rank), comm::to_bytes("1"));
  trainer_.event("rank_rejoining", {{"applied_step", trainer_.commit_state().applied}});
  const double start = unix_time_s();
  while (unix_time_s() - start < config.deadline.rendezvous_s + config.deadline.collective_s) {
    if (store->try_get(done_key())) break;  // the run ended before this rank got in
    std::uint64_t latest = 0;
    if (const auto text = store->try_get(kEpochKey)) latest = std::stoull(comm::to_text(*text));
    members_ = plan_of(latest).members();
    next_epoch_ = latest + 1;
    plans_.erase(plans_.begin(), plans_.lower_bound(latest));
    try {
      return attempt("rejoin", unix_time_s(), false);
    } catch (const LeftOutError&) {
      continue;  // that epoch was agreed without this rank: the next one
    } catch (const comm::CommError&) {
      continue;  // a failure while it joined: the survivors recover, it tries again
    }
  }
  store->erase(join_key(options_.rank));
  trainer_.event("rank_left", {{"reason", "the run did not take this rank back before it ended or in time"}});
  return {true, 0};
}

RecoveryOutcome Recovery::relayout(const train::Relayout& change) {
  const std::string speeds = layout::slot_speeds_text(change.speeds);
  store_->create(speeds_key(next_epoch_), comm::to_bytes(speeds));
  return run(fmt::format("slot speeds \"{}\" measured", speeds), false, false);
}

RecoveryOutcome Recovery::run(const std::string& error, bool failure, bool counted) {
  const double start = unix_time_s();
  std::string cause = error;
  while (true) {
    if (counted && recoveries_ >= config().elastic.max_recoveries) {
      throw RecoveryError(fmt::format("rank {}: recovery budget spent (elastic.max_recoveries = {}); last "
                                      "failure: {}",
                                      options_.rank, config().elastic.max_recoveries, cause));
    }
    if (counted) ++recoveries_;
    try {
      return attempt(cause, start, failure);
    } catch (const LeftOutError& e) {
      trainer_.event("rank_left", {{"reason", e.what()}});
      return {true, 0};
    } catch (const comm::CommError& e) {
      cause = e.what();  // a failure during the recovery: the next epoch takes it over
      failure = true;
      counted = true;
    }
  }
}

RecoveryOutcome Recovery::attempt(const std::string& error, double start, bool failure) {
  const train::Config& config = this->config();
  const std::uint64_t epoch = next_epoch_++;
  const train::CommitState held = trainer_.commit_state();
  if (failure) {
    trainer_.event("failure_detected", {{"epoch", epoch - 1}, {"applied_step", held.applied},
                                        {"error", error}, {"seconds", unix_time_s() - start}});
  }
  const auto store = std::make_shared<comm::CountingStore>(store_);
  const PhaseMeter agreement(*store);
  if (failure && std::binary_search(members_.begin(), members_.end(), options_.rank)) {
    // Members still blocked in that epoch's calls abort them (loss_watch.h).
    store->create(failed_key(epoch - 1), comm::to_bytes(std::to_string(options_.rank)));
  }
  const double drop_start = thread_cpu_s();
  trainer_.drop_groups();  // O(members of its groups): closes every connection
  const double drop_cpu = thread_cpu_s() - drop_start;

  MembershipOptions mo;
  mo.rank = options_.rank;
  mo.members = members_;
  mo.candidates = candidates();
  mo.epoch = epoch;
  mo.applied = held.applied;
  mo.held_epoch = trainer_.plan().epoch();
  mo.pending = held.pending;
  mo.grad_norm = held.last.grad_norm;
  mo.skipped = held.last.skipped;
  mo.settle = ms(config.elastic.settle_s);  // 0: derived
  mo.wait_for_blocked = ms(config.deadline.collective_s + train::settle_bound_s(config.elastic));
  mo.deadline = ms(config.deadline.rendezvous_s);
  const Membership agreed = agree_membership(*store, mo);
  if (std::binary_search(agreed.joined.begin(), agreed.joined.end(), options_.rank)) {
    store_->erase(join_key(options_.rank));  // in: the survivors stop growing for it
  }
  if (fault_point_) fault_point_();
  std::optional<layout::SlotSpeeds> speeds;  // a relayout into this epoch asked for them
  if (const auto text = store->try_get(speeds_key(epoch))) speeds = layout::parse_slot_speeds(comm::to_text(*text));
  const train::JobPlan& last = plans_.rbegin()->second;  // the last agreed epoch's
  const double plan_start = thread_cpu_s();
  const RecoveryPlan plan = plan_recovery({agreed, last,
                                           [this](std::uint64_t e) -> const train::JobPlan& { return plan_of(e); },
                                           failure, speeds});
  const double plan_cpu = thread_cpu_s() - plan_start;
  const std::int64_t newest = plan.newest;
  if (plan.source && std::binary_search(plan.completes_commit.begin(), plan.completes_commit.end(), options_.rank)) {
    trainer_.complete_commit(newest, plan.outcome);
    trainer_.event("commit_completed", {{"epoch", epoch}, {"step", newest}});
  }
  if (plan.changes_nothing) {
    throw RecoveryError(fmt::format(
        "rank {}: a collective failed ({}) but no rank was lost and none is behind: not recovering (is "
        "deadline.collective_s too short for a step?)",
        options_.rank, error));
  }
  const train::JobPlan& next = plans_.insert_or_assign(epoch, *plan.next).first->second;
  // For ranks that rejoin later without this history (every survivor writes the same).
  store->set(config_key(epoch), comm::to_bytes(layout_text(next.parallel())));
  store->set(kEpochKey, comm::to_bytes(std::to_string(epoch)));
  members_ = plan.members;
  const std::vector<int> survivors = agreed.ranks();
  if (options_.rank == plan.writer && !(next.parallel().speeds == last.parallel().speeds)) {
    trainer_.event("relayout", {{"epoch", epoch}, {"speeds", layout::slot_speeds_text(next.parallel().speeds)},
                                {"from", layout::slot_speeds_text(last.parallel().speeds)}});
  }
  trainer_.event("membership_agreed",
                 with(agreement.fields(), {{"epoch", epoch}, {"survivors", survivors}, {"lost", agreed.lost},
                                           {"joined", agreed.joined}, {"drop_thread_cpu_s", drop_cpu},
                                           {"plan_thread_cpu_s", plan_cpu}, {"resume_step", plan.resume()},
                                           {"stale", plan.stale.size()}, {"layout_epoch", plan.from_epoch},
                                           {"seconds", unix_time_s() - start}}));
  if (!plan.source) std::rethrow_exception(plan.units_lost);

  const PhaseMeter transfer(*store);
  const train::StateMoveOrder order{&next, &plan.source->stages, survivors, plan.is_stale(options_.rank),
                                    plan.refreshes, newest};
  comm::GroupOptions exchange_options = train::group_options(config, options_, epoch, survivors, "recover");
  // Only the pairs that trade units or refresh a stale rank, besides the ring
  // for the proof and the barrier: at 144 ranks a full mesh is 10,296
  // connections.
  exchange_options.sparse = true;
  exchange_options.links = trainer_.exchange_links(order);
  std::unique_ptr<comm::Group> exchange = comm::create_group(store, exchange_options);
  const train::StateMoveStats moved = trainer_.move_state(order, *exchange);
  trainer_.adopt(next);
  trainer_.event("state_transferred",
                 with(transfer.fields(), {{"epoch", epoch}, {"units_in", moved.units_in}, {"bytes_in", moved.bytes_in},
                                          {"units_out", moved.units_out}, {"bytes_out", moved.bytes_out},
                                          {"stale", plan.is_stale(options_.rank)}}));
  prove_agreement(*exchange, survivors);
  exchange->barrier();  // every survivor holds its new state before anyone leaves
  // Its connections go before the next epoch's groups open theirs: with
  // many ranks on one host the ports of both would not fit (port_budget.h).
  exchange.reset();

  if (!next.is_member(options_.rank)) {
    trainer_.event("rank_left", {{"epoch", epoch}, {"reason", "replica below parallel.min_tp"}});
    return {true, 0};
  }
  const double connect_start = unix_time_s();
  const double connect_cpu = process_cpu_s();
  const int writer = plan.writer;
  trainer_.connect(writer);
  const double validation_start = unix_time_s();
  const double validation_cpu = process_cpu_s();
  trainer_.rerun_validation(newest + 1);
  const double validation_s = unix_time_s() - validation_start;
  const double validation_cpu_s = process_cpu_s() - validation_cpu;
  trainer_.resume_at(newest + 1);
  for (int r : agreed.joined) {
    if (r == options_.rank) trainer_.event("rank_rejoined", {{"epoch", epoch}, {"step", newest + 1}});
  }
  trainer_.event("step_resumed", {{"step", newest + 1}, {"epoch", epoch}, {"joined", agreed.joined},
                                  {"tp", next.split().active},
                                  {"writer", writer}, {"recovery_s", unix_time_s() - start},
                                  {"connect_s", unix_time_s() - connect_start - validation_s},
                                  {"connect_cpu_s", process_cpu_s() - connect_cpu - validation_cpu_s},
                                  {"validation_s", validation_s}});
  return {false, newest + 1};
}

void Recovery::prove_agreement(comm::Group& group, const std::vector<int>& survivors) {
  // Per rank: its replica (-1 if it no longer trains), its pipeline stage,
  // the digest of each unit kind and the hash of its replicated tensors.
  // A replica's digests add up over its stages; replicated tensors are
  // compared within a stage (each stage has its own).
  const train::StateHashes hashes = trainer_.state_hashes();
  const std::array<std::uint64_t, 3> digests = hashes.digests();
  const train::JobPlan& plan = trainer_.plan();
  const bool trains = plan.is_member(options_.rank);
  std::vector<std::int64_t> mine = {trains ? plan.place(options_.rank).replica : -1,
                                    plan.place(options_.rank).stage,
                                    static_cast<std::int64_t>(digests[0]), static_cast<std::int64_t>(digests[1]),
                                    static_cast<std::int64_t>(digests[2]),
                                    static_cast<std::int64_t>(hashes.replicated)};
  std::vector<std::int64_t> all(mine.size() * survivors.size());
  group.all_gather(comm::ConstView(mine.data(), mine.size()), comm::View(all.data(), all.size()));
  std::map<std::int64_t, std::array<std::uint64_t, 3>> per_replica;
  std::map<std::int64_t, std::uint64_t> replicated;  // per stage
  for (std::size_t i = 0; i < survivors.size(); ++i) {
    const std::int64_t* rec = all.data() + i * mine.size();
    if (rec[0] < 0) continue;
    std::array<std::uint64_t, 3>& sum = per_replica[rec[0]];
    for (int k = 0; k < 3; ++k) sum[static_cast<std::size_t>(k)] += static_cast<std::uint64_t>(rec[2 + k]);
    const auto rep = static_cast<std::uint64_t>(rec[5]);
    const auto [first_copy, inserted] = replicated.try_emplace(rec[1], rep);
    if (!inserted && first_copy->second != rep) {
      const std::string stage = plan.pp() > 1 ? fmt::format(" of stage {}", rec[1]) : "";
      throw RecoveryError(fmt::format("after recovery, rank {}'s replicated tensors{} differ from the other "
                                      "copies (state hash): the replicas do not agree",
                                      survivors[i], stage));
    }
  }
  const auto& [first_replica, first] = *per_replica.begin();
  for (const auto& [replica, sums] : per_replica) {
    for (std::size_t k = 0; k < 3; ++k) {
      if (sums[k] != first[k]) {
        throw RecoveryError(fmt::format("after recovery, replica {}'s {} differ from replica {}'s (state hash): "
                                        "the replicas do not agree",
                                        replica, train::kind_key(train::kShardedKinds[k]), first_replica));
      }
    }
  }
  trainer_.event("replicas_agree", {{"epoch", plan.epoch()}, {"replicas", per_replica.size()},
                                    {"digest", fmt::format("{:016x}", first[0] ^ first[1] ^ first[2])}});
}

}  // namespace ntp::elastic
