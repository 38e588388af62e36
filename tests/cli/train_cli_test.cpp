// `ntp train` and `ntp launch` as a new user meets them: run folders, path
// arguments, data formats, flags and settings that must be used or rejected.
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <csignal>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "tests/comm/redis_server.h"
#include <nlohmann/json.hpp>

#include "cli_run.h"

namespace {

namespace fs = std::filesystem;

// A small in-process run: TP = DP = 1, one layer.
const std::string kSmall = "--set model.layers=1 --set train.global_batch=2 --set train.micro_batch=2 ";

class TrainCliTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("ntp_train_cli_" + std::to_string(::getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  ntp::testing::CliRun ntp(const std::string& args) const { return ntp::testing::run_cli(NTP_BINARY, args); }
  ntp::testing::CliRun ntp_with_env(const std::string& env, const std::string& args) const {
    return ntp::testing::run_cli(env + " " + NTP_BINARY, args);
  }

  // A shell command in dir_; returns its exit status.
  int shell(const std::string& command) const {
    const int status = std::system(("cd " + dir_.string() + " && " + command).c_str());
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  }

  fs::path dir_;
};

std::vector<nlohmann::json> read_lines(const fs::path& path) {
  std::vector<nlohmann::json> lines;
  std::ifstream in(path);
  for (std::string line; std::getline(in, line);) {
    if (!line.empty()) lines.push_back(nlohmann::json::parse(line));
  }
  return lines;
}

std::string text_of(const ntp::testing::CliRun& run) { return run.out + run.err; }

TEST_F(TrainCliTest, RunsStartedTogetherGetAFolderEach) {
  const std::string train = std::string(NTP_BINARY) + " train " + kSmall + "--set train.steps=2 > /dev/null 2>&1";
  // Three runs at once and one right after: every one exits 0 into its own folder.
  ASSERT_EQ(shell("(" + train + " & " + train + " & " + train + " & wait) && " + train +
                  " && test $(ls runs | wc -l) -eq 4"),
            0);
  for (const auto& entry : fs::directory_iterator(dir_ / "runs")) {
    const auto metrics = read_lines(entry.path() / "metrics.jsonl");
    ASSERT_EQ(metrics.size(), 2u) << entry.path();
    EXPECT_EQ(metrics[0]["step"], 0);
    EXPECT_EQ(metrics[1]["step"], 1);
    std::size_t started = 0;
    for (const auto& e : read_lines(entry.path() / "events.jsonl")) started += e["event"] == "run_started";
    EXPECT_EQ(started, 1u) << entry.path();
  }
}

TEST_F(TrainCliTest, PathArgumentsAreCheckedForTheirKind) {
  const fs::path folder = dir_ / "folder";
  const fs::path file = dir_ / "file.toml";
  fs::create_directories(folder);
  std::ofstream(file) << "[train]\nsteps = 1\n";
  const std::vector<std::string> bad = {
      "train --config " + folder.string(),
      "train --run-dir " + file.string() + " --set train.steps=1",
      "sim run " + folder.string(),
      "sim model " + folder.string(),
      "verify " + file.string(),
      "launch --nproc 1 --run-dir " + file.string() + " -- true",
  };
  for (const std::string& args : bad) {
    const auto run = ntp(args);
    EXPECT_EQ(run.exit_code, 2) << args << "\n" << text_of(run);
    const bool named = text_of(run).find(folder.string()) != std::string::npos ||
                       text_of(run).find(file.string()) != std::string::npos;
    EXPECT_TRUE(named) << args << "\n" << text_of(run);
  }
  EXPECT_FALSE(fs::exists(dir_ / "runs"));
}

TEST_F(TrainCliTest, AnExplicitRunFolderHoldsOneRun) {
  const std::string run_dir = (dir_ / "run").string();
  // A run refused before it starts leaves the folder free (and a new default folder behind it gone).
  fs::create_directories(run_dir);
  std::ofstream(dir_ / "run" / "notes.txt") << "mine";
  EXPECT_EQ(ntp("train --set train.global_batch=100000 --run-dir " + run_dir).exit_code, 2);
  EXPECT_EQ(shell(std::string(NTP_BINARY) + " train --set train.global_batch=100000 2>/dev/null"), 2);
  EXPECT_FALSE(fs::exists(dir_ / "runs") && !fs::is_empty(dir_ / "runs"));
  ASSERT_EQ(ntp("train " + kSmall + "--set train.steps=1 --run-dir " + run_dir).exit_code, 0);
  const auto again = ntp("train " + kSmall + "--set train.steps=1 --run-dir " + run_dir);
  EXPECT_EQ(again.exit_code, 2) << text_of(again);
  EXPECT_NE(text_of(again).find("already holds a run"), std::string::npos) << text_of(again);
}

void write_uint16(const fs::path& path, std::size_t count) {
  std::vector<std::uint16_t> tokens(count);
  for (std::size_t i = 0; i < count; ++i) tokens[i] = static_cast<std::uint16_t>((i * 7) % 200);
  std::ofstream(path, std::ios::binary)
      .write(reinterpret_cast<const char*>(tokens.data()), static_cast<std::streamsize>(count * 2));
}

// The model_ready event of a run: how many tokens the trainer read.
std::int64_t data_tokens(const fs::path& run_dir) {
  for (const auto& e : read_lines(run_dir / "events.jsonl")) {
    if (e["event"] == "model_ready") return e["data_tokens"].get<std::int64_t>();
  }
  return -1;
}

TEST_F(TrainCliTest, NanoGptTokenFilesAreReadAsTokens) {
  write_uint16(dir_ / "train.bin", 4000);
  write_uint16(dir_ / "train.dat", 4000);
  const std::string common = "train " + kSmall + "--set train.steps=1 ";
  auto run = ntp(common + "--set data.path=" + (dir_ / "train.bin").string() + " --run-dir " + (dir_ / "a").string());
  ASSERT_EQ(run.exit_code, 0) << text_of(run);
  EXPECT_EQ(data_tokens(dir_ / "a"), 4000);  // not 8000 bytes of text
  run = ntp(common + "--set data.path=" + (dir_ / "train.dat").string() + " --set data.format=nanogpt --run-dir " +
            (dir_ / "b").string());
  ASSERT_EQ(run.exit_code, 0) << text_of(run);
  EXPECT_EQ(data_tokens(dir_ / "b"), 4000);
}

TEST_F(TrainCliTest, ABinOfNoTokenFormatIsRejected) {
  std::ofstream(dir_ / "odd.bin", std::ios::binary) << std::string(4001, 'x');
  auto run = ntp("train --set data.path=" + (dir_ / "odd.bin").string() + " --run-dir " + (dir_ / "a").string());
  EXPECT_EQ(run.exit_code, 2) << text_of(run);
  EXPECT_NE(text_of(run).find("data.path"), std::string::npos) << text_of(run);
  EXPECT_FALSE(fs::exists(dir_ / "a"));
  // An llm.c header with a wrong magic: a broken llm.c file, never text or raw tokens.
  std::vector<std::int32_t> header(256, 0);
  header[0] = 20240521;
  header[1] = 1;
  header[2] = 2000;
  {
    std::ofstream out(dir_ / "magic.bin", std::ios::binary);
    out.write(reinterpret_cast<const char*>(header.data()), 1024);
    out << std::string(4000, '\1');
  }
  run = ntp("train --set data.path=" + (dir_ / "magic.bin").string() + " --run-dir " + (dir_ / "b").string());
  EXPECT_EQ(run.exit_code, 2) << text_of(run);
  EXPECT_NE(text_of(run).find("magic"), std::string::npos) << text_of(run);
}

// A run's model.bin (an llm.c checkpoint) as model.init_from: every rank of a
// degraded dp 2 x tp 3 job reads only its units from it, and --verify's
// single-process replay (which reads the whole file) ends with the same
// parameters. A truncated or longer copy is refused before any worker
// starts, naming the file and the field.
TEST_F(TrainCliTest, InitFromIsReadByEveryRankAndABrokenFileIsRefusedBeforeWorkers) {
  auto run = ntp("train " + kSmall + "--set train.steps=1 --run-dir " + (dir_ / "first").string());
  ASSERT_EQ(run.exit_code, 0) << text_of(run);
  const fs::path model = dir_ / "first" / "model.bin";
  run = ntp("train --set model.init_from=" + model.string() +
            " --set train.global_batch=6 --set train.micro_batch=1 --set train.steps=2 --set parallel.dp=2"
            " --set parallel.tp=3 --set 'parallel.failed={0=[1]}' --verify --run-dir " + (dir_ / "tp3").string());
  ASSERT_EQ(run.exit_code, 0) << text_of(run);
  EXPECT_NE(text_of(run).find("verify: pass — "), std::string::npos) << text_of(run);
  int timed = 0;  // every rank says how long its read took
  for (const auto& e : read_lines(dir_ / "tp3" / "events.jsonl")) {
    timed += e["event"] == "rank_ready" && e.contains("init_s") && e["init_s"].get<double>() >= 0.0 ? 1 : 0;
  }
  EXPECT_EQ(timed, 5);
  const auto size = fs::file_size(model);
  for (const auto& [name, bytes] : {std::pair{"short.bin", size - 4}, std::pair{"long.bin", size + 1}}) {
    fs::copy_file(model, dir_ / name);
    fs::resize_file(dir_ / name, bytes);
    const fs::path run_dir = dir_ / (std::string(name) + ".run");
    run = ntp("train --set model.init_from=" + (dir_ / name).string() +
              " --set parallel.tp=2 --run-dir " + run_dir.string());
    EXPECT_EQ(run.exit_code, 2) << text_of(run);
    EXPECT_NE(text_of(run).find((dir_ / name).string() + ": parameters"), std::string::npos) << text_of(run);
    EXPECT_EQ(text_of(run).find("worker"), std::string::npos) << text_of(run);
    EXPECT_FALSE(fs::exists(run_dir)) << "a refused run leaves nothing behind";
  }
}

// The validation losses of a run, by step.
std::map<std::int64_t, double> val_losses(const fs::path& run_dir) {
  std::map<std::int64_t, double> out;
  for (const auto& m : read_lines(run_dir / "metrics.jsonl")) {
    if (m.contains("val_loss")) out[m["step"].get<std::int64_t>()] = m["val_loss"].get<double>();
  }
  return out;
}

TEST_F(TrainCliTest, ValidationLossGoesToMetricsAndTheProgressLine) {
  std::ofstream(dir_ / "val.txt") << std::string(3000, 'a') + "the quick brown fox jumps over the lazy dog\n";
  const std::string common = "train --set model.layers=1 --set train.global_batch=4 --set train.micro_batch=2 "
                             "--set train.steps=3 --set train.eval_every=2 --set train.eval_batches=2 "
                             "--set data.val_path=" + (dir_ / "val.txt").string() + " ";
  auto run = ntp(common + "--run-dir " + (dir_ / "local").string());
  ASSERT_EQ(run.exit_code, 0) << text_of(run);
  const auto local = val_losses(dir_ / "local");
  ASSERT_EQ(local.size(), 2u);  // after step 1 and after the last, step 2
  EXPECT_TRUE(local.contains(1) && local.contains(2));
  EXPECT_NE(run.out.find("val "), std::string::npos) << run.out;
  // The same run over two TP ranks of one replica and two replicas: the same losses.
  const std::vector<std::pair<std::string, std::string>> layouts = {{"tp", "--set parallel.tp=2"},
                                                                    {"dp", "--set parallel.dp=2"}};
  for (const auto& [name, layout] : layouts) {
    const fs::path out = dir_ / name;
    run = ntp(common + layout + " --run-dir " + out.string());
    ASSERT_EQ(run.exit_code, 0) << layout << "\n" << text_of(run);
    const auto parallel = val_losses(out);
    ASSERT_EQ(parallel.size(), 2u) << layout;
    for (const auto& [step, loss] : local) EXPECT_NEAR(parallel.at(step), loss, 2e-3 * loss) << layout;
  }
  // A validation file without passes, or passes without a file, is refused.
  EXPECT_EQ(ntp("train --set data.val_path=" + (dir_ / "val.txt").string()).exit_code, 2);
  EXPECT_EQ(ntp("train --set train.eval_every=2").exit_code, 2);
}

TEST_F(TrainCliTest, LaunchRejectsFlagsItDoesNotKnow) {
  const std::string run_dir = " --run-dir " + (dir_ / "l").string();
  for (const char* args : {"--nproc 1 --bogus=3 -- echo hi", "--nproc 1 --bogus -- echo hi",
                                  "--nproc 1 --bogus=3 echo hi"}) {
    const auto run = ntp("launch" + run_dir + " " + std::string(args));
    EXPECT_EQ(run.exit_code, 2) << args << "\n" << text_of(run);
    EXPECT_NE(text_of(run).find("--bogus"), std::string::npos) << args << "\n" << text_of(run);
    EXPECT_EQ(run.out.find("hi"), std::string::npos) << args;
  }
  // One flag under two spellings is given twice.
  EXPECT_EQ(ntp("launch" + run_dir + " --nproc 1 --nproc-per-node 2 -- true").exit_code, 2);
}

TEST_F(TrainCliTest, LaunchSpeaksTorchrunAndTeesWorkerOutput) {
  const std::string run_dir = " --run-dir " + (dir_ / "l").string();
  auto run = ntp("launch" + run_dir +
                 " --nproc-per-node 2 --nnodes 1 --node_rank 0 --tee 3 -- sh -c 'echo out $RANK; echo err $RANK >&2'");
  ASSERT_EQ(run.exit_code, 0) << text_of(run);
  for (const char* line : {"[rank 0] out 0", "[rank 0] err 0", "[rank 1] out 1", "[rank 1] err 1"}) {
    EXPECT_NE(run.out.find(line), std::string::npos) << line << "\n" << run.out;
  }
  if (ntp::comm::testing::RedisServer::available()) {  // the launcher claims its job id on the store
    const ntp::comm::testing::RedisServer redis;
    const std::string endpoint = redis.spec().substr(std::string("redis://").size());
    run = ntp("launch" + run_dir + " --nproc_per_node=1 --rdzv-endpoint " + endpoint +
              " --tee -- sh -c 'echo $NTP_STORE'");
    ASSERT_EQ(run.exit_code, 0) << text_of(run);
    EXPECT_NE(run.out.find("[rank 0] " + redis.spec()), std::string::npos) << run.out;
  }
  // Without --tee the output stays in the logs; a `--` inside the command is the command's.
  run = ntp("launch" + run_dir + " --nproc 1 sh -c 'echo \"$@\"' -- a -- b");
  ASSERT_EQ(run.exit_code, 0) << text_of(run);
  EXPECT_EQ(run.out, "");
  std::ifstream log(dir_ / "l" / "logs" / "rank-0.log");
  std::string first;
  std::getline(log, first);
  EXPECT_EQ(first, "a -- b");
}

// A reader of stdout that goes away (`ntp train | head -1`, a log collector
// that died) does not stop the run: it used to die of SIGPIPE with its
// workers, leaving no record of why. The run trains on, records its end and
// verifies. The programs `ntp launch` starts still get the default SIGPIPE.
TEST_F(TrainCliTest, AReaderOfStdoutThatGoesAwayDoesNotStopTheRun) {
  const fs::path run = dir_ / "piped";
  ASSERT_EQ(shell("(timeout -s KILL 120 " + std::string(NTP_BINARY) + " train --run-dir " + run.string() + " " +
                  kSmall + "--set parallel.dp=2 --set train.steps=10 2>err.txt; echo $? >rc.txt) | head -1 >/dev/null"),
            0);
  std::ifstream rc(dir_ / "rc.txt");
  int code = -1;
  rc >> code;
  std::ifstream err(dir_ / "err.txt");
  const std::string errors{std::istreambuf_iterator<char>(err), {}};
  EXPECT_EQ(code, 0) << "141 is death by SIGPIPE\n" << errors;
  EXPECT_EQ(read_lines(run / "metrics.jsonl").size(), 10u);
  EXPECT_TRUE(fs::exists(run / "summary.json"));
  const auto verified = ntp("verify " + run.string());
  EXPECT_EQ(verified.exit_code, 0) << text_of(verified);

  const std::string launch_dir = (dir_ / "l").string();
  ASSERT_EQ(ntp("launch --run-dir " + launch_dir + " --nproc 1 -- sh -c 'grep SigIgn /proc/$$/status'").exit_code, 0);
  std::ifstream log(dir_ / "l" / "logs" / "rank-0.log");
  std::string label, mask;
  log >> label >> mask;
  ASSERT_EQ(label, "SigIgn:");
  EXPECT_EQ(std::stoull(mask, nullptr, 16) & (1ull << (SIGPIPE - 1)), 0u) << "the program inherited SIGPIPE ignored";
}

TEST_F(TrainCliTest, LaunchNamesACommandItCannotExecute) {
  const auto run = ntp("launch --run-dir " + (dir_ / "l").string() + " --nproc 2 -- /no/such/worker --flag");
  EXPECT_EQ(run.exit_code, 2) << text_of(run);
  EXPECT_NE(run.err.find("/no/such/worker --flag"), std::string::npos) << run.err;
  EXPECT_NE(run.err.find("No such file or directory"), std::string::npos) << run.err;
}

TEST_F(TrainCliTest, LaunchChecksTimesAndWarnsOfAFileStoreAcrossHosts) {
  const std::string run_dir = " --run-dir " + (dir_ / "l").string();
  for (const char* bad : {"--straggler-timeout -1", "--straggler-timeout nan", "--term-grace -0.5"}) {
    const auto run = ntp("launch" + run_dir + " --nproc 1 " + bad + " -- true");
    EXPECT_EQ(run.exit_code, 2) << bad << "\n" << text_of(run);
    EXPECT_NE(run.err.find(std::string(bad).substr(0, 8)), std::string::npos) << run.err;
  }
  const auto run = ntp("launch" + run_dir + " --nproc 1 --nnodes 2 --node-rank 1 -- true");
  EXPECT_EQ(run.exit_code, 0) << text_of(run);
  EXPECT_NE(run.err.find("warning: a file store"), std::string::npos) << run.err;
  const auto single = ntp("launch" + run_dir + "2 --nproc 1 -- true");
  EXPECT_EQ(single.err.find("warning"), std::string::npos) << single.err;
}

TEST_F(TrainCliTest, PrintConfigShowsEveryResolvedKeyAndRunsNothing) {
  const auto run = ntp("train --set train.steps=7 --set data.format=nanogpt --print-config");
  ASSERT_EQ(run.exit_code, 0) << text_of(run);
  for (const char* line : {"[model]\n", "preset = \"tiny\"\n", "steps = 7\n", "format = \"nanogpt\"\n",
                           "eval_every = 0\n", "[run]\n"}) {
    EXPECT_NE(run.out.find(line), std::string::npos) << line << "\n" << run.out;
  }
  EXPECT_FALSE(fs::exists(dir_ / "runs"));
  // What it prints reads back as the same configuration.
  std::ofstream(dir_ / "printed.toml") << run.out;
  const auto again = ntp("train --config " + (dir_ / "printed.toml").string() + " --print-config");
  EXPECT_EQ(again.out, run.out);
  EXPECT_EQ(ntp("train --set test.kill_rank=99 --set test.kill_at_step=1 --print-config").exit_code, 2);
}

// Started from a model file, the run names that file and its shape wherever
// it names its model (the banner, run_started, the summary, the report), not
// the preset model.preset would have given ("model tiny" for a GPT-2 124M).
TEST_F(TrainCliTest, TheRunNamesTheModelFileItTrainsAndItsShape) {
  auto run = ntp("train " + kSmall + "--set model.d_model=64 --set model.heads=2 --set train.steps=1 --run-dir " +
                 (dir_ / "first").string());
  ASSERT_EQ(run.exit_code, 0) << text_of(run);
  const std::string file = (dir_ / "first" / "model.bin").string();
  const fs::path run_dir = dir_ / "from_file";
  run = ntp("train --set model.init_from=" + file + " --set train.steps=1 --set train.global_batch=2 "
            "--set train.micro_batch=2 --run-dir " + run_dir.string());
  ASSERT_EQ(run.exit_code, 0) << text_of(run);
  const std::string model = "model " + file + " (gpt2: 1 layer, 2 heads, hidden 64, vocab 256, ";
  EXPECT_EQ(run.out.rfind("ntp train: " + model, 0), 0u) << run.out;
  std::string job;
  for (const auto& e : read_lines(run_dir / "events.jsonl")) {
    if (e["event"] == "run_started") job = e["job"];
  }
  EXPECT_EQ(job.rfind(model, 0), 0u) << job;
  EXPECT_EQ(job.find("tiny"), std::string::npos) << job;
  std::ifstream summary(run_dir / "summary.json");
  EXPECT_EQ(nlohmann::json::parse(summary)["job"], job);
  std::ifstream report(run_dir / "report.html");
  EXPECT_NE(std::string(std::istreambuf_iterator<char>(report), {}).find(model), std::string::npos);
}

TEST_F(TrainCliTest, RunStartedCountsTheRealRanks) {
  const fs::path run_dir = dir_ / "r";
  const auto run = ntp("train " + kSmall + "--set train.steps=2 --set parallel.tp=2 --set parallel.dp=2 "
                       "--set train.global_batch=4 --run-dir " + run_dir.string());
  ASSERT_EQ(run.exit_code, 0) << text_of(run);
  for (const auto& e : read_lines(run_dir / "events.jsonl")) {
    if (e["event"] == "run_started") {
      EXPECT_EQ(e["ranks"], 4) << e;
    }
  }
  // One numbering: the progress line says step 0 and step 1 like metrics.jsonl.
  EXPECT_NE(run.out.find("step 0 (1 of 2)"), std::string::npos) << run.out;
  EXPECT_NE(run.out.find("step 1 (2 of 2)"), std::string::npos) << run.out;
}

TEST_F(TrainCliTest, SampleReproducesThePatternOfATinyCorpus) {
  std::string corpus;
  while (corpus.size() < 20000) corpus += "abcd";
  std::ofstream(dir_ / "abcd.txt") << corpus;
  const fs::path run_dir = dir_ / "r";
  const auto train = ntp("train --set model.layers=1 --set model.seq_len=16 --set train.steps=60 "
                         "--set train.global_batch=8 --set train.micro_batch=8 --set train.lr=3e-3 "
                         "--set data.path=" + (dir_ / "abcd.txt").string() + " --run-dir " + run_dir.string());
  ASSERT_EQ(train.exit_code, 0) << text_of(train);
  const auto run = ntp("sample " + run_dir.string() + " --prompt abcdab --tokens 30 --temperature 0");
  ASSERT_EQ(run.exit_code, 0) << text_of(run);
  EXPECT_EQ(run.out, "abcdab" + corpus.substr(2, 30) + "\n");
  // The same from the checkpoint itself, with a seed: repeatable.
  const auto a = ntp("sample " + (run_dir / "model.bin").string() + " --prompt ab --tokens 10 --seed 5");
  const auto b = ntp("sample " + (run_dir / "model.bin").string() + " --prompt ab --tokens 10 --seed 5");
  EXPECT_EQ(a.exit_code, 0) << text_of(a);
  EXPECT_EQ(a.out, b.out);
  EXPECT_EQ(ntp("sample " + run_dir.string() + " --prompt ab --temperature -1").exit_code, 2);
  EXPECT_EQ(ntp("sample " + (dir_ / "missing").string() + " --prompt ab").exit_code, 2);
}

TEST_F(TrainCliTest, ValidationPassesSurviveAnInJobRecovery) {
  std::ofstream(dir_ / "val.txt") << std::string(3000, 'v');
  const fs::path run_dir = dir_ / "r";
  const auto run = ntp("train " + kSmall + "--set train.steps=5 --set parallel.dp=2 --set parallel.tp=2 "
                       "--set train.global_batch=4 --set elastic.recover=true --set test.kill_rank=3 "
                       "--set test.kill_at_step=2 --set train.eval_every=1 --set data.val_path=" +
                       (dir_ / "val.txt").string() + " --verify --run-dir " + run_dir.string());
  ASSERT_EQ(run.exit_code, 0) << text_of(run);
  EXPECT_NE(run.out.find("verify: pass — "), std::string::npos) << run.out;
  const auto losses = val_losses(run_dir);
  EXPECT_GE(losses.size(), 4u);  // every step but, at most, the one whose writer row was restored
  EXPECT_TRUE(losses.contains(4));
}

// The SVG documents of a report, in order, and the points of a chart's polylines.
std::vector<std::string> svgs_of(const std::string& html) {
  std::vector<std::string> out;
  for (std::size_t at = 0; (at = html.find("<svg", at)) != std::string::npos;) {
    const std::size_t end = html.find("</svg>", at);
    out.push_back(html.substr(at, end - at));
    at = end;
  }
  return out;
}

std::vector<std::size_t> polyline_points(const std::string& svg) {
  std::vector<std::size_t> counts;
  for (std::size_t at = 0; (at = svg.find("points='", at)) != std::string::npos;) {
    at += 8;
    const std::string points = svg.substr(at, svg.find('\'', at) - at);
    counts.push_back(static_cast<std::size_t>(std::count(points.begin(), points.end(), ',')));
  }
  return counts;
}

std::string read_text(const fs::path& path) {
  std::ifstream in(path);
  return {std::istreambuf_iterator<char>(in), {}};
}

TEST_F(TrainCliTest, TrainWritesAReportWithEveryStepPlotted) {
  std::ofstream(dir_ / "val.txt") << std::string(3000, 'v');
  const fs::path run_dir = dir_ / "r";
  const auto run = ntp("train " + kSmall + "--set train.steps=5 --set parallel.dp=2 --set train.eval_every=2 "
                       "--set data.val_path=" + (dir_ / "val.txt").string() + " --run-dir " + run_dir.string());
  ASSERT_EQ(run.exit_code, 0) << text_of(run);
  EXPECT_NE(run.out.find("report: " + (run_dir / "report.html").string()), std::string::npos) << run.out;
  const std::vector<std::string> svgs = svgs_of(read_text(run_dir / "report.html"));
  ASSERT_EQ(svgs.size(), 4u);
  // Loss: 5 train points, validation after steps 1, 3 and 4.
  EXPECT_EQ(polyline_points(svgs[0]), (std::vector<std::size_t>{5, 3}));
  EXPECT_NE(svgs[0].find("validation loss"), std::string::npos);
  EXPECT_EQ(polyline_points(svgs[1]), (std::vector<std::size_t>{5, 5}));  // tokens/s, step time
  EXPECT_EQ(polyline_points(svgs[2]), (std::vector<std::size_t>{5}));     // exposed sync
  // TP per replica as steps over time: 5 points plus 4 risers each.
  EXPECT_EQ(polyline_points(svgs[3]), (std::vector<std::size_t>{9, 9}));
  EXPECT_NE(svgs[3].find("replica 1"), std::string::npos);
  // `ntp report` writes the same file again; a folder with no run is refused.
  const auto again = ntp("report " + run_dir.string());
  EXPECT_EQ(again.exit_code, 0) << text_of(again);
  fs::create_directories(dir_ / "empty");
  EXPECT_EQ(ntp("report " + (dir_ / "empty").string()).exit_code, 2);
}

TEST_F(TrainCliTest, TheReportMarksFailuresAndRecoveriesOnTheTimeAxis) {
  const fs::path run_dir = dir_ / "r";
  const auto run = ntp("train " + kSmall + "--set train.steps=5 --set parallel.dp=2 --set parallel.tp=2 "
                       "--set train.global_batch=4 --set elastic.recover=true --set test.kill_rank=3 "
                       "--set test.kill_at_step=2 --run-dir " + run_dir.string());
  ASSERT_EQ(run.exit_code, 0) << text_of(run);
  const std::vector<std::string> svgs = svgs_of(read_text(run_dir / "report.html"));
  ASSERT_EQ(svgs.size(), 4u);
  EXPECT_NE(svgs[3].find(">failure<"), std::string::npos) << svgs[3];
  EXPECT_NE(svgs[3].find(">recovery<"), std::string::npos) << svgs[3];
}

// More kernel threads than the host has cores (model.threads set by hand) is
// named before training; the default (cores / ranks) is not warned about.
TEST_F(TrainCliTest, MoreKernelThreadsThanCoresIsWarnedAbout) {
  const int cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  const auto over = ntp("train " + kSmall + "--set train.steps=1 --set model.threads=" + std::to_string(cores + 1) +
                        " --run-dir " + (dir_ / "over").string());
  ASSERT_EQ(over.exit_code, 0) << text_of(over);
  EXPECT_NE(over.err.find("kernel threads on " + std::to_string(cores) + " cores"), std::string::npos) << over.err;
  const auto fits = ntp("train " + kSmall + "--set train.steps=1 --run-dir " + (dir_ / "fits").string());
  ASSERT_EQ(fits.exit_code, 0) << text_of(fits);
  EXPECT_EQ(fits.err.find("kernel threads on"), std::string::npos) << fits.err;
}

TEST_F(TrainCliTest, LogLevelsComeFromFlagsOrTheEnvironment) {
  const std::string launch = " --run-dir " + (dir_ / "l").string() + " --nproc 1 -- true";
  const auto normal = ntp("launch" + launch);
  ASSERT_EQ(normal.exit_code, 0) << text_of(normal);
  EXPECT_NE(normal.err.find("ntp launch: 1 workers"), std::string::npos) << normal.err;
  EXPECT_EQ(normal.err.find("worker command"), std::string::npos) << normal.err;
  const auto quiet = ntp("launch --quiet" + launch);
  EXPECT_EQ(quiet.exit_code, 0);
  EXPECT_EQ(quiet.err, "");
  const auto verbose = ntp("launch --verbose" + launch);
  EXPECT_NE(verbose.err.find("worker command: true"), std::string::npos) << verbose.err;
  const auto env = ntp_with_env("NTP_LOG_LEVEL=warn", "launch" + launch);
  EXPECT_EQ(env.err, "");
  // Errors still show when quiet; a bad level is refused.
  const auto failed = ntp("launch --quiet --run-dir " + (dir_ / "l").string() + " --nproc 1 --bogus -- true");
  EXPECT_EQ(failed.exit_code, 2);
  EXPECT_NE(failed.err.find("--bogus"), std::string::npos) << failed.err;
  EXPECT_EQ(ntp_with_env("NTP_LOG_LEVEL=loud", "launch" + launch).exit_code, 2);
  EXPECT_EQ(ntp("launch --quiet --verbose" + launch).exit_code, 2);
  // A --quiet after `--` belongs to the worker command.
  const auto worker = ntp("launch --tee --run-dir " + (dir_ / "l").string() + " --nproc 1 -- echo --quiet");
  EXPECT_NE(worker.out.find("[rank 0] --quiet"), std::string::npos) << worker.out;
}

// --verify prints one line a person reads at a glance; the JSON only with
// --json; the full result always lands in RUN_DIR/verify.json. `ntp verify`
// likewise.
TEST_F(TrainCliTest, VerifyPrintsAVerdictLineAndTheJsonOnlyWithJson) {
  const fs::path line_run = dir_ / "line";
  const auto line = ntp("train " + kSmall + "--set train.steps=2 --verify --run-dir " + line_run.string());
  ASSERT_EQ(line.exit_code, 0) << text_of(line);
  // Single-process: no hashes/, so three of the four checks.
  const std::string verdict = "verify: pass — 2 steps, 3 checks (holders not checked), ";
  const std::size_t at = line.out.rfind("\nverify: ");
  ASSERT_NE(at, std::string::npos) << line.out;
  EXPECT_EQ(line.out.substr(at + 1, verdict.size()), verdict) << line.out;
  EXPECT_EQ(line.out.back(), '\n');
  EXPECT_EQ(line.out.find('\n', at + 1), line.out.size() - 1) << "the verdict is the last line: " << line.out;
  EXPECT_EQ(line.out.find("{\""), std::string::npos) << "no JSON without --json: " << line.out;
  const nlohmann::json file = nlohmann::json::parse(std::ifstream(line_run / "verify.json"));
  EXPECT_EQ(file["verify"], "pass");
  EXPECT_EQ(file["steps"], 2);
  EXPECT_TRUE(file.contains("tensors")) << "the file has the detail";

  const fs::path json_run = dir_ / "json";
  const auto json = ntp("train " + kSmall + "--set train.steps=2 --verify --json --run-dir " + json_run.string());
  ASSERT_EQ(json.exit_code, 0) << text_of(json);
  const std::size_t last = json.out.rfind('\n', json.out.size() - 2);
  const nlohmann::json printed = nlohmann::json::parse(json.out.substr(last + 1));
  EXPECT_EQ(printed["verify"], "pass");
  EXPECT_EQ(printed["steps"], 2);
  EXPECT_EQ(json.out.find("verify: pass"), std::string::npos) << json.out;
  EXPECT_TRUE(fs::exists(json_run / "verify.json"));

  // `ntp verify`: the same line, alone; the detailed JSON with --json.
  fs::remove(line_run / "verify.json");
  const auto again = ntp("verify " + line_run.string());
  EXPECT_EQ(again.exit_code, 0) << text_of(again);
  EXPECT_EQ(again.out.rfind(verdict, 0), 0u) << again.out;
  EXPECT_EQ(again.out.find('\n'), again.out.size() - 1) << again.out;
  EXPECT_TRUE(fs::exists(line_run / "verify.json"));
  const auto again_json = ntp("verify " + line_run.string() + " --json");
  EXPECT_EQ(again_json.exit_code, 0) << text_of(again_json);
  EXPECT_EQ(nlohmann::json::parse(again_json.out)["tensors"].size(), file["tensors"].size());

  // --json is about the verdict: without --verify it is refused.
  const auto alone = ntp("train " + kSmall + "--set train.steps=1 --json --run-dir " + (dir_ / "alone").string());
  EXPECT_EQ(alone.exit_code, 2) << text_of(alone);
  EXPECT_NE(alone.err.find("--verify"), std::string::npos) << alone.err;
  EXPECT_FALSE(fs::exists(dir_ / "alone"));
}

}  // namespace
