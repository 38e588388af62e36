#include "comm/local_ranks.h"

#include <cstdlib>
#include <memory>

#include <sys/wait.h>

#include "comm/child_process.h"
#include "comm/error.h"

namespace ntp::comm {

LocalRanksResult run_local_ranks(const std::vector<std::string>& argv, int nproc,
                                 const std::vector<std::string>& extra_env, std::chrono::seconds deadline,
                                 std::chrono::seconds grace_after_failure) {
  if (nproc < 1) throw_bad_input("launch", "--nproc must be at least 1, got " + std::to_string(nproc));
  std::vector<std::unique_ptr<ChildProcess>> children;
  for (int r = 0; r < nproc; ++r) {
    std::vector<std::string> env = extra_env;
    env.push_back("RANK=" + std::to_string(r));
    env.push_back("LOCAL_RANK=" + std::to_string(r));
    env.push_back("WORLD_SIZE=" + std::to_string(nproc));
    children.push_back(std::make_unique<ChildProcess>(argv, env));
  }
  using clock = std::chrono::steady_clock;
  auto stop_at = clock::now() + deadline;
  LocalRanksResult result;
  result.outcome.assign(static_cast<std::size_t>(nproc), "running");
  int running = nproc;
  bool failed = false;
  while (running > 0 && clock::now() < stop_at) {
    for (int r = 0; r < nproc; ++r) {
      auto& child = children[static_cast<std::size_t>(r)];
      if (child->exited()) continue;
      if (auto status = child->wait_for(std::chrono::milliseconds(20))) {
        --running;
        result.outcome[static_cast<std::size_t>(r)] = describe_wait_status(*status);
        if (!(WIFEXITED(*status) && WEXITSTATUS(*status) == 0) && !failed) {
          failed = true;  // the others should fail by their deadlines; don't wait forever
          stop_at = std::min(stop_at, clock::now() + grace_after_failure);
        }
      }
    }
  }
  for (int r = 0; r < nproc; ++r) {
    if (!children[static_cast<std::size_t>(r)]->exited()) result.outcome[static_cast<std::size_t>(r)] = "killed at deadline";
  }
  children.clear();  // kills and reaps what is left
  result.ok = true;
  for (const auto& o : result.outcome) result.ok = result.ok && o == "exit 0";
  return result;
}

namespace {

int env_int(const char* name) {
  const char* text = std::getenv(name);
  try {
    std::size_t used = 0;
    const int value = std::stoi(text, &used);
    if (used == std::string(text).size()) return value;
  } catch (const std::exception&) {
  }
  throw_bad_input("launch", std::string(name) + "='" + text + "' is not an integer");
}

}  // namespace

bool launcher_rank(int& rank, int& world_size) {
  const bool has_rank = std::getenv("RANK") != nullptr;
  const bool has_world = std::getenv("WORLD_SIZE") != nullptr;
  if (!has_rank && !has_world) return false;
  if (!has_rank || !has_world) throw_bad_input("launch", "RANK and WORLD_SIZE must be set together");
  rank = env_int("RANK");
  world_size = env_int("WORLD_SIZE");
  if (world_size < 1) throw_bad_input("launch", "WORLD_SIZE=" + std::to_string(world_size) + " must be at least 1");
  if (rank < 0 || rank >= world_size) {
    throw_bad_input("launch", "RANK=" + std::to_string(rank) + " is outside the world of WORLD_SIZE=" +
                                  std::to_string(world_size) + " ranks");
  }
  return true;
}

}  // namespace ntp::comm
