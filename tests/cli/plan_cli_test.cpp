// `ntp plan` end to end: the JSON it prints, its tables, and its exit codes
// (2 bad input, 3 impossible) with nothing on stdout when it fails.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "cli_run.h"

namespace {

using json = nlohmann::json;

struct Result {
  int code = -1;
  std::string out;
  std::string err;
};

// Runs `ntp plan` with `args` (each passed as one shell word).
Result plan(const std::vector<std::string>& args) {
  std::string words = "plan";
  for (const std::string& a : args) words += " '" + a + "'";
  const ntp::testing::CliRun run = ntp::testing::run_cli(NTP_BINARY, words);
  return Result{run.exit_code, run.out, run.err};
}

json plan_json(const std::vector<std::string>& args) {
  std::vector<std::string> with_json = args;
  with_json.push_back("--json");
  const Result r = plan(with_json);
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_TRUE(r.err.empty()) << r.err;
  return json::parse(r.out);
}

TEST(PlanCli, HealthyJobIsTheContiguousLayoutWithEmptyPlans) {
  const json j = plan_json({"--units", "50304", "--tp", "8", "--replicas", "2"});
  EXPECT_EQ(j["units"], 50304);
  EXPECT_EQ(j["tp"], 8);
  EXPECT_EQ(j["replicas"], 2);
  EXPECT_EQ(j["sync_degree"], 8);
  ASSERT_EQ(j["sync_partition"].size(), 8u);
  ASSERT_EQ(j["replica_layouts"].size(), 2u);
  for (const json& r : j["replica_layouts"]) {
    EXPECT_FALSE(r["dropped"]);
    EXPECT_EQ(r["core"], json::array({0, 1, 2, 3, 4, 5, 6, 7}));
    EXPECT_TRUE(r["pre_sync"].empty());
    EXPECT_TRUE(r["post_sync"].empty());
    for (int s = 0; s < 8; ++s)
      EXPECT_EQ(r["layout"][s], json::array({json::array({s * 6288, (s + 1) * 6288})}));
  }
  EXPECT_FALSE(j.contains("transition"));
}

TEST(PlanCli, DegradedReplicaLayoutAndSyncPlans) {
  const json j = plan_json({"--units", "10", "--tp", "4", "--replicas", "2", "--failed", "1:2"});
  EXPECT_EQ(j["sync_degree"], 3);
  EXPECT_EQ(j["sync_partition"], json::parse("[[[0,4]],[[4,7]],[[7,10]]]"));
  const json& r0 = j["replica_layouts"][0];
  EXPECT_EQ(r0["layout"], json::parse("[[[0,3]],[[4,7]],[[7,9]],[[3,4],[9,10]]]"));
  EXPECT_EQ(r0["pre_sync"], json::parse(R"([{"from":3,"to":0,"units":[[3,4]]},
                                            {"from":3,"to":2,"units":[[9,10]]}])"));
  EXPECT_EQ(r0["post_sync"], json::parse(R"([{"from":0,"to":3,"units":[[3,4]]},
                                             {"from":2,"to":3,"units":[[9,10]]}])"));
  const json& r1 = j["replica_layouts"][1];
  EXPECT_EQ(r1["active"], json::array({0, 1, 3}));
  EXPECT_EQ(r1["core"], json::array({0, 1, 3}));
  EXPECT_EQ(r1["layout"], json::parse("[[[0,4]],[[4,7]],[],[[7,10]]]"));
}

TEST(PlanCli, MinTpDropsAReplica) {
  const json j = plan_json(
      {"--units", "64", "--tp", "4", "--replicas", "2", "--failed", "1:0,1", "--min-tp", "3"});
  EXPECT_EQ(j["sync_degree"], 4);
  EXPECT_TRUE(j["replica_layouts"][1]["dropped"]);
  EXPECT_TRUE(j["replica_layouts"][1]["core"].empty());
  EXPECT_EQ(j["replica_layouts"][1]["layout"], json::parse("[[],[],[],[]]"));
}

TEST(PlanCli, TransitionListsMovesAndTotals) {
  const json j = plan_json({"--units", "12", "--tp", "4", "--replicas", "3", "--to-failed", "1:2"});
  EXPECT_EQ(j["to"]["sync_degree"], 3);
  EXPECT_EQ(j["transition_units"]["cross"], 3);
  EXPECT_EQ(j["transition_units"]["intra"], 11);
  long long intra = 0, cross = 0;
  for (const json& m : j["transition"]) {
    const bool crosses = m["from"][0] != m["to"][0];
    EXPECT_EQ(m["cross_domain"], crosses);
    for (const json& iv : m["units"])
      (crosses ? cross : intra) += iv[1].get<long long>() - iv[0].get<long long>();
  }
  EXPECT_EQ(intra, 11);
  EXPECT_EQ(cross, 3);
  const json expected =
      json::parse(R"({"from":[0,2],"to":[1,1],"units":[[6,8]],"cross_domain":true})");
  EXPECT_NE(std::find(j["transition"].begin(), j["transition"].end(), expected),
            j["transition"].end());
}

TEST(PlanCli, EmptyToFailedMeansEverySlotRepaired) {
  for (const std::string& empty : {std::string("--to-failed="), std::string("--to-failed")}) {
    std::vector<std::string> args = {"--units", "12",       "--tp", "4",  "--replicas",
                                     "2",       "--failed", "1:2",  empty};
    if (empty == "--to-failed") args.push_back("");
    const json j = plan_json(args);
    EXPECT_EQ(j["to"]["sync_degree"], 4) << empty;
    EXPECT_EQ(j["transition_units"]["cross"], 0) << empty;
  }
}

TEST(PlanCli, TableWithoutJson) {
  const Result r = plan({"--units", "10", "--tp", "4", "--replicas", "3", "--failed", "1:2"});
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("sync degree K = 3"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("extra         2  [3,4) [9,10)"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("failed        0  -"), std::string::npos) << r.out;
  EXPECT_EQ(plan({"--help"}).code, 0);
}

struct BadCase {
  std::vector<std::string> args;
  std::string names;  // what the message must mention
};

TEST(PlanCli, BadInputExitsTwoWithNothingOnStdout) {
  const std::vector<std::string> job = {"--units", "8", "--tp", "4", "--replicas", "2"};
  const std::vector<BadCase> cases = {
      {{"--units", "0", "--tp", "4", "--replicas", "2"}, "--units"},
      {{"--units", "8", "--tp", "4"}, "--replicas"},
      {{"--units", "8", "--tp", "x", "--replicas", "2"}, "--tp"},
      {{"--failed", "0:4"}, "--failed: failed slot 4 of replica 0 out of range"},
      {{"--failed", "2:1"}, "--failed: failed replica 2 out of range"},
      {{"--failed", "0:1,1"}, "--failed: duplicate slot 1 of replica 0"},
      {{"--failed", "0-1"}, "--failed: malformed entry '0-1'"},
      {{"--failed", "0:a"}, "bad slot 'a'"},
      {{"--to-failed", "1:9"}, "--to-failed: failed slot 9 of replica 1"},
      {{"--min-tp", "5"}, "--min-tp 5 exceeds --tp 4"},
      {{"--bogus"}, "--bogus"},
  };
  for (const BadCase& c : cases) {
    std::vector<std::string> args = c.args;
    if (args[0] != "--units") args.insert(args.begin(), job.begin(), job.end());
    const Result r = plan(args);
    EXPECT_EQ(r.code, 2) << c.names << "\n" << r.err;
    EXPECT_TRUE(r.out.empty()) << c.names;
    EXPECT_NE(r.err.find(c.names), std::string::npos) << r.err;
  }
  const Result few = plan({"--units", "3", "--tp", "4", "--replicas", "2", "--json"});
  EXPECT_EQ(few.code, 2);
  EXPECT_TRUE(few.out.empty());
  EXPECT_NE(few.err.find("units (3) smaller than the 4 active slots of replica 0"),
            std::string::npos)
      << few.err;
}

TEST(PlanCli, LostUnitsExitThreeNamingReplicaAndCount) {
  const Result r =
      plan({"--units", "8", "--tp", "4", "--replicas", "1", "--to-failed", "0:1", "--json"});
  EXPECT_EQ(r.code, 3);
  EXPECT_TRUE(r.out.empty());
  EXPECT_NE(r.err.find("replica 0 would lose 2 units [2,4)"), std::string::npos) << r.err;
  // Two replicas that lose the same holder lose those units together.
  const Result both =
      plan({"--units", "8", "--tp", "4", "--replicas", "2", "--to-failed", "0:1;1:1"});
  EXPECT_EQ(both.code, 3);
  EXPECT_TRUE(both.out.empty());
  EXPECT_NE(both.err.find("replica 1 would lose 2 units"), std::string::npos) << both.err;
  const Result none =
      plan({"--units", "8", "--tp", "4", "--replicas", "1", "--failed", "0:0,1,2,3"});
  EXPECT_EQ(none.code, 3);
  EXPECT_TRUE(none.out.empty());
  EXPECT_NE(none.err.find("no replica can train"), std::string::npos) << none.err;
}

// ---- --model: every kind, today's cut beside the configured one ----------

std::vector<long long> widths(const json& kind) {
  return kind["widths"].get<std::vector<long long>>();
}

TEST(PlanCli, AlignCutsOneKindInBlocks) {
  const json j = plan_json({"--units", "3072", "--tp", "5", "--replicas", "1", "--align", "64"});
  EXPECT_EQ(j["align"], 64);
  EXPECT_EQ(j["block"], 64);
  EXPECT_EQ(j["replica_layouts"][0]["layout"][4],
            json::parse("[[2496,3072]]"));  // 9 blocks, the last slot
  const json today = plan_json({"--units", "3072", "--tp", "5", "--replicas", "1"});
  EXPECT_EQ(today["block"], 1);
  EXPECT_EQ(today["replica_layouts"][0]["layout"][4], json::parse("[[2458,3072]]"));  // 614 units
}

TEST(PlanCli, ModelReportsWidthsAndPhaseLoadsOfBothCuts) {
  const json j = plan_json({"--model", "gpt2", "--tp", "5", "--replicas", "2", "--failed", "1:4"});
  EXPECT_EQ(j["model"]["ffn"], 3072);
  EXPECT_DOUBLE_EQ(j["unit_flops"]["neuron"].get<double>(), 3 * 4.0 * 768);
  const json& today = j["today"];
  const json& configured = j["configured"];
  EXPECT_EQ(today["align"], 1);
  EXPECT_EQ(today["balance"], "count");
  EXPECT_EQ(configured["align"], 64);
  EXPECT_EQ(configured["balance"], "work");
  EXPECT_EQ(configured["kinds"][1],
            json::parse(R"({"kind":"neurons","units":3072,"block":64,"sync_degree":4})"));
  EXPECT_EQ(configured["kinds"][0]["block"], 1);  // heads stay whole
  const json& t0 = today["replica_reports"][0];
  const json& c0 = configured["replica_reports"][0];
  EXPECT_EQ(widths(t0["neurons"]), (std::vector<long long>{615, 615, 614, 614, 614}));
  EXPECT_EQ(widths(c0["neurons"]), (std::vector<long long>{640, 640, 640, 576, 576}));
  EXPECT_EQ(t0["neurons"]["unaligned"], 5);  // no width a multiple of 8
  EXPECT_EQ(c0["neurons"]["unaligned"], 0);
  EXPECT_EQ(widths(c0["heads"]), (std::vector<long long>{3, 3, 2, 2, 2}));
  EXPECT_DOUBLE_EQ(c0["heads"]["busiest_over_ideal"].get<double>(), 3 / 2.4);
  EXPECT_DOUBLE_EQ(c0["neurons"]["busiest_over_ideal"].get<double>(), 640 / (3072 / 5.0));
  EXPECT_EQ(c0["neurons"]["phase"], "mlp");
  EXPECT_GT(c0["step_busiest_over_ideal"].get<double>(), 1.0);
  // Replica 1 (slot 4 failed) holds nothing there.
  EXPECT_EQ(widths(configured["replica_reports"][1]["neurons"])[4], 0);
}

TEST(PlanCli, ModelShapeFlagsGiveThe480bExampleAtTp30) {
  // examples/sim/b200_32k.toml: a domain of 32 with 2 slots lost runs TP 30.
  const json j = plan_json({"--model", "gpt2", "--d-model", "20480", "--heads", "128", "--vocab",
                            "131072", "--seq-len", "16384", "--layers", "100", "--tp", "32",
                            "--replicas", "1", "--failed", "0:30,31"});
  EXPECT_EQ(j["model"]["ffn"], 81920);
  const json& t = j["today"]["replica_reports"][0];
  const json& c = j["configured"]["replica_reports"][0];
  EXPECT_DOUBLE_EQ(c["heads"]["busiest_over_ideal"].get<double>(), 5 / (128 / 30.0));
  EXPECT_EQ(widths(t["neurons"])[0], 2731);
  EXPECT_EQ(t["neurons"]["unaligned"], 30);
  EXPECT_EQ(widths(c["neurons"])[0], 2752);
  EXPECT_EQ(widths(c["neurons"])[29], 2688);
  EXPECT_EQ(c["neurons"]["unaligned"], 0);
}

TEST(PlanCli, SpeedsShapeTheWorkCutNotTheCountCut) {
  const std::vector<std::string> job = {"--model",    "gpt2", "--tp",     "4",
                                        "--replicas", "1",    "--speeds", "0:1,1,0.5,1"};
  const json work = plan_json(job);
  EXPECT_EQ(widths(work["configured"]["replica_reports"][0]["neurons"]),
            (std::vector<long long>{896, 896, 448, 832}));
  // Today's cut holds equal counts, so the slow slot is twice as busy.
  EXPECT_DOUBLE_EQ(
      work["today"]["replica_reports"][0]["neurons"]["busiest_over_ideal"].get<double>(),
      768 / 0.5 / (3072 / 3.5));
  EXPECT_EQ(work["today"]["replica_reports"][0]["neurons"]["busiest_slot"], 2);
  std::vector<std::string> count = job;
  count.insert(count.end(), {"--balance", "count"});
  const json counted = plan_json(count);
  EXPECT_EQ(counted["configured"]["balance"], "count");
  EXPECT_EQ(widths(counted["configured"]["replica_reports"][0]["neurons"]),
            (std::vector<long long>{768, 768, 768, 768}));
}

TEST(PlanCli, ModelTableNamesKindsAndCuts) {
  const Result r =
      plan({"--model", "llama-small", "--tp", "3", "--replicas", "3", "--failed", "2:0"});
  EXPECT_EQ(r.code, 0) << r.err;
  for (const char* part :
       {"(SwiGLU)", "KV groups", "FFN neurons", "vocabulary rows", "today", "configured",
        "replica 1: same as replica 0", "trains on 2 of 3 slots", "240 224 224"})
    EXPECT_NE(r.out.find(part), std::string::npos) << part << "\n" << r.out;
}

TEST(PlanCli, ModelBadInputExitsTwoNamingTheFlagOrKind) {
  const std::vector<BadCase> cases = {
      {{"--model", "gpt2", "--units", "8", "--tp", "4", "--replicas", "1"}, "--units"},
      {{"--model", "gpt5", "--tp", "4", "--replicas", "1"},
       "--model: model preset: unknown gpt2 preset 'gpt5'"},
      {{"--tp", "4", "--replicas", "1"}, "--units or --model"},
      {{"--units", "8", "--tp", "4", "--replicas", "1", "--d-model", "64"}, "--d-model"},
      {{"--model", "gpt2", "--tp", "4", "--replicas", "1", "--align", "0"}, "--align"},
      {{"--model", "gpt2", "--tp", "4", "--replicas", "1", "--balance", "flops"}, "--balance"},
      {{"--model", "gpt2", "--tp", "4", "--replicas", "1", "--speeds", "0:1,1"},
       "--speeds: 2 speeds for replica 0"},
      {{"--model", "gpt2", "--tp", "4", "--replicas", "1", "--to-failed", "0:1"}, "--to-failed"},
      {{"--model", "tiny", "--tp", "5", "--replicas", "1"},
       "heads: units (4) smaller than the 5 active slots"},
      {{"--model", "gpt2", "--heads", "7", "--tp", "4", "--replicas", "1"}, "d_model"},
  };
  for (const BadCase& c : cases) {
    const Result r = plan(c.args);
    EXPECT_EQ(r.code, 2) << c.names << "\n" << r.err;
    EXPECT_TRUE(r.out.empty()) << c.names;
    EXPECT_NE(r.err.find(c.names), std::string::npos) << r.err;
  }
}

}  // namespace
