#include "elastic/launcher.h"

#include <spdlog/spdlog.h>

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <csignal>
#include <cstring>
#include <map>
#include <stdexcept>
#include <thread>

#include <fmt/format.h>

#include "comm/error.h"
#include "comm/job_store.h"
#include "comm/signal_thread.h"
#include "elastic/process_cpu.h"

namespace ntp::elastic {
namespace {

using Clock = std::chrono::steady_clock;

volatile std::sig_atomic_t g_received_signal = 0;

void remember_signal(int sig) { g_received_signal = sig; }

constexpr int kForwardedSignals[] = {SIGINT, SIGTERM, SIGHUP};

// Installs the forwarding handlers for the lifetime of one launch.
class SignalCatcher {
 public:
  SignalCatcher() {
    g_received_signal = 0;
    struct sigaction action {};
    action.sa_handler = remember_signal;
    sigemptyset(&action.sa_mask);
    for (std::size_t i = 0; i < std::size(kForwardedSignals); ++i) {
      sigaction(kForwardedSignals[i], &action, &previous_[i]);
    }
  }
  ~SignalCatcher() {
    for (std::size_t i = 0; i < std::size(kForwardedSignals); ++i) {
      sigaction(kForwardedSignals[i], &previous_[i], nullptr);
    }
  }
  SignalCatcher(const SignalCatcher&) = delete;
  SignalCatcher& operator=(const SignalCatcher&) = delete;

 private:
  struct sigaction previous_[std::size(kForwardedSignals)] {};
};

// A free TCP port on this host for MASTER_PORT (torchrun-style programs).
int pick_free_port() {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return 0;
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof addr;
  int port = 0;
  if (::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0 &&
      ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) == 0) {
    port = ntohs(addr.sin_port);
  }
  ::close(fd);
  return port;
}

// "redis://host:port[/ns]" -> {host, port}; anything else -> {"127.0.0.1", 0}.
std::pair<std::string, int> master_of(const std::string& store) {
  const std::string scheme = "redis://";
  if (!store.starts_with(scheme)) return {"127.0.0.1", 0};
  std::string rest = store.substr(scheme.size());
  rest = rest.substr(0, rest.find('/'));
  const std::size_t colon = rest.rfind(':');
  if (colon == std::string::npos) return {rest, 6379};
  return {rest.substr(0, colon), std::stoi(rest.substr(colon + 1))};
}

// Everything a child needs, prepared before fork(): after fork only
// async-signal-safe calls are made.
struct SpawnPlan {
  std::vector<std::string> args;
  std::vector<std::string> env;
  std::string log_path;
  bool append_log = false;
};

pid_t spawn(const SpawnPlan& plan) {
  std::vector<char*> argv;
  for (const std::string& arg : plan.args) argv.push_back(const_cast<char*>(arg.c_str()));
  argv.push_back(nullptr);
  std::vector<char*> envp;
  for (const std::string& entry : plan.env) envp.push_back(const_cast<char*>(entry.c_str()));
  envp.push_back(nullptr);
  // A close-on-exec pipe tells the parent whether exec succeeded: it closes
  // unread on success, and carries errno on failure.
  int report[2];
  if (::pipe2(report, O_CLOEXEC) != 0) throw std::runtime_error(fmt::format("pipe failed: {}", std::strerror(errno)));
  const pid_t parent = ::getpid();
  const pid_t pid = ::fork();
  if (pid < 0) {
    ::close(report[0]);
    ::close(report[1]);
    throw std::runtime_error(fmt::format("fork failed: {}", std::strerror(errno)));
  }
  if (pid == 0) {
    ::close(report[0]);
    ::setpgid(0, 0);
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (::getppid() != parent) ::_exit(126);  // the launcher is already gone
    for (int sig : kForwardedSignals) ::signal(sig, SIG_DFL);
    comm::unblock_signals_in_child();
    if (!plan.log_path.empty()) {
      const int fd = ::open(plan.log_path.c_str(), O_WRONLY | O_CREAT | (plan.append_log ? O_APPEND : O_TRUNC), 0644);
      if (fd >= 0) {
        ::dup2(fd, STDOUT_FILENO);
        ::dup2(fd, STDERR_FILENO);
        ::close(fd);
      }
    }
    ::execvpe(argv[0], argv.data(), envp.data());
    const int error = errno;
    (void)!::write(report[1], &error, sizeof error);
    ::_exit(127);
  }
  ::close(report[1]);
  ::setpgid(pid, pid);  // also from the parent, so that signalling the group never races
  int error = 0;
  ssize_t got = 0;
  do {
    got = ::read(report[0], &error, sizeof error);
  } while (got < 0 && errno == EINTR);
  ::close(report[0]);
  if (got == static_cast<ssize_t>(sizeof error)) {
    ::waitpid(pid, nullptr, 0);
    std::string command;
    for (const std::string& arg : plan.args) command += (command.empty() ? "" : " ") + arg;
    throw ExecError(fmt::format("cannot execute the worker command `{}`: {}", command, std::strerror(error)));
  }
  return pid;
}

std::string signal_name(int sig) {
  const char* text = ::strsignal(sig);
  return text != nullptr ? text : "unknown signal";
}

// A worker still running kill_wait after a SIGKILL is stuck in the kernel and
// may never die: the launcher stops waiting for it. One the caller killed (a
// fenced rank) counts as lost like one that died of it; one the launcher
// killed, as stopped by the launcher.
void leave_behind(RankExit& r, bool killed_by_launcher) {
  r.running = false;
  r.unkillable = true;
  r.stopped_by_launcher = killed_by_launcher;
}

class Supervisor {
 public:
  using Spawn = std::function<pid_t(int local_rank, bool restart)>;
  Supervisor(const LaunchOptions& options, LaunchResult& result, Spawn spawn)
      : options_(options), result_(result), spawn_(std::move(spawn)) {}

