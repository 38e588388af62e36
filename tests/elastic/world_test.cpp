#include "elastic/world.h"

#include <stdexcept>

#include <gtest/gtest.h>

#include "elastic/launcher.h"

namespace ntp::elastic {
namespace {

TEST(World, SingleProcessWithoutLauncherVariables) {
  const WorldInfo w = world_from_env({{"HOME", "/root"}});
  EXPECT_EQ(w.rank, 0);
  EXPECT_EQ(w.world_size, 1);
  EXPECT_EQ(w.source, "single process");
}

TEST(World, TorchrunStyleVariables) {
  const WorldInfo w = world_from_env({{"RANK", "5"},
                                      {"WORLD_SIZE", "8"},
                                      {"LOCAL_RANK", "1"},
                                      {"LOCAL_WORLD_SIZE", "4"},
                                      {"GROUP_RANK", "1"},
                                      {"NTP_STORE", "redis://10.0.0.1:6379"},
                                      {"MASTER_ADDR", "10.0.0.1"},
                                      {"MASTER_PORT", "6379"}});
  EXPECT_EQ(w.rank, 5);
  EXPECT_EQ(w.world_size, 8);
  EXPECT_EQ(w.local_rank, 1);
  EXPECT_EQ(w.local_world_size, 4);
  EXPECT_EQ(w.node_rank, 1);
  EXPECT_EQ(w.num_nodes, 2);
  EXPECT_EQ(w.store, "redis://10.0.0.1:6379");
  EXPECT_EQ(w.master_port, 6379);
  EXPECT_EQ(w.source, "ntp launch");
}

TEST(World, SlurmVariables) {
  const WorldInfo w = world_from_env({{"SLURM_PROCID", "6"},
                                      {"SLURM_NTASKS", "7"},
                                      {"SLURM_LOCALID", "2"},
                                      {"SLURM_NODEID", "1"},
                                      {"SLURM_NNODES", "2"},
                                      {"SLURM_TASKS_PER_NODE", "4,3"},
                                      {"NTP_STORE", "redis://head:6379"}});
  EXPECT_EQ(w.rank, 6);
  EXPECT_EQ(w.world_size, 7);
  EXPECT_EQ(w.local_rank, 2);
  EXPECT_EQ(w.local_world_size, 3);
  EXPECT_EQ(w.node_rank, 1);
  EXPECT_EQ(w.num_nodes, 2);
  EXPECT_EQ(w.source, "slurm");
  EXPECT_EQ(w.store, "redis://head:6379");
}

TEST(World, LauncherVariablesWinOverSlurm) {
  // `srun ntp launch ...`: the workers see both; ntp launch's are the workers' own.
  const WorldInfo w = world_from_env(
      {{"RANK", "3"}, {"WORLD_SIZE", "4"}, {"SLURM_PROCID", "0"}, {"SLURM_NTASKS", "1"}});
  EXPECT_EQ(w.rank, 3);
  EXPECT_EQ(w.source, "ntp launch");
}

TEST(World, SlurmTaskCountsExpand) {
  EXPECT_EQ(parse_slurm_tasks_per_node("4(x2),3"), (std::vector<int>{4, 4, 3}));
  EXPECT_EQ(parse_slurm_tasks_per_node("8"), (std::vector<int>{8}));
  EXPECT_THROW(parse_slurm_tasks_per_node("4(x2"), std::invalid_argument);
  EXPECT_THROW(parse_slurm_tasks_per_node(""), std::invalid_argument);
}

TEST(World, BadVariablesAreNamed) {
  auto message = [](const Environment& env) {
    try {
      world_from_env(env);
    } catch (const std::invalid_argument& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_NE(message({{"RANK", "x"}, {"WORLD_SIZE", "2"}}).find("RANK"), std::string::npos);
  EXPECT_NE(message({{"RANK", "2"}, {"WORLD_SIZE", "2"}}).find("world size 2"), std::string::npos);
  EXPECT_NE(message({{"SLURM_PROCID", "0"}, {"SLURM_NTASKS", "-1"}}).find("SLURM_NTASKS"),
            std::string::npos);
  EXPECT_NE(message({{"SLURM_PROCID", "0"}, {"SLURM_NODEID", "2"}, {"SLURM_TASKS_PER_NODE", "1(x2)"}})
                .find("SLURM_NODEID"),
            std::string::npos);
}

TEST(World, GpuOfALocalRankFollowsCudaVisibleDevices) {
  EXPECT_EQ(gpu_of_local_rank({}, 3), "3");
  EXPECT_EQ(gpu_of_local_rank({{"CUDA_VISIBLE_DEVICES", ""}}, 1), "1");
  const Environment env = {{"CUDA_VISIBLE_DEVICES", "6,GPU-1f2e,2"}};
  EXPECT_EQ(gpu_of_local_rank(env, 0), "6");
  EXPECT_EQ(gpu_of_local_rank(env, 1), "GPU-1f2e");
  EXPECT_EQ(gpu_of_local_rank(env, 2), "2");
  try {
    gpu_of_local_rank(env, 3);
    FAIL() << "expected an error";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("CUDA_VISIBLE_DEVICES"), std::string::npos) << e.what();
  }
}

TEST(WorkerEnv, SetsThePlaceOfEachWorker) {
  LaunchOptions o;
  o.nproc = 4;
  o.nnodes = 2;
  o.node_rank = 1;
  o.store = "redis://head:7000/job1";
  o.extra_env = {{"NTP_RUN_DIR", "/runs/a"}};
  const Environment env = worker_env(o, 2, 16, {});
  EXPECT_EQ(env.at("RANK"), "6");
  EXPECT_EQ(env.at("WORLD_SIZE"), "8");
  EXPECT_EQ(env.at("LOCAL_RANK"), "2");
  EXPECT_EQ(env.at("LOCAL_WORLD_SIZE"), "4");
  EXPECT_EQ(env.at("GROUP_RANK"), "1");
  EXPECT_EQ(env.at("NTP_STORE"), "redis://head:7000/job1");
  EXPECT_EQ(env.at("MASTER_ADDR"), "head");
  EXPECT_EQ(env.at("MASTER_PORT"), "7000");
  EXPECT_EQ(env.at("OPENBLAS_NUM_THREADS"), "4");
  EXPECT_EQ(env.at("NTP_RUN_DIR"), "/runs/a");
  // The user's thread setting wins; a worker sees the same place via world_from_env.
  EXPECT_FALSE(worker_env(o, 2, 16, {{"OMP_NUM_THREADS", "1"}}).contains("OMP_NUM_THREADS"));
  const WorldInfo w = world_from_env(env);
  EXPECT_EQ(w.rank, 6);
  EXPECT_EQ(w.node_rank, 1);
  EXPECT_EQ(w.num_nodes, 2);
}

TEST(WorkerEnv, HostsWithDifferentWorkerCountsNumberTheirRanksFromTheirFirst) {
  LaunchOptions o;
  o.nproc = 3;  // a replica at TP 3 on this host, one at TP 4 on the other
  o.nnodes = 2;
  o.node_rank = 1;
  o.first_rank = 4;
  o.world_size = 7;
  o.store = "redis://head:7000";
  o.command = {"true"};
  const Environment env = worker_env(o, 2, 16, {});
  EXPECT_EQ(env.at("RANK"), "6");
  EXPECT_EQ(env.at("WORLD_SIZE"), "7");
  EXPECT_EQ(env.at("LOCAL_WORLD_SIZE"), "3");
  o.first_rank = 5;  // ranks 5-7 of 7
  EXPECT_THROW(validate(o), std::invalid_argument);
}

TEST(LaunchOptions, SlurmNodesAndValidation) {
  LaunchOptions o;
  o.store = "file:/tmp/x";
  o.command = {"true"};
  apply_slurm_nodes(o, {{"SLURM_NNODES", "3"}, {"SLURM_NODEID", "2"}}, false);
  EXPECT_EQ(o.nnodes, 3);
  EXPECT_EQ(o.node_rank, 2);
  EXPECT_NO_THROW(validate(o));
  LaunchOptions given = o;
  apply_slurm_nodes(given, {{"SLURM_NNODES", "5"}, {"SLURM_NODEID", "4"}}, true);
  EXPECT_EQ(given.nnodes, 3) << "explicit --nnodes wins";

  auto named = [](LaunchOptions bad, const std::string& flag) {
    try {
      validate(bad);
      ADD_FAILURE() << "accepted: " << flag;
    } catch (const std::invalid_argument& e) {
      EXPECT_NE(std::string(e.what()).find(flag), std::string::npos) << e.what();
    }
  };
  LaunchOptions bad = o;
  bad.nproc = 0;
  named(bad, "--nproc");
  bad = o;
  bad.node_rank = 3;
  named(bad, "--node-rank");
  bad = o;
  bad.store = "tcp://x";
  named(bad, "--store");
  bad = o;
  bad.command.clear();
  named(bad, "command");
}

}  // namespace
}  // namespace ntp::elastic
