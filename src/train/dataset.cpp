#include "train/dataset.h"

#include <algorithm>
#include <cstdint>
#include <fstream>
#include <vector>

#include <fmt/format.h>

#include "train/run_dir.h"

namespace ntp::train {
namespace {

constexpr const char* kLicenseDir = "/usr/share/common-licenses";

bool has_token_magic(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::int32_t magic = 0;
  in.read(reinterpret_cast<char*>(&magic), sizeof magic);
  return in && magic == model::kTokenFileMagic;
}

}  // namespace

std::filesystem::path builtin_corpus(const std::filesystem::path& run_dir) {
  const std::filesystem::path out = run_dir / "corpus.txt";
  if (std::filesystem::exists(out)) return out;
  std::vector<std::filesystem::path> files;
  if (std::filesystem::is_directory(kLicenseDir)) {
    for (const auto& entry : std::filesystem::directory_iterator(kLicenseDir)) {
      if (entry.is_regular_file()) files.push_back(entry.path());
    }
  }
  if (files.empty()) {
    throw ConfigError(fmt::format(
        "data.path: empty, and the built-in corpus ({}) is missing; set data.path", kLicenseDir));
  }
  std::sort(files.begin(), files.end());
  std::string text;
  for (const auto& file : files) {
    std::ifstream in(file, std::ios::binary);
    text.append(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
    text += "\n";
  }
  write_file_atomic(out, text);
  return out;
}

model::TokenData open_dataset(const DataConfig& data, const std::filesystem::path& run_dir) {
  const std::string path = data.path.empty() ? builtin_corpus(run_dir).string() : data.path;
  try {
    return has_token_magic(path) ? model::TokenData::read_token_file(path)
                                 : model::TokenData::read_text_bytes(path);
  } catch (const std::runtime_error& e) {
    throw ConfigError(fmt::format("data.path: {}", e.what()));
  }
}

}  // namespace ntp::train
