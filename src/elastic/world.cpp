#include "elastic/world.h"

#include <sstream>
#include <stdexcept>

#include <fmt/format.h>

extern char** environ;

namespace ntp::elastic {
namespace {

int parse_int(const std::string& name, const std::string& text) {
  try {
    std::size_t used = 0;
    const int value = std::stoi(text, &used);
    if (used == text.size() && value >= 0) return value;
  } catch (const std::exception&) {
  }
  throw std::invalid_argument(fmt::format("{}='{}' is not a non-negative integer", name, text));
}

const std::string* find(const Environment& env, const std::string& name) {
  const auto it = env.find(name);
  return it == env.end() ? nullptr : &it->second;
}

int get_int(const Environment& env, const std::string& name, int fallback) {
  const std::string* text = find(env, name);
  return text == nullptr ? fallback : parse_int(name, *text);
}

void check(bool ok, const std::string& what) {
  if (!ok) throw std::invalid_argument(what);
}

WorldInfo from_torchrun(const Environment& env) {
  WorldInfo w;
  w.source = "ntp launch";
  w.rank = get_int(env, "RANK", 0);
  w.world_size = get_int(env, "WORLD_SIZE", 1);
  w.local_rank = get_int(env, "LOCAL_RANK", w.rank);
  w.local_world_size = get_int(env, "LOCAL_WORLD_SIZE", w.world_size);
  w.node_rank = get_int(env, "GROUP_RANK", 0);
  check(w.local_world_size >= 1, "LOCAL_WORLD_SIZE must be >= 1");
  // Hosts may hold different numbers of ranks (a replica without a slot):
  // the launcher says how many there are.
  w.num_nodes = get_int(env, "GROUP_WORLD_SIZE", (w.world_size + w.local_world_size - 1) / w.local_world_size);
  return w;
}

WorldInfo from_slurm(const Environment& env) {
  WorldInfo w;
  w.source = "slurm";
  w.rank = get_int(env, "SLURM_PROCID", 0);
  w.world_size = get_int(env, "SLURM_NTASKS", 1);
  w.local_rank = get_int(env, "SLURM_LOCALID", 0);
  w.node_rank = get_int(env, "SLURM_NODEID", 0);
  w.num_nodes = get_int(env, "SLURM_NNODES", 1);
  if (const std::string* per_node = find(env, "SLURM_TASKS_PER_NODE")) {
    const std::vector<int> counts = parse_slurm_tasks_per_node(*per_node);
    check(w.node_rank < static_cast<int>(counts.size()),
          fmt::format("SLURM_NODEID={} but SLURM_TASKS_PER_NODE='{}' lists {} nodes", w.node_rank,
                      *per_node, counts.size()));
    w.local_world_size = counts[static_cast<std::size_t>(w.node_rank)];
  } else {
    w.local_world_size = get_int(env, "SLURM_NTASKS_PER_NODE", w.world_size / w.num_nodes);
  }
  return w;
}

}  // namespace

std::vector<int> parse_slurm_tasks_per_node(const std::string& text) {
  std::vector<int> counts;
  std::size_t pos = 0;
  while (pos < text.size()) {
    std::size_t end = text.find(',', pos);
    if (end == std::string::npos) end = text.size();
    const std::string item = text.substr(pos, end - pos);
    const std::size_t paren = item.find("(x");
    int count = 0;
    int repeat = 1;
    if (paren == std::string::npos) {
      count = parse_int("SLURM_TASKS_PER_NODE", item);
    } else {
      check(item.back() == ')', fmt::format("SLURM_TASKS_PER_NODE='{}' is malformed", text));
      count = parse_int("SLURM_TASKS_PER_NODE", item.substr(0, paren));
      repeat = parse_int("SLURM_TASKS_PER_NODE", item.substr(paren + 2, item.size() - paren - 3));
    }
    counts.insert(counts.end(), static_cast<std::size_t>(repeat), count);
    pos = end + 1;
  }
  check(!counts.empty(), "SLURM_TASKS_PER_NODE is empty");
  return counts;
}

WorldInfo world_from_env(const Environment& env) {
  WorldInfo w;
  if (find(env, "RANK") != nullptr || find(env, "WORLD_SIZE") != nullptr) {
    w = from_torchrun(env);
  } else if (find(env, "SLURM_PROCID") != nullptr) {
    w = from_slurm(env);
  } else {
    w.source = "single process";
  }
  check(w.world_size >= 1, "WORLD_SIZE must be >= 1");
  check(w.rank < w.world_size,
        fmt::format("rank {} is not below the world size {} ({})", w.rank, w.world_size, w.source));
  check(w.local_rank < w.local_world_size,
        fmt::format("local rank {} is not below the local world size {} ({})", w.local_rank,
                    w.local_world_size, w.source));
  if (const std::string* store = find(env, "NTP_STORE")) w.store = *store;
  if (const std::string* addr = find(env, "MASTER_ADDR")) w.master_addr = *addr;
  w.master_port = get_int(env, "MASTER_PORT", 0);
  return w;
}

Environment current_environment() {
  Environment env;
  for (char** entry = environ; entry != nullptr && *entry != nullptr; ++entry) {
    const std::string text(*entry);
    const std::size_t eq = text.find('=');
    if (eq != std::string::npos) env[text.substr(0, eq)] = text.substr(eq + 1);
  }
  return env;
}

std::string gpu_of_local_rank(const Environment& env, int local_rank) {
  const auto visible = env.find("CUDA_VISIBLE_DEVICES");
  if (visible == env.end() || visible->second.empty()) return std::to_string(local_rank);
  std::vector<std::string> entries;
  std::stringstream list(visible->second);
  for (std::string entry; std::getline(list, entry, ',');) entries.push_back(entry);
  if (local_rank < 0 || local_rank >= static_cast<int>(entries.size())) {
    throw std::invalid_argument(fmt::format("local rank {} has no GPU in CUDA_VISIBLE_DEVICES = {}",
                                            local_rank, visible->second));
  }
  return entries[static_cast<std::size_t>(local_rank)];
}

}  // namespace ntp::elastic
