#pragma once
// Training tokens: llm.c token files (a 256 x int32 header {20240520,
// version, count, 0...} then `count` tokens: uint16 in version 1, uint32 in
// version 2), nanoGPT's headerless uint16 files, or plain text read as bytes
// (vocabulary 256). Two access orders:
//   sequential: batch i = tokens [i·B·T, (i+1)·B·T + 1), llm.c's order
//   by sample:  sample s = tokens [s·T, (s+1)·T + 1), for a shuffled order
// In both, inputs are the first B·T (or T) tokens and targets the same shifted by one.
#include <cstdint>
#include <span>
#include <string>
#include <vector>

namespace ntp::model {

constexpr std::int32_t kTokenFileMagic = 20240520;
constexpr std::int32_t kTokenFileVersion = 1;    // uint16 tokens (GPT-2)
constexpr std::int32_t kTokenFileVersion32 = 2;  // uint32 tokens (larger vocabularies)

enum class TokenFormat { kAuto, kLlmc, kNanogpt, kText };

// The format of a file read with TokenFormat::kAuto, from its name, size and
// first header ints (up to 3; fewer for a short file):
//   magic 20240520                          -> kLlmc
//   a .bin with an llm.c-shaped header      -> error: wrong magic
//   another .bin of an even size >= 4 bytes -> kNanogpt
//   another .bin                            -> error: matches no token format
//   anything else                           -> kText
// A .bin is never read as text by accident. Throws std::runtime_error naming
// the file. Pure.
TokenFormat detect_token_format(const std::string& path, std::uint64_t size,
                                std::span<const std::int32_t> head);

class TokenData {
 public:
  // `format` kAuto detects it (detect_token_format).
  static TokenData read(const std::string& path, TokenFormat format);
  // Throws std::runtime_error "<path>: <field>: <why>" for a malformed or truncated file.
  static TokenData read_token_file(const std::string& path);
  static TokenData read_text_bytes(const std::string& path);
  // nanoGPT's prepare.py output: raw little-endian uint16 tokens, no header.
  static TokenData read_raw_uint16(const std::string& path);
  static void write_token_file(const std::string& path, std::span<const std::uint16_t> tokens);
  // Version 2 (uint32 tokens).
  static void write_token_file(const std::string& path, std::span<const std::uint32_t> tokens);

  std::span<const std::uint32_t> tokens() const { return tokens_; }
  std::int64_t size() const { return static_cast<std::int64_t>(tokens_.size()); }
  const std::string& path() const { return path_; }
  std::int32_t max_token() const;  // largest id, to check against the model's vocabulary

  // Batch and sequence length must be > 0 (std::invalid_argument naming the file).
  std::int64_t sequential_batches(std::int64_t batch, std::int64_t seq) const;
  // Fills inputs/targets [batch * seq]; throws std::out_of_range past the last batch.
  void sequential_batch(std::int64_t index, std::int64_t batch, std::int64_t seq,
                        std::int32_t* inputs, std::int32_t* targets) const;

  std::int64_t samples(std::int64_t seq) const;
  void sample(std::int64_t id, std::int64_t seq, std::int32_t* inputs,
              std::int32_t* targets) const;

 private:
  void window(std::int64_t start, std::int64_t count, std::int32_t* inputs,
              std::int32_t* targets) const;
  std::string path_;
  std::vector<std::uint32_t> tokens_;
};

}  // namespace ntp::model
