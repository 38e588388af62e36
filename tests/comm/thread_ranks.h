#pragma once
// Test harness: runs `size` ranks as threads of this process, each with its
// own Gloo group over loopback TCP and a shared file store.
#include <filesystem>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include <unistd.h>

#include "comm/group.h"
#include "comm/store.h"

namespace ntp::comm::testing {

// A fresh store directory under /tmp, removed at destruction.
class TempStoreDir {
 public:
  TempStoreDir() {
    static int counter = 0;
    path_ = std::filesystem::temp_directory_path() /
            ("ntp-comm-test-" + std::to_string(::getpid()) + "-" + std::to_string(counter++));
    std::filesystem::remove_all(path_);
    std::filesystem::create_directories(path_);
  }
  ~TempStoreDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  std::string spec() const { return "file:" + path_.string(); }
  std::string path() const { return path_.string(); }

 private:
  std::filesystem::path path_;
};

inline GroupOptions group_options(int size, int rank, const std::string& name, std::uint64_t epoch = 1,
                                  std::chrono::milliseconds timeout = std::chrono::milliseconds(10000)) {
  GroupOptions opts;
  for (int r = 0; r < size; ++r) opts.ranks.push_back(r);
  opts.global_rank = rank;
  opts.epoch = epoch;
  opts.name = name;
  opts.timeout = timeout;
  return opts;
}

// Runs body(rank) on `size` threads; returns each rank's exception (or null).
inline std::vector<std::exception_ptr> run_threads(int size, const std::function<void(int)>& body) {
  std::vector<std::exception_ptr> errors(static_cast<std::size_t>(size));
  std::vector<std::thread> threads;
  for (int r = 0; r < size; ++r) {
    threads.emplace_back([&, r] {
      try {
        body(r);
      } catch (...) {
        errors[static_cast<std::size_t>(r)] = std::current_exception();
      }
    });
  }
  for (auto& t : threads) t.join();
  return errors;
}

// Rethrows the first rank's error, so a failing rank fails the test with its message.
inline void rethrow_first(const std::vector<std::exception_ptr>& errors) {
  for (const auto& e : errors) {
    if (e) std::rethrow_exception(e);
  }
}

// Creates a group of `size` thread ranks and runs body(group) on each.
inline void run_group(int size, const std::string& name, const std::function<void(Group&)>& body,
                      std::shared_ptr<Store> store = nullptr) {
  TempStoreDir dir;
  if (!store) store = open_store(dir.spec());
  rethrow_first(run_threads(size, [&](int rank) {
    auto group = create_group(store, group_options(size, rank, name));
    body(*group);
  }));
}

}  // namespace ntp::comm::testing
