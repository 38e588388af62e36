#include "model/token_data.h"

#include <algorithm>
#include <stdexcept>

#include "model/binary_file.h"

namespace ntp::model {

namespace {

bool ends_with_bin(const std::string& path) { return path.size() >= 4 && path.ends_with(".bin"); }

// An llm.c header in all but the magic: a known version and a count that
// fits the file's size exactly.
bool llmc_shaped(std::uint64_t size, std::span<const std::int32_t> head) {
  if (head.size() < 3 || size < kHeaderInts * 4 || head[2] < 0) return false;
  const auto count = static_cast<std::uint64_t>(head[2]);
  return (head[1] == kTokenFileVersion && kHeaderInts * 4 + count * 2 == size) ||
         (head[1] == kTokenFileVersion32 && kHeaderInts * 4 + count * 4 == size);
}

template <typename T>
std::vector<std::uint32_t> read_widened(BinaryReader& in, std::uint64_t count, const char* field) {
  std::vector<T> narrow(count);
  in.read(narrow.data(), narrow.size(), field);
  return {narrow.begin(), narrow.end()};
}

}  // namespace

TokenFormat detect_token_format(const std::string& path, std::uint64_t size,
                                std::span<const std::int32_t> head) {
  if (!head.empty() && head[0] == kTokenFileMagic) return TokenFormat::kLlmc;
  if (!ends_with_bin(path)) return TokenFormat::kText;
  if (llmc_shaped(size, head))
    fail_file(path, "header[0] magic",
              "is " + std::to_string(head[0]) + ", expected " + std::to_string(kTokenFileMagic) +
                  " (an llm.c token file header with a wrong magic)");
  if (size % 2 == 0 && size >= 4) return TokenFormat::kNanogpt;
  fail_file(path, "format",
            "a .bin that is no token file: not llm.c (magic " +
                (head.empty() ? std::string("missing") : std::to_string(head[0])) +
                ", expected " + std::to_string(kTokenFileMagic) + "), not nanoGPT raw uint16 (" +
                std::to_string(size) + " bytes); set data.format to read it otherwise");
}

TokenData TokenData::read(const std::string& path, TokenFormat format) {
  if (format == TokenFormat::kAuto) {
    BinaryReader in(path);
    std::int32_t head[3] = {0, 0, 0};
    const std::size_t ints = static_cast<std::size_t>(std::min<std::uint64_t>(in.size() / 4, 3));
    in.read(head, ints, "header");
    format = detect_token_format(path, in.size(), {head, ints});
  }
  switch (format) {
    case TokenFormat::kLlmc: return read_token_file(path);
    case TokenFormat::kNanogpt: return read_raw_uint16(path);
    case TokenFormat::kText:
    case TokenFormat::kAuto: break;
  }
  return read_text_bytes(path);
}

TokenData TokenData::read_token_file(const std::string& path) {
  BinaryReader in(path);
  const std::vector<std::int32_t> h = in.header("token file");
  if (h[0] != kTokenFileMagic)
    fail_file(path, "header[0] magic",
              "is " + std::to_string(h[0]) + ", expected " + std::to_string(kTokenFileMagic));
  if (h[1] != kTokenFileVersion && h[1] != kTokenFileVersion32)
    fail_file(path, "header[1] version", "is " + std::to_string(h[1]) + ", expected 1 or 2");
  if (h[2] < 2) fail_file(path, "header[2] count", "is " + std::to_string(h[2]) + ", need >= 2");
  const auto count = static_cast<std::uint64_t>(h[2]);
  const std::uint64_t width = h[1] == kTokenFileVersion ? 2 : 4;
  const std::uint64_t need = kHeaderInts * 4 + count * width;
  if (need != in.size())
    fail_file(path, "header[2] count",
              std::to_string(count) + " tokens need " + std::to_string(need) + " bytes, file has " +
                  std::to_string(in.size()) + (need > in.size() ? " (truncated)" : ""));
  TokenData data;
  data.path_ = path;
  data.tokens_ = width == 2 ? read_widened<std::uint16_t>(in, count, "tokens")
                            : read_widened<std::uint32_t>(in, count, "tokens");
  const auto too_big = std::find_if(data.tokens_.begin(), data.tokens_.end(),
                                    [](std::uint32_t t) { return t > 0x7fffffffu; });
  if (too_big != data.tokens_.end())
    fail_file(path, "tokens", "token " + std::to_string(*too_big) + " exceeds 2^31 - 1");
  return data;
}

TokenData TokenData::read_text_bytes(const std::string& path) {
  BinaryReader in(path);
  if (in.size() < 2) fail_file(path, "text", "needs at least 2 bytes");
  TokenData data;
  data.path_ = path;
  data.tokens_ = read_widened<unsigned char>(in, in.size(), "text");
  return data;
}

TokenData TokenData::read_raw_uint16(const std::string& path) {
  BinaryReader in(path);
  if (in.size() % 2 != 0) fail_file(path, "tokens", "odd byte count for uint16 tokens");
  if (in.size() < 4) fail_file(path, "tokens", "needs at least 2 tokens");
  TokenData data;
  data.path_ = path;
  data.tokens_ = read_widened<std::uint16_t>(in, in.size() / 2, "tokens");
  return data;
}

namespace {

template <typename T>
void write_llmc(const std::string& path, std::int32_t version, std::span<const T> tokens) {
  std::vector<std::int32_t> header(kHeaderInts, 0);
  header[0] = kTokenFileMagic;
  header[1] = version;
  header[2] = static_cast<std::int32_t>(tokens.size());
  BinaryWriter out(path);
  out.write(header.data(), header.size() * 4);
  out.write(tokens.data(), tokens.size() * sizeof(T));
  out.close();
}

}  // namespace

void TokenData::write_token_file(const std::string& path, std::span<const std::uint16_t> tokens) {
  write_llmc(path, kTokenFileVersion, tokens);
}

void TokenData::write_token_file(const std::string& path, std::span<const std::uint32_t> tokens) {
  write_llmc(path, kTokenFileVersion32, tokens);
}

std::int32_t TokenData::max_token() const {
  return tokens_.empty() ? -1 : static_cast<std::int32_t>(*std::max_element(tokens_.begin(), tokens_.end()));
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
    inputs[i] = static_cast<std::int32_t>(tokens_[static_cast<std::size_t>(start + i)]);
    targets[i] = static_cast<std::int32_t>(tokens_[static_cast<std::size_t>(start + i + 1)]);
  }
}

}  // namespace ntp::model
