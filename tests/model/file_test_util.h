#pragma once
// Shared by the checkpoint-file tests (llm.c, llama2.c): whole-file reads and
// writes, and the check that a malformed file is refused naming the file and
// the field at fault.
#include <gtest/gtest.h>

#include <fstream>
#include <iterator>
#include <stdexcept>
#include <string>
#include <vector>

namespace ntp::model::testing {

inline std::vector<char> read_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), {}};
}

inline void write_bytes(const std::string& path, const std::vector<char>& bytes) {
  std::ofstream(path, std::ios::binary).write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

// Expects read(path) to fail with a message naming the file and `field`.
template <typename Read>
void expect_file_rejected(Read read, const std::string& path, const std::string& field) {
  try {
    read(path);
    ADD_FAILURE() << "accepted a bad file; expected an error about " << field;
  } catch (const std::runtime_error& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find(path), std::string::npos) << what;
    EXPECT_NE(what.find(field), std::string::npos) << what;
  }
}

}  // namespace ntp::model::testing