  void run() {
    auto last_tick = Clock::now();
    while (any_running()) {
      forward_received_signal();
      reap();
      restart();
      escalate();
      leave_unkillable_behind();
      if (options_.on_tick && Clock::now() - last_tick > std::chrono::milliseconds(100)) {
        options_.on_tick();
        last_tick = Clock::now();
      }
      std::this_thread::sleep_for(kReapInterval);
    }
    if (options_.on_tick) options_.on_tick();
  }

 private:
  bool any_running() const {
    for (const RankExit& r : result_.ranks) {
      if (r.running) return true;
    }
    return false;
  }

  void signal_all(int sig) {
    for (RankExit& r : result_.ranks) {
      if (!r.running) continue;
      r.signalled |= std::uint64_t{1} << sig;
      ::kill(-r.pid, sig);
    }
  }

  void stop_all(int sig) {
    signal_all(sig);
    // A stopped worker takes no signal but SIGKILL until it runs again: it is
    // continued (as init systems do) instead of holding the job for the
    // whole grace.
    for (RankExit& r : result_.ranks) {
      const std::optional<ProcessSample> sample = r.running ? sample_process(r.pid) : std::nullopt;
      if (!sample || sample->state != 'T') continue;
      r.found_stopped = true;
      ::kill(-r.pid, SIGCONT);
    }
    if (kill_at_ == kNever) kill_at_ = Clock::now() + options_.term_grace;
  }

  void forward_received_signal() {
    const int sig = g_received_signal;
    if (sig == 0 || result_.forwarded_signal != 0) return;
    result_.forwarded_signal = sig;
    stop_all(sig);
  }

