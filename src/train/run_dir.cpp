#include "train/run_dir.h"

#include "train/config.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <ctime>
#include <fstream>
#include <sstream>
#include <stdexcept>

#include <fmt/format.h>

namespace ntp::train {
namespace {

[[noreturn]] void io_error(const std::filesystem::path& path, const char* what) {
  throw std::runtime_error(fmt::format("{}: {}: {}", path.string(), what, std::strerror(errno)));
}

}  // namespace

JsonlWriter::JsonlWriter(const std::filesystem::path& path) : path_(path) {
  fd_ = ::open(path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  if (fd_ < 0) io_error(path, "cannot open for appending");
}

JsonlWriter::~JsonlWriter() {
  if (fd_ >= 0) ::close(fd_);
}

void JsonlWriter::append(const nlohmann::json& object) {
  const std::string line = object.dump() + "\n";
  struct stat before {};
  const bool sized = ::fstat(fd_, &before) == 0;
  // One write() per line: O_APPEND makes it land whole at the end of the file.
  const ssize_t written = ::write(fd_, line.data(), line.size());
  if (written == static_cast<ssize_t>(line.size())) return;
  if (written <= 0) io_error(path_, "cannot append");
  // A short write (a full disk, a file size limit): the rest fails with the
  // reason. The torn line is taken back when nobody appended since, or the
  // next line would be glued to it and the file would no longer parse.
  const std::size_t left = line.size() - static_cast<std::size_t>(written);
  const ssize_t rest = ::write(fd_, line.data() + written, left);
  if (rest == static_cast<ssize_t>(left)) return;  // there was room after all
  const int reason = rest < 0 ? errno : EIO;
  struct stat after {};
  if (sized && ::fstat(fd_, &after) == 0 && after.st_size == before.st_size + written + std::max<ssize_t>(rest, 0)) {
    if (::ftruncate(fd_, before.st_size) != 0) {}  // best effort: the error below is the news
  }
  errno = reason;
  io_error(path_, "cannot append a whole line (the partial line was taken back)");
}

std::vector<nlohmann::json> JsonlTail::read_new() {
  std::vector<nlohmann::json> out;
  std::ifstream in(path_, std::ios::binary);
  if (!in) return out;  // not created yet
  in.seekg(static_cast<std::streamoff>(offset_));
  std::string line;
  while (std::getline(in, line)) {
    if (in.eof()) break;  // no newline yet: a line still being written
    offset_ += line.size() + 1;
    if (!line.empty()) out.push_back(nlohmann::json::parse(line));
  }
  return out;
}

double unix_time_s() {
  using namespace std::chrono;
  return duration<double>(system_clock::now().time_since_epoch()).count();
}

std::filesystem::path create_new_run_dir(const std::filesystem::path& parent) {
  const auto now = std::chrono::system_clock::now();
  const std::time_t seconds = std::chrono::system_clock::to_time_t(now);
  const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(now.time_since_epoch()).count() % 1000;
  std::tm utc{};
  gmtime_r(&seconds, &utc);
  char stamp[32];
  std::strftime(stamp, sizeof stamp, "%Y%m%d-%H%M%S", &utc);
  const std::string base = fmt::format("{}.{:03}", stamp, ms);
  std::error_code error;
  std::filesystem::create_directories(parent, error);
  if (error) throw std::runtime_error(fmt::format("{}: cannot create: {}", parent.string(), error.message()));
  for (int n = 1;; ++n) {
    const std::filesystem::path path = parent / (n == 1 ? base : fmt::format("{}-{}", base, n));
    if (::mkdir(path.c_str(), 0755) == 0) return path;
    if (errno != EEXIST) io_error(path, "cannot create");
  }
}

RunDir RunDir::create(const std::filesystem::path& path) {
  if (std::filesystem::exists(path) && !std::filesystem::is_directory(path)) {
    throw ConfigError(fmt::format("{}: is not a folder (a run directory is one)", path.string()));
  }
  const auto taken = [&path](const char* name) {
    return ConfigError(
        fmt::format("{}: already holds a run ({} exists); choose another --run-dir", path.string(), name));
  };
  if (std::filesystem::exists(path / "metrics.jsonl")) throw taken("metrics.jsonl");
  std::error_code error;
  std::filesystem::create_directories(path / "logs", error);
  if (error) {
    throw std::runtime_error(fmt::format("{}: cannot create: {}", path.string(), error.message()));
  }
  // The claim: O_EXCL lets exactly one of several concurrent runs create it.
  const int fd = ::open((path / "events.jsonl").c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  if (fd < 0 && errno == EEXIST) throw taken("events.jsonl");
  if (fd < 0) io_error(path / "events.jsonl", "cannot create");
  ::close(fd);
  return RunDir(path);
}

RunLock::RunLock(const std::filesystem::path& run_dir) {
  const std::filesystem::path path = run_dir / "run.lock";
  fd_ = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (fd_ < 0) io_error(path, "cannot open");
  if (::flock(fd_, LOCK_EX | LOCK_NB) != 0) {
    const int reason = errno;
    std::string holder(256, '\0');
    const ssize_t n = ::pread(fd_, holder.data(), holder.size(), 0);
    holder.resize(n > 0 ? static_cast<std::size_t>(n) : 0);
    while (!holder.empty() && (holder.back() == '\n' || holder.back() == '\0')) holder.pop_back();
    ::close(fd_);
    if (reason != EWOULDBLOCK) {
      errno = reason;
      io_error(path, "cannot lock");
    }
    throw RunDirBusy(fmt::format("{}: another ntp train ({}) is running a job in this run directory; wait for it "
                                  "to end, or stop it (Ctrl-C), before training in it again",
                                 run_dir.string(), holder.empty() ? "holder unknown" : holder));
  }
  char host[256] = {};
  ::gethostname(host, sizeof host - 1);
  const std::string holder = fmt::format("pid {} on {}\n", ::getpid(), host);
  // Who holds it, for the message above; the lock itself is the flock.
  if (::ftruncate(fd_, 0) != 0 || ::pwrite(fd_, holder.data(), holder.size(), 0) < 0) {}  // best effort
}

RunLock::~RunLock() {
  if (fd_ >= 0) ::close(fd_);  // drops the flock
}

RunDir RunDir::open(const std::filesystem::path& path) {
  if (!std::filesystem::is_directory(path)) {
    throw std::runtime_error(fmt::format("{}: not a run directory", path.string()));
  }
  return RunDir(path);
}

void RunDir::write_config(const std::string& toml) const {
  write_file_atomic(file("config.toml"), toml);
}

void RunDir::event(const std::string& name, nlohmann::json fields) const {
  nlohmann::json line = {{"time", unix_time_s()}, {"event", name}};
  line.update(fields);
  JsonlWriter(file("events.jsonl")).append(line);
}

void RunDir::append_metrics(const StepMetrics& m) const {
  JsonlWriter(file("metrics.jsonl")).append(to_json(m));
}

void RunDir::append_schedule(std::int64_t step, std::int64_t epoch,
                             const std::vector<std::vector<std::int64_t>>& samples) const {
  JsonlWriter(file("schedule.jsonl"))
      .append({{"step", step}, {"epoch", epoch}, {"samples", samples}});
}

void RunDir::write_summary(const nlohmann::json& summary) const {
  write_file_atomic(file("summary.json"), summary.dump(2) + "\n");
}

std::vector<StepMetrics> RunDir::read_metrics() const {
  std::vector<StepMetrics> out;
  for (const nlohmann::json& line : read_jsonl(file("metrics.jsonl"))) {
    out.push_back(step_metrics_from_json(line));
  }
  return out;
}

std::vector<nlohmann::json> RunDir::read_events() const { return read_jsonl(file("events.jsonl")); }

std::vector<nlohmann::json> read_jsonl(const std::filesystem::path& path) {
  std::ifstream in(path);
  if (!in) throw std::runtime_error(fmt::format("{}: cannot open", path.string()));
  std::vector<nlohmann::json> out;
  std::string line;
  for (int number = 1; std::getline(in, line); ++number) {
    if (line.empty()) continue;
    try {
      out.push_back(nlohmann::json::parse(line));
    } catch (const nlohmann::json::parse_error& e) {
      throw std::runtime_error(fmt::format("{}:{}: {}", path.string(), number, e.what()));
    }
  }
  return out;
}

void write_file_atomic(const std::filesystem::path& path, const std::string& text) {
  const std::filesystem::path temp = path.string() + fmt::format(".tmp{}", ::getpid());
  const int fd = ::open(temp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) io_error(temp, "cannot write");
  std::size_t done = 0;
  while (done < text.size()) {
    const ssize_t n = ::write(fd, text.data() + done, text.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      const int saved = errno;
      ::close(fd);
      ::unlink(temp.c_str());
      errno = saved;
      io_error(temp, "cannot write");
    }
    done += static_cast<std::size_t>(n);
  }
  if (::fsync(fd) != 0 || ::close(fd) != 0) {
    const int saved = errno;
    ::unlink(temp.c_str());
    errno = saved;
    io_error(temp, "cannot write");
  }
  if (::rename(temp.c_str(), path.c_str()) != 0) {
    const int saved = errno;
    ::unlink(temp.c_str());
    errno = saved;
    io_error(path, "cannot rename into place");
  }
}

std::vector<nlohmann::json> RunDir::truncate_jsonl_from_step(const std::string& name, std::int64_t step) const {
  const std::filesystem::path path = file(name);
  std::vector<nlohmann::json> kept;
  std::ifstream in(path);
  if (!in) return kept;
  std::string text;
  bool dropped = false;
  for (std::string line; std::getline(in, line);) {
    if (in.eof()) {  // no newline: a line cut short by a death while writing
      dropped = true;
      break;
    }
    if (line.empty()) continue;
    nlohmann::json row;
    try {
      row = nlohmann::json::parse(line);
    } catch (const nlohmann::json::parse_error&) {
      dropped = true;
      continue;
    }
    if (row.value("step", std::int64_t{-1}) >= step) {
      dropped = true;
      continue;
    }
    text += line + "\n";
    kept.push_back(std::move(row));
  }
  if (dropped) write_file_atomic(path, text);
  return kept;
}

}  // namespace ntp::train
