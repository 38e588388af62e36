#pragma once
// A fresh directory per test, under the system's temp directory and named by
// the suite's prefix, the process and the test, so that suites running at
// once never share files. Removed first if a crashed run left it behind.
#include <unistd.h>

#include <filesystem>
#include <string>

#include <gtest/gtest.h>

namespace ntp::test {

inline std::filesystem::path fresh_test_dir(const std::string& prefix) {
  const std::filesystem::path dir =
      std::filesystem::temp_directory_path() /
      (prefix + "_" + std::to_string(::getpid()) + "_" +
       ::testing::UnitTest::GetInstance()->current_test_info()->name());
  std::filesystem::remove_all(dir);
  return dir;
}

}  // namespace ntp::test
