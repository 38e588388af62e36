#pragma once
// The training data of a run (data.path) in data.format: llm.c token files,
// nanoGPT raw uint16 files or text (bytes, vocabulary 256); "auto" tells them
// apart by magic, extension and size (model::detect_token_format). With data.path empty, the built-in demo corpus: the
// license texts every Debian system ships in /usr/share/common-licenses,
// concatenated in name order and written to the run directory as corpus.txt.
#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "model/token_data.h"
#include "train/config.h"

namespace ntp::train {

// Path of the built-in corpus, written into `run_dir` on first use.
std::filesystem::path builtin_corpus(const std::filesystem::path& run_dir);

// Reads the data of a run; `run_dir` hosts the built-in corpus. Throws
// ConfigError naming data.path when the file cannot be read.
model::TokenData open_dataset(const DataConfig& data, const std::filesystem::path& run_dir);

// The validation tokens (data.val_path, read like data.path); none if unset.
std::optional<model::TokenData> open_val_dataset(const DataConfig& data);

// What a run trains on: the file as configured (empty: the built-in corpus),
// its token count and a checksum of the token values (model::checksum_bytes
// over them as uint32). The job records it when it starts (RUN/data.json) and
// in each checkpoint. Every worker checks the tokens it reads against the
// record: a file rewritten while the run trains, or another copy of it on
// another host, would otherwise give that rank other samples than the rest of
// the job, silently.
struct DataIdentity {
  std::string path;
  std::int64_t tokens = 0;
  std::uint64_t checksum = 0;

  bool same_tokens(const DataIdentity& other) const {
    return tokens == other.tokens && checksum == other.checksum;
  }
  std::string describe() const;  // "N tokens, checksum 0123456789abcdef"
  std::string file() const { return path.empty() ? "the built-in corpus" : path; }  // for messages
  nlohmann::json to_json() const;
  // Throws std::exception (nlohmann's or std::invalid_argument) when malformed.
  static DataIdentity from_json(const nlohmann::json& j);
};

DataIdentity identity_of(const model::TokenData& data, const std::string& configured_path);

// The data of a job: data.path's and data.val_path's (if set).
struct JobData {
  DataIdentity train;
  std::optional<DataIdentity> val;
};

// RUN/data.json, written atomically by the job's launcher before any worker
// starts.
void record_job_data(const std::filesystem::path& run_dir, const JobData& data);

// The identities of the data a rank read (val: data.val_path's, if set).
JobData job_data_of(const DataConfig& config, const model::TokenData& data,
                    const std::optional<model::TokenData>& val);

// Throws ConfigError naming data.path (data.val_path) and RUN/data.json when
// the data a rank read differs from what the job recorded; nothing to check
// without a record (a run directory of an older build). The first form checks
// data.path's tokens alone.
void check_job_data(const std::filesystem::path& run_dir, const DataIdentity& train);
void check_job_data(const std::filesystem::path& run_dir, const JobData& now);

}  // namespace ntp::train
