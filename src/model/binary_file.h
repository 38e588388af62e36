#pragma once
// Reading and writing the little-endian binary files of llm.c: a 256 x int32
// header followed by a payload. Errors name the file and the field.
#include <cstdint>
#include <fstream>
#include <string>
#include <vector>

namespace ntp::model {

constexpr std::size_t kHeaderInts = 256;

// FNV-1a (64 bit) over the bytes taken as little-endian 64-bit words (a
// shorter tail byte by byte): one multiply per 8 bytes. The checksum of
// checkpoint parts and of a run's training tokens.
std::uint64_t checksum_bytes(std::uint64_t h, const void* data, std::size_t bytes);
inline constexpr std::uint64_t kChecksumBasis = 1469598103934665603ull;

class BinaryReader {
 public:
  explicit BinaryReader(std::string path);  // throws if the file cannot be opened
  const std::string& path() const { return path_; }
  std::uint64_t size() const { return size_; }
  // Reads the header; throws naming `what` if the file is shorter than it.
  std::vector<std::int32_t> header(const char* what);
  // Reads `count` items of T; throws naming `field` if the file ends first.
  template <typename T>
  void read(T* out, std::size_t count, const std::string& field);
  // Throws naming `what` if bytes remain after the payload.
  void expect_end(const char* what);

 private:
  void read_bytes(void* out, std::uint64_t bytes, const std::string& field);
  std::string path_;
  std::ifstream in_;
  std::uint64_t size_ = 0;
  std::uint64_t pos_ = 0;
};

template <typename T>
void BinaryReader::read(T* out, std::size_t count, const std::string& field) {
  read_bytes(out, count * sizeof(T), field);
}

// Writes a file atomically: the bytes go to "<path>.tmp.<pid>", close()
// fsyncs it and renames it over `path`, so a reader (or a run killed while
// writing, or a full disk) never sees a truncated file under the final name.
// A writer destroyed without close() removes its temporary file.
class BinaryWriter {
 public:
  explicit BinaryWriter(std::string path);
  ~BinaryWriter();
  BinaryWriter(const BinaryWriter&) = delete;
  BinaryWriter& operator=(const BinaryWriter&) = delete;
  void write(const void* data, std::uint64_t bytes);
  void close();  // fsync + rename; throws naming the file and the reason on an I/O error

 private:
  std::string path_;
  std::string temp_;
  int fd_ = -1;
};

// "<path>: <field>: <why>"
[[noreturn]] void fail_file(const std::string& path, const std::string& field,
                            const std::string& why);

}  // namespace ntp::model