  void reap() {
    for (RankExit& r : result_.ranks) {
      if (!r.running) continue;
      int status = 0;
      const pid_t done = ::waitpid(r.pid, &status, WNOHANG);
      if (done != r.pid) continue;
      r.running = false;
      r.runtime_s = std::chrono::duration<double>(Clock::now() - started_).count();
      if (WIFEXITED(status)) {
        r.exited = true;
        r.code = WEXITSTATUS(status);
        if (const auto meaning = options_.tolerated_exits.find(r.code); meaning != options_.tolerated_exits.end()) {
          r.tolerated_exit = true;
          r.exit_meaning = meaning->second;
        }
      } else if (WIFSIGNALED(status)) {
        r.signal = WTERMSIG(status);
      }
      r.stopped_by_launcher = r.exited ? r.signalled != 0 : ((r.signalled >> r.signal) & 1) != 0;
      // The first failure the launcher did not cause starts the straggler clock.
      // Tolerating failures (in-job recovery), a death by a signal is left to
      // the survivors, but a worker that exits with an error ends the job: the
      // others get straggler_timeout to finish the same way.
      const bool tolerated = options_.tolerate_failures && (!r.exited || r.tolerated_exit);
      if (!r.ok() && !r.stopped_by_launcher && !result_.first_failure && !tolerated) {
        result_.first_failure = r.rank;
        term_at_ = Clock::now() + options_.straggler_timeout;
      }
      if (options_.on_event) options_.on_event("worker_exited", r);
    }
  }

  // Starts again the ranks the caller asks for, unless the job is stopping.
  void restart() {
    if (!options_.restarts || result_.forwarded_signal != 0 || term_at_ != kNever) return;
    for (int local : options_.restarts()) {
      RankExit& r = result_.ranks.at(static_cast<std::size_t>(local));
      if (r.running) continue;
      result_.restarted.push_back(r);
      RankExit fresh;
      fresh.rank = r.rank;
      fresh.pid = spawn_(local, true);
      r = fresh;
      if (options_.on_event) options_.on_event("worker_started", r);
    }
  }

  void escalate() {
    const auto now = Clock::now();
    if (now >= term_at_) {
      term_at_ = kNever;
      stop_all(SIGTERM);
    }
    if (now >= kill_at_) {
      kill_at_ = kNever;
      signal_all(options_.kill_signal);
      killed_at_ = now;
    }
  }

  // A worker still there kill_wait after a SIGKILL, the launcher's or the
  // caller's, is left behind.
  void leave_unkillable_behind() {
    const auto now = Clock::now();
    for (RankExit& r : result_.ranks) {
      if (!r.running) continue;
      Clock::time_point since = killed_at_;
      if (options_.killed && options_.killed(r.pid)) {
        since = std::min(since, caller_killed_at_.try_emplace(r.pid, now).first->second);
      }
      if (since == kNever || now - since < options_.kill_wait) continue;
      leave_behind(r, since == killed_at_);
      r.runtime_s = std::chrono::duration<double>(now - started_).count();
      if (options_.on_event) options_.on_event("worker_unkillable", r);
    }
  }

