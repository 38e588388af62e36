// `ntp bench`: benchmarks that validate a machine or cluster.
//   ntp bench comm  - collectives over the comm layer (nccl-tests style)
// More subcommands can be added next to `comm` below. Formats: docs/comm.md.
#include <CLI/CLI.hpp>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include <unistd.h>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "cli/command.h"
#include "cli/path_args.h"
#include "comm/bench.h"
#include "comm/child_process.h"
#include "comm/group.h"
#include "comm/local_ranks.h"

namespace ntp::cli {
namespace {

namespace cm = ntp::comm;

struct CommArgs {
  int nproc = 2;
  std::string store = "file";
  std::string min_bytes = "1K";
  std::string max_bytes = "64M";
  std::string ops = "all_reduce";
  int iters = 0;
  int warmup = 2;
  long timeout_ms = 30000;
  std::string run_id;
  bool check_inputs = false;
  std::string hostname = "127.0.0.1";
  std::string interface;
  std::string json;
  int deadline_s = 1800;
};

std::vector<std::string> split_ops(const std::string& text) {
  if (text == "all") return cm::bench_ops();
  std::vector<std::string> ops;
  std::size_t begin = 0;
  while (begin <= text.size()) {
    const std::size_t end = std::min(text.find(',', begin), text.size());
    ops.push_back(text.substr(begin, end - begin));
    begin = end + 1;
  }
  return ops;
}

void write_json(const std::string& path, const std::vector<cm::CommBenchRow>& rows, int world) {
  std::ofstream out(path);
  if (!out) throw std::runtime_error("--json: cannot write " + path);
  for (const auto& r : rows) {
    out << nlohmann::json{{"op", r.op},           {"ranks", world},           {"bytes", r.bytes},
                          {"count", r.count},     {"iters", r.iters},         {"time_us", r.time_us},
                          {"algbw_gbps", r.algbw_gbps}, {"busbw_gbps", r.busbw_gbps}, {"wrong", r.wrong}}
                .dump()
        << "\n";
  }
}

// The benchmark options of the flags; bad values fail here, before any rank starts.
cm::CommBenchOptions bench_options(const CommArgs& a) {
  cm::CommBenchOptions opts;
  opts.ops = split_ops(a.ops);
  opts.min_bytes = cm::parse_bytes(a.min_bytes, "--min-bytes");
  opts.max_bytes = cm::parse_bytes(a.max_bytes, "--max-bytes");
  opts.iters = a.iters;
  opts.warmup = a.warmup;
  cm::validate(opts);
  return opts;
}

// An unwritable --json is bad input found before any rank runs, not after
// the whole benchmark.
void check_json_path(const std::string& path) {
  if (path.empty()) return;
  if (!std::ofstream(path))
    throw cm::CommError({cm::CommErrorKind::kBadInput, "", 0, -1, -1, "--json", "cannot write " + path});
}

// One rank (started by --nproc below or by an external launcher).
int run_rank(const CommArgs& a, int rank, int world) {
  if (a.store == "file") {
    throw cm::CommError({cm::CommErrorKind::kBadInput, "", 0, rank, -1, "bench",
                         "--store file needs a directory shared by the ranks (file:/path) under a launcher"});
  }
  const char* env_run_id = std::getenv("NTP_RUN_ID");
  const std::string run_id = !a.run_id.empty() ? a.run_id : (env_run_id != nullptr ? env_run_id : "bench");
  const cm::CommBenchOptions opts = bench_options(a);
  if (rank == 0) check_json_path(a.json);
  cm::GroupOptions g;
  for (int r = 0; r < world; ++r) g.ranks.push_back(r);
  g.global_rank = rank;
  g.world_size = world;
  g.epoch = 0;
  g.name = "bench/" + run_id;
  g.timeout = std::chrono::milliseconds(a.timeout_ms);
  g.check_inputs = a.check_inputs;
  g.hostname = a.hostname;
  g.interface = a.interface;
  auto group = cm::create_group(cm::open_store(a.store), g);
  const auto rows = cm::run_comm_bench(*group, opts);
  std::int64_t wrong = 0;
  for (const auto& r : rows) wrong += r.wrong;
  if (rank == 0) {
    const std::string title = "ntp bench comm: " + std::to_string(world) + " ranks, gloo/tcp, float32, store " +
                              a.store + (a.check_inputs ? ", call checks on" : "");
    std::fputs(cm::format_bench_table(rows, title).c_str(), stdout);
    std::fflush(stdout);
    if (!a.json.empty()) write_json(a.json, rows, world);
  }
  return wrong == 0 ? kExitOk : kExitFailure;
}

// --nproc N: this process starts N ranks of itself and waits for them.
int run_local(const CommArgs& a) {
  bench_options(a);
  check_json_path(a.json);
  std::string store = a.store;
  std::filesystem::path temp_dir;
  if (store == "file") {
    temp_dir = std::filesystem::temp_directory_path() / ("ntp-bench-comm-" + std::to_string(::getpid()));
    std::filesystem::create_directories(temp_dir);
    store = "file:" + temp_dir.string();
  }
  cm::open_store(store);  // an unreachable store fails here, before any rank starts
  const std::string run_id = a.run_id.empty() ? "p" + std::to_string(::getpid()) + "-" +
                                                    std::to_string(std::chrono::system_clock::now().time_since_epoch().count())
                                              : a.run_id;
  std::vector<std::string> argv = {cm::self_executable(), "bench", "comm", "--store", store,
                                   "--min-bytes", a.min_bytes, "--max-bytes", a.max_bytes, "--op", a.ops,
                                   "--iters", std::to_string(a.iters), "--warmup", std::to_string(a.warmup),
                                   "--timeout-ms", std::to_string(a.timeout_ms), "--run-id", run_id,
                                   "--hostname", a.hostname};
  if (a.check_inputs) argv.push_back("--check-inputs");
  if (!a.interface.empty()) argv.insert(argv.end(), {"--interface", a.interface});
  if (!a.json.empty()) argv.insert(argv.end(), {"--json", a.json});
  const auto result = cm::run_local_ranks(argv, a.nproc, {}, std::chrono::seconds(a.deadline_s));
  if (!temp_dir.empty()) std::filesystem::remove_all(temp_dir);
  if (!result.ok) {
    std::string ranks;
    for (std::size_t r = 0; r < result.outcome.size(); ++r) ranks += fmt::format(" [{}] {}", r, result.outcome[r]);
    spdlog::error("ntp bench comm: ranks did not all succeed:{}", ranks);
    return kExitFailure;
  }
  return kExitOk;
}

int run_comm(const CommArgs& a) {
  try {
    int rank = -1;
    int world = 0;
    if (cm::launcher_rank(rank, world)) return run_rank(a, rank, world);
    return run_local(a);
  } catch (const cm::CommError& e) {
    spdlog::error("ntp bench comm: {}", e.what());
    return e.kind() == cm::CommErrorKind::kBadInput ? kExitBadInput : kExitFailure;
  }
}

int run_bench(int argc, char** argv) {
  CLI::App app{"Benchmarks that validate a machine or cluster."};
  app.require_subcommand(1);
  CommArgs a;
  auto* comm = app.add_subcommand("comm", "Collectives over the comm layer: time, algbw, busbw, wrong results");
  comm->add_option("--nproc", a.nproc, "Local ranks to start (ignored when RANK/WORLD_SIZE are set)")
      ->check(CLI::Range(1, 1024));
  comm->add_option("--store", a.store, "file (temporary directory), file:/dir, /dir or redis://host:port[/ns]");
  comm->add_option("--min-bytes", a.min_bytes, "Smallest buffer per rank (e.g. 1K)");
  comm->add_option("--max-bytes", a.max_bytes, "Largest buffer per rank (e.g. 64M); sizes double");
  comm->add_option("--op", a.ops, "all_reduce, all_gather, reduce_scatter, all_to_all, broadcast, a comma list, or all");
  comm->add_option("--iters", a.iters, "Timed calls per size (0: automatic)")->check(CLI::Range(0, 1000000));
  comm->add_option("--warmup", a.warmup, "Untimed calls per size")->check(CLI::Range(0, 1000));
  comm->add_option("--timeout-ms", a.timeout_ms, "Deadline of every collective")->check(CLI::Range(1L, 3600000L));
  comm->add_option("--run-id", a.run_id, "Names the group in the store (default: unique per --nproc run)");
  comm->add_flag("--check-inputs", a.check_inputs, "Exchange call descriptors before each call (as in training)");
  comm->add_option("--hostname", a.hostname, "Address this rank binds and publishes (multi-host)");
  comm->add_option("--interface", a.interface, "Network interface to bind instead of --hostname");
  comm->add_option("--json", a.json, "Also write one JSON object per row to this file (rank 0)")
      ->check(ntp::cli::output_file());
  comm->add_option("--deadline-s", a.deadline_s, "With --nproc: kill the ranks after this long")->check(CLI::Range(1, 86400));
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    const int code = app.exit(e);
    return code == 0 ? kExitOk : kExitBadInput;
  }
  if (comm->parsed()) return run_comm(a);
  return kExitBadInput;
}

}  // namespace

NTP_REGISTER_COMMAND("bench", "benchmarks: `ntp bench comm` validates collectives (time, busbw, wrong results)",
                     run_bench);

}  // namespace ntp::cli
