#include "model/token_data.h"

#include <algorithm>
#include <stdexcept>

#include "model/binary_file.h"

namespace ntp::model {

TokenData TokenData::read_token_file(const std::string& path) {
  BinaryReader in(path);
  const std::vector<std::int32_t> h = in.header("token file");
  if (h[0] != kTokenFileMagic)
    fail_file(path, "header[0] magic",
              "is " + std::to_string(h[0]) + ", expected " + std::to_string(kTokenFileMagic));
  if (h[1] != kTokenFileVersion)
    fail_file(path, "header[1] version", "is " + std::to_string(h[1]) + ", expected 1");
  if (h[2] < 2) fail_file(path, "header[2] count", "is " + std::to_string(h[2]) + ", need >= 2");
  const auto count = static_cast<std::uint64_t>(h[2]);
  if (kHeaderInts * 4 + count * 2 != in.size())
    fail_file(path, "header[2] count",
              std::to_string(count) + " tokens need " + std::to_string(kHeaderInts * 4 + count * 2) +
                  " bytes, file has " + std::to_string(in.size()) +
                  (kHeaderInts * 4 + count * 2 > in.size() ? " (truncated)" : ""));
  TokenData data;
  data.path_ = path;
  data.tokens_.resize(count);
  in.read(data.tokens_.data(), count, "tokens");
  return data;
}

TokenData TokenData::read_text_bytes(const std::string& path) {
  BinaryReader in(path);
  if (in.size() < 2) fail_file(path, "text", "needs at least 2 bytes");
  std::vector<unsigned char> bytes(in.size());
  in.read(bytes.data(), bytes.size(), "text");
  TokenData data;
  data.path_ = path;
  data.tokens_.assign(bytes.begin(), bytes.end());
  return data;
}

TokenData TokenData::read_raw_uint16(const std::string& path) {
  BinaryReader in(path);
  if (in.size() % 2 != 0) fail_file(path, "tokens", "odd byte count for uint16 tokens");
  if (in.size() < 4) fail_file(path, "tokens", "needs at least 2 tokens");
  TokenData data;
  data.path_ = path;
  data.tokens_.resize(in.size() / 2);
  in.read(data.tokens_.data(), data.tokens_.size(), "tokens");
  return data;
}

void TokenData::write_token_file(const std::string& path, std::span<const std::uint16_t> tokens) {
  std::vector<std::int32_t> header(kHeaderInts, 0);
  header[0] = kTokenFileMagic;
  header[1] = kTokenFileVersion;
  header[2] = static_cast<std::int32_t>(tokens.size());
  BinaryWriter out(path);
  out.write(header.data(), header.size() * 4);
  out.write(tokens.data(), tokens.size() * 2);
  out.close();
}

std::int32_t TokenData::max_token() const {
  return tokens_.empty() ? -1 : *std::max_element(tokens_.begin(), tokens_.end());
}

namespace {
void require_positive(const std::string& path, std::int64_t value, const char* what) {
  if (value <= 0)
    throw std::invalid_argument(path + ": " + what + " " + std::to_string(value) + " must be > 0");
}
}  // namespace

std::int64_t TokenData::sequential_batches(std::int64_t batch, std::int64_t seq) const {
  require_positive(path_, batch, "batch");
  require_positive(path_, seq, "sequence length");
  return (size() - 1) / (batch * seq);
}

void TokenData::sequential_batch(std::int64_t index, std::int64_t batch, std::int64_t seq,
                                 std::int32_t* inputs, std::int32_t* targets) const {
  if (index < 0 || index >= sequential_batches(batch, seq))
    throw std::out_of_range(path_ + ": batch " + std::to_string(index) + " of " +
                            std::to_string(batch) + "x" + std::to_string(seq) +
                            " tokens is past the end (" + std::to_string(size()) + " tokens)");
  window(index * batch * seq, batch * seq, inputs, targets);
}

std::int64_t TokenData::samples(std::int64_t seq) const {
  require_positive(path_, seq, "sequence length");
  return (size() - 1) / seq;
}

void TokenData::sample(std::int64_t id, std::int64_t seq, std::int32_t* inputs,
                       std::int32_t* targets) const {
  if (id < 0 || id >= samples(seq))
    throw std::out_of_range(path_ + ": sample " + std::to_string(id) + " of length " +
                            std::to_string(seq) + " is past the end (" + std::to_string(size()) +
                            " tokens)");
  window(id * seq, seq, inputs, targets);
}

void TokenData::window(std::int64_t start, std::int64_t count, std::int32_t* inputs,
                       std::int32_t* targets) const {
  for (std::int64_t i = 0; i < count; ++i) {
    inputs[i] = tokens_[static_cast<std::size_t>(start + i)];
    targets[i] = tokens_[static_cast<std::size_t>(start + i + 1)];
  }
}

}  // namespace ntp::model
