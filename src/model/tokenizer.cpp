#include "model/tokenizer.h"

#include <stdexcept>

#include "model/binary_file.h"

namespace ntp::model {

Tokenizer Tokenizer::read(const std::string& path) {
  BinaryReader in(path);
  const std::vector<std::int32_t> h = in.header("tokenizer header");
  if (h[0] != kTokenizerMagic)
    fail_file(path, "header[0] magic", "is " + std::to_string(h[0]) + ", expected " + std::to_string(kTokenizerMagic));
  if (h[1] != 1 && h[1] != 2) fail_file(path, "header[1] version", "is " + std::to_string(h[1]) + ", expected 1 or 2");
  if (h[2] < 1) fail_file(path, "header[2] vocab", "is " + std::to_string(h[2]) + ", need >= 1");
  Tokenizer t;
  t.pieces_.resize(static_cast<std::size_t>(h[2]));
  for (std::string& piece : t.pieces_) {
    std::uint8_t length = 0;
    in.read(&length, 1, "token length");
    piece.resize(length);
    in.read(piece.data(), length, "token bytes");
  }
  return t;
}

std::string Tokenizer::decode(std::span<const std::int32_t> ids) const {
  std::string text;
  for (std::int32_t id : ids) {
    if (id < 0 || id >= size())
      throw std::out_of_range("token " + std::to_string(id) + " is outside the tokenizer's " +
                              std::to_string(size()) + " tokens");
    text += pieces_[static_cast<std::size_t>(id)];
  }
  return text;
}

}  // namespace ntp::model
