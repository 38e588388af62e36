#pragma once
// The training data of a run (data.path) in data.format: llm.c token files,
// nanoGPT raw uint16 files or text (bytes, vocabulary 256); "auto" tells them
// apart by magic, extension and size (model::detect_token_format). With data.path empty, the built-in demo corpus: the
// license texts every Debian system ships in /usr/share/common-licenses,
// concatenated in name order and written to the run directory as corpus.txt.
#include <filesystem>
#include <optional>
#include <string>

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

}  // namespace ntp::train
