#include "train/dataset.h"

#include <algorithm>
#include <cstdint>
#include <fstream>
#include <optional>
#include <vector>

#include <fmt/format.h>

#include "model/binary_file.h"
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

std::string DataIdentity::describe() const {
  return fmt::format("{} tokens, checksum {:016x}", tokens, checksum);
}

nlohmann::json DataIdentity::to_json() const {
  return {{"path", path}, {"tokens", tokens}, {"checksum", fmt::format("{:016x}", checksum)}};
}

DataIdentity DataIdentity::from_json(const nlohmann::json& j) {
  DataIdentity d;
  d.path = j.at("path").get<std::string>();
  d.tokens = j.at("tokens").get<std::int64_t>();
  const std::string hex = j.at("checksum").get<std::string>();
  std::size_t used = 0;
  d.checksum = std::stoull(hex, &used, 16);
  if (used != hex.size()) throw std::invalid_argument("checksum: not a hex number: " + hex);
  return d;
}

DataIdentity identity_of(const model::TokenData& data, const std::string& configured_path) {
  const std::span<const std::uint32_t> tokens = data.tokens();
  return {configured_path, data.size(),
          model::checksum_bytes(model::kChecksumBasis, tokens.data(), tokens.size_bytes())};
}

namespace {

std::filesystem::path job_data_file(const std::filesystem::path& run_dir) { return run_dir / "data.json"; }

// What RUN/data.json records; none without the file.
std::optional<JobData> read_job_data(const std::filesystem::path& run_dir) {
  const std::filesystem::path record = job_data_file(run_dir);
  std::ifstream in(record);
  if (!in) return std::nullopt;
  try {
    const nlohmann::json j = nlohmann::json::parse(in);
    JobData data{DataIdentity::from_json(j.at("train")), std::nullopt};
    if (!j.at("val").is_null()) data.val = DataIdentity::from_json(j.at("val"));
    return data;
  } catch (const std::exception& e) {
    throw ConfigError(fmt::format("{}: malformed ({})", record.string(), e.what()));
  }
}

void check_same(const std::filesystem::path& run_dir, const char* key, const DataIdentity& started,
                const DataIdentity& now) {
  if (started.same_tokens(now)) return;
  throw ConfigError(fmt::format(
      "{}: {} holds {}, but this job started on {} ({}): the file changed while the job ran, or this host reads "
      "another copy of it, and this rank would train on other samples than the rest of the job; put back the data "
      "the job started with",
      key, now.file(), now.describe(), started.describe(),
      job_data_file(run_dir).string()));
}

void check_val(const std::filesystem::path& run_dir, const JobData& started, const std::optional<DataIdentity>& now) {
  if (started.val.has_value() != now.has_value()) {
    throw ConfigError(fmt::format("data.val_path: {} on this rank, but this job started {} ({})",
                                  now ? "set" : "unset", started.val ? "with one" : "without one",
                                  job_data_file(run_dir).string()));
  }
  if (now) check_same(run_dir, "data.val_path", *started.val, *now);
}

}  // namespace

void record_job_data(const std::filesystem::path& run_dir, const JobData& data) {
  const nlohmann::json j = {{"train", data.train.to_json()},
                            {"val", data.val ? data.val->to_json() : nlohmann::json(nullptr)}};
  write_file_atomic(job_data_file(run_dir), j.dump(2) + "\n");
}

void check_job_data(const std::filesystem::path& run_dir, const DataIdentity& train) {
  if (const std::optional<JobData> started = read_job_data(run_dir)) {
    check_same(run_dir, "data.path", started->train, train);
  }
}

void check_job_data(const std::filesystem::path& run_dir, const JobData& now) {
  if (const std::optional<JobData> started = read_job_data(run_dir)) {
    check_same(run_dir, "data.path", started->train, now.train);
    check_val(run_dir, *started, now.val);
  }
}

JobData job_data_of(const DataConfig& config, const model::TokenData& data,
                    const std::optional<model::TokenData>& val) {
  JobData out{identity_of(data, config.path), std::nullopt};
  if (val) out.val = identity_of(*val, config.val_path);
  return out;
}

}  // namespace ntp::train
