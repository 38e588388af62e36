#include "train/dataset.h"

#include <algorithm>
#include <cstdint>
#include <fstream>
#include <optional>
#include <vector>

#include <fmt/format.h>

#include "train/run_dir.h"

namespace ntp::train {
namespace {

constexpr const char* kLicenseDir = "/usr/share/common-licenses";

model::TokenFormat token_format(DataFormat format) {
  switch (format) {
    case DataFormat::kLlmc: return model::TokenFormat::kLlmc;
    case DataFormat::kNanogpt: return model::TokenFormat::kNanogpt;
    case DataFormat::kText: return model::TokenFormat::kText;
    case DataFormat::kAuto: break;
  }
  return model::TokenFormat::kAuto;
}

model::TokenData read_tokens(const std::string& path, DataFormat format, const char* key) {
  try {
    return model::TokenData::read(path, token_format(format));
  } catch (const std::runtime_error& e) {
    throw ConfigError(fmt::format("{}: {}", key, e.what()));
  }
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
  return read_tokens(path, data.format, "data.path");
}

std::optional<model::TokenData> open_val_dataset(const DataConfig& data) {
  if (data.val_path.empty()) return std::nullopt;
  return read_tokens(data.val_path, data.format, "data.val_path");
}

}  // namespace ntp::train
