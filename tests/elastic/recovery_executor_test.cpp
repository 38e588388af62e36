// The recovery protocol driven against a recording executor instead of a
// trainer: in one process, over a file store and a real Gloo group of the
// survivors, Recovery agrees, plans, orders the state move, adopts the next
// plan, reconnects with the writer and resumes — through the ten methods of
// train::RecoveryExecutor and nothing else.
#include <algorithm>
#include <filesystem>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <unistd.h>

#include "comm/store.h"
#include "elastic/membership.h"
#include "elastic/recovery.h"
#include "layout/errors.h"
#include "tests/model/model_test_util.h"
#include "train/job_plan.h"

namespace ntp::elastic {
namespace {

namespace fs = std::filesystem;

// Records what the protocol asks; holds the state of a rank that applied
// `applied` steps under `plan`.
class RecordingExecutor final : public train::RecoveryExecutor {
 public:
  RecordingExecutor(train::JobPlan plan, std::int64_t applied) : plan_(std::move(plan)), applied_(applied) {}

  const train::JobPlan& plan() const override { return plan_; }
  train::CommitState commit_state() const override { return {applied_, -1, {1.25, false}}; }
  train::StateHashes state_hashes() const override { return {}; }
  void drop_groups() override { calls.push_back("drop_groups"); }
  void complete_commit(std::int64_t, const train::CommitOutcome&) override { calls.push_back("complete_commit"); }
  std::vector<std::pair<int, int>> exchange_links(const train::StateMoveOrder&) const override { return {}; }
  train::StateMoveStats move_state(const train::StateMoveOrder& order, comm::Group&) override {
    calls.push_back("move_state");
    moved_to = order.next->members();
    stale = order.stale;
    return {};
  }
  void adopt(const train::JobPlan& next) override {
    calls.push_back("adopt");
    plan_ = next;
  }
  void connect(int writer) override {
    calls.push_back("connect");
    writer_ = writer;
  }
  void rerun_validation(std::int64_t /*resume*/) override { calls.push_back("rerun_validation"); }
  void resume_at(std::int64_t resume) override {
    calls.push_back("resume_at");
    resumed_at = resume;
  }
  void event(const std::string& name, nlohmann::json) const override { events.push_back(name); }

  std::vector<std::string> calls;
  mutable std::vector<std::string> events;
  std::vector<int> moved_to;
  bool stale = true;
  int writer_ = -1;
  std::int64_t resumed_at = -1;

 private:
  train::JobPlan plan_;
  std::int64_t applied_;
};

// dp x tp of the small test model, rank 1 dead (the launcher's mark), seen
// from rank 0 which applied 6 steps.
struct OneSurvivor {
  fs::path dir = fs::temp_directory_path() / ("ntp_recovery_executor_" + std::to_string(::getpid()));
  std::shared_ptr<comm::Store> store;
  RecordingExecutor trainer;
  train::WorkerOptions options;

  static train::JobPlan plan_of(std::int64_t dp, std::int64_t tp) {
    train::Config config;
    config.parallel.dp = dp;
    config.parallel.tp = tp;
    config.train.global_batch = 2;
    config.elastic.settle_s = 0.05;
    config.deadline.rendezvous_s = 10;
    config.deadline.collective_s = 10;
    return train::JobPlan::build(config, {model::testing::small_test_config(), 8, 16});
  }
  OneSurvivor(std::int64_t dp, std::int64_t tp) : trainer(plan_of(dp, tp), 6) {
    fs::remove_all(dir);
    store = comm::open_store("file:" + dir.string());
    store->set(dead_key(1), comm::to_bytes("exited"));
    options.rank = 0;
    options.world_size = static_cast<int>(dp * tp);
  }
  ~OneSurvivor() { fs::remove_all(dir); }
};

TEST(RecoveryExecutor, ALostRankIsRecoveredThroughTheExecutorAlone) {
  OneSurvivor job(2, 1);
  RecordingExecutor& trainer = job.trainer;
  Recovery recovery(trainer, job.options, job.store);
  const RecoveryOutcome outcome = recovery.recover("rank 1 died");

  EXPECT_FALSE(outcome.leaving);
  EXPECT_EQ(outcome.resume, 7);
  EXPECT_EQ(trainer.calls, (std::vector<std::string>{"drop_groups", "move_state", "adopt", "connect", "rerun_validation", "resume_at"}));
  EXPECT_EQ(trainer.moved_to, (std::vector<int>{0}));
  EXPECT_FALSE(trainer.stale);
  EXPECT_EQ(trainer.plan().epoch(), 1u);
  EXPECT_EQ(trainer.plan().members(), (std::vector<int>{0}));
  EXPECT_EQ(trainer.writer_, 0);
  EXPECT_EQ(trainer.resumed_at, 7);
  for (const char* name : {"failure_detected", "membership_agreed", "state_transferred", "replicas_agree", "step_resumed"}) {
    EXPECT_NE(std::find(trainer.events.begin(), trainer.events.end(), name), trainer.events.end()) << name;
  }
}

TEST(RecoveryExecutor, UnitsWithoutAHolderStopTheJobBeforeAnythingMoves) {
  OneSurvivor job(1, 2);  // rank 1 held half the units, and no other replica has them
  Recovery recovery(job.trainer, job.options, job.store);
  EXPECT_THROW(recovery.recover("rank 1 died"), layout::UnitsLostError);
  EXPECT_EQ(job.trainer.calls, (std::vector<std::string>{"drop_groups"}));
  EXPECT_EQ(job.trainer.plan().epoch(), 0u);
}

}  // namespace
}  // namespace ntp::elastic
