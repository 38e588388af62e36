#pragma once
// llm.c's GPT-2 tokenizer file (gpt2_tokenizer.bin), for decoding token ids
// to text: a 256 x int32 header {20240328, version 1 or 2, vocab, eot (v2)},
// then per token one uint8 length and that many bytes.
#include <cstdint>
#include <span>
#include <string>
#include <vector>

namespace ntp::model {

constexpr std::int32_t kTokenizerMagic = 20240328;

class Tokenizer {
 public:
  // Throws std::runtime_error "<path>: <field>: <why>".
  static Tokenizer read(const std::string& path);
  std::int64_t size() const { return static_cast<std::int64_t>(pieces_.size()); }
  // The text of `ids`; throws std::out_of_range naming an id outside the vocabulary.
  std::string decode(std::span<const std::int32_t> ids) const;

 private:
  std::vector<std::string> pieces_;
};

}  // namespace ntp::model
