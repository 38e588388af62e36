#pragma once
// The training data of a run (data.path): an llm.c / nanoGPT token file when
// the file starts with the token-file magic, otherwise the file's bytes as
// text (vocabulary 256). With data.path empty, the built-in demo corpus: the
// license texts every Debian system ships in /usr/share/common-licenses,
// concatenated in name order and written to the run directory as corpus.txt.
#include <filesystem>
#include <string>

#include "model/token_data.h"
#include "train/config.h"

namespace ntp::train {

// Path of the built-in corpus, written into `run_dir` on first use.
std::filesystem::path builtin_corpus(const std::filesystem::path& run_dir);

// Reads the data of a run; `run_dir` hosts the built-in corpus. Throws
// ConfigError naming data.path when the file cannot be read.
model::TokenData open_dataset(const DataConfig& data, const std::filesystem::path& run_dir);

}  // namespace ntp::train