  const LaunchOptions& options_;
  LaunchResult& result_;
  Spawn spawn_;
  Clock::time_point started_ = Clock::now();
  static constexpr Clock::time_point kNever = Clock::time_point::max();
  Clock::time_point term_at_ = kNever;  // straggler deadline: then SIGTERM
  Clock::time_point kill_at_ = kNever;  // end of the grace: then SIGKILL
  Clock::time_point killed_at_ = kNever;  // the launcher's SIGKILL to every worker left
  std::map<pid_t, Clock::time_point> caller_killed_at_;  // first seen killed by the caller
};

// Cleans up after a failed start, or a launcher loop that threw (its store
// lost, say): every running worker's process group is killed and reaped, so
// no worker, nor anything it started, outlives the error. All are killed
// before any is reaped: one dead early would read to the others as a failure
// to recover from.
void kill_started(LaunchResult& result, const LaunchOptions& options) {
  for (const RankExit& r : result.ranks) {
    if (r.running) ::kill(-r.pid, options.kill_signal);
  }
  const auto give_up = Clock::now() + options.kill_wait;
  for (;;) {
    bool left = false;
    for (RankExit& r : result.ranks) {
      if (r.running && ::waitpid(r.pid, nullptr, WNOHANG) == r.pid) r.running = false;
      left = left || r.running;
    }
    if (!left) return;
    if (Clock::now() >= give_up) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  for (RankExit& r : result.ranks) {
    if (!r.running) continue;
    leave_behind(r, true);
    spdlog::error("ntp: {}", r.describe());
  }
}

}  // namespace

std::string RankExit::describe() const {
  std::string text = fmt::format("rank {} (pid {}) ", rank, pid);
  if (running) {
    text += "is running";
  } else if (unkillable) {
    return text + "did not die after SIGKILL: stuck in the kernel (uninterruptible sleep: a hung device driver or "
                  "file system?); left behind";
  } else if (exited) {
    text += fmt::format("exited with code {}", code);
    if (!exit_meaning.empty()) text += " (" + exit_meaning + ")";
  } else {
    text += fmt::format("was killed by signal {} ({})", signal, signal_name(signal));
  }
  if (stopped_by_launcher) text += ", stopped by the launcher";
  if (found_stopped) text += " (it had been stopped, SIGSTOP, and was continued to take the signal)";
  return text;
}

bool LaunchResult::ok() const {
  for (const RankExit& r : ranks) {
    if (!r.ok()) return false;
  }
  return forwarded_signal == 0;
}

std::string LaunchResult::report() const {
  if (ok()) return "";
  std::string text;
  if (forwarded_signal != 0) {
    text += fmt::format("the launcher received signal {} ({}) and stopped the workers\n",
                        forwarded_signal, signal_name(forwarded_signal));
  }
  for (const RankExit& r : ranks) {
    if (first_failure && r.rank == *first_failure) text += "first failure: " + r.describe() + "\n";
  }
  for (const RankExit& r : ranks) text += r.describe() + "\n";
  return text;
}

Environment worker_env(const LaunchOptions& options, int local_rank, int hardware_threads,
                       const Environment& launcher_env) {
  const auto [addr, redis_port] = master_of(options.store);
  const int port = redis_port != 0 ? redis_port : options.master_port;
  Environment env = options.extra_env;
  env["RANK"] = std::to_string(options.global_rank(local_rank));
  env["WORLD_SIZE"] = std::to_string(options.world());
  env["LOCAL_RANK"] = std::to_string(local_rank);
  env["LOCAL_WORLD_SIZE"] = std::to_string(options.nproc);
  env["GROUP_RANK"] = std::to_string(options.node_rank);
  env["GROUP_WORLD_SIZE"] = std::to_string(options.nnodes);
  env["NTP_STORE"] = options.store;
  env["MASTER_ADDR"] = addr;
  if (port != 0) env["MASTER_PORT"] = std::to_string(port);
  // BLAS and OpenMP pools that each take every core fight over them: give each
  // worker its share unless the user chose.
  const std::string threads = std::to_string(std::max(1, hardware_threads / options.nproc));
  for (const char* name : {"OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS"}) {
    if (!launcher_env.contains(name) && !env.contains(name)) env[name] = threads;
  }
  return env;
}

void apply_slurm_nodes(LaunchOptions& options, const Environment& env, bool nodes_given) {
  // Launchers that srun starts together cannot be told node 0's new job id:
  // Slurm's job id names the job instead.
  if (options.store.starts_with("redis://") && comm::job_of(options.store).empty() && env.contains("SLURM_JOB_ID")) {
    options.store += "?job=slurm-" + env.at("SLURM_JOB_ID");
  }
  if (nodes_given || !env.contains("SLURM_NNODES") || !env.contains("SLURM_NODEID")) return;
  const WorldInfo slurm = world_from_env({{"SLURM_PROCID", "0"},
                                          {"SLURM_NNODES", env.at("SLURM_NNODES")},
                                          {"SLURM_NODEID", env.at("SLURM_NODEID")},
                                          {"SLURM_NTASKS", env.at("SLURM_NNODES")}});
  options.nnodes = slurm.num_nodes;
  options.node_rank = slurm.node_rank;
}

namespace {

// On a shared (Redis) store every key of a job lives under its id: node 0
// claims the job (a new id unless --store names one with ?job=) and prints
// the spec every other node must be given (launch()); another node must name
// a job that exists, or it is refused before any worker starts (validate()).
void check_job(const LaunchOptions& options) {
  if (!options.store.starts_with("redis://") || options.node_rank == 0) return;
  if (comm::job_of(options.store).empty()) {
    throw std::invalid_argument(fmt::format("--store '{}': node {} must name the job node 0 printed ('{}?job=<id>')",
                                            options.store, options.node_rank, options.store));
  }
  try {
    comm::open_store(options.store);
  } catch (const comm::CommError& e) {
    if (e.kind() != comm::CommErrorKind::kBadInput) throw;
    throw std::invalid_argument(fmt::format("--store: {}", e.detail()));
  }
}

void claim_job(LaunchOptions& options) {
  if (!options.store.starts_with("redis://") || options.node_rank != 0 || options.job_started) return;
  options.store = comm::start_job(options.store);
  spdlog::info("ntp launch: job {}; start the other nodes with --store {}", comm::job_of(options.store),
               options.store);
}

}  // namespace

void validate(const LaunchOptions& o) {
  if (o.nproc < 1) throw std::invalid_argument("--nproc must be >= 1");
  if (o.nnodes < 1) throw std::invalid_argument("--nnodes must be >= 1");
  if (o.node_rank < 0 || o.node_rank >= o.nnodes) {
    throw std::invalid_argument(
        fmt::format("--node-rank {} is outside [0, --nnodes = {})", o.node_rank, o.nnodes));
  }
  if (!o.store.starts_with("file:") && !o.store.starts_with("redis://")) {
    throw std::invalid_argument(
        fmt::format("--store '{}': expected file:DIR or redis://host:port", o.store));
  }
  if (o.first_rank >= 0 && o.first_rank + o.nproc > o.world()) {
    throw std::invalid_argument(fmt::format("ranks {}-{} of this host are outside the job's {} ranks", o.first_rank,
                                            o.first_rank + o.nproc - 1, o.world()));
  }
  if (o.command.empty()) throw std::invalid_argument("no worker command given (after --)");
  if (o.straggler_timeout.count() < 0) throw std::invalid_argument("--straggler-timeout must be >= 0 seconds");
  if (o.term_grace.count() < 0) throw std::invalid_argument("--term-grace must be >= 0 seconds");
  check_job(o);
}

LaunchResult launch(const LaunchOptions& options_in) {
  validate(options_in);
  LaunchOptions options = options_in;
  claim_job(options);
  if (options.master_port == 0 && !options.store.starts_with("redis://")) {
    options.master_port = pick_free_port();
  }
  if (!options.log_dir.empty()) std::filesystem::create_directories(options.log_dir);
  const Environment launcher_env = current_environment();
  const int cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));

  SignalCatcher catcher;
  LaunchResult result;
  const auto spawn_rank = [&](int local, bool restart) {
    SpawnPlan plan;
    plan.args = options.command;
    Environment env = launcher_env;
    for (auto& [name, value] : worker_env(options, local, cores, launcher_env)) env[name] = value;
    if (restart) {
      for (const auto& [name, value] : options.restart_env) env[name] = value;
    }
    for (const auto& [name, value] : env) plan.env.push_back(name + "=" + value);
    const int rank = options.global_rank(local);
    if (!options.log_dir.empty()) {
      // A restarted worker appends to its rank's log: the first life stays readable.
      plan.log_path = (options.log_dir / fmt::format("rank-{}.log", rank)).string();
      plan.append_log = restart;
    }
    return spawn(plan);
  };
  Supervisor supervisor(options, result, spawn_rank);
  for (int local = 0; local < options.nproc; ++local) {
    RankExit record;
    record.rank = options.global_rank(local);
    try {
      record.pid = spawn_rank(local, false);
    } catch (...) {
      kill_started(result, options);
      throw;
    }
    result.ranks.push_back(record);
    if (options.on_event) options.on_event("worker_started", result.ranks.back());
  }
  try {
    supervisor.run();
  } catch (...) {
    kill_started(result, options);
    throw;
  }
  return result;
}

}  // namespace ntp::elastic
