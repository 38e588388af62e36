#pragma once
// Reading and writing the little-endian binary files of llm.c: a 256 x int32
// header followed by a payload. Errors name the file and the field.
#include <cstdint>
#include <deque>
#include <fstream>
#include <utility>
#include <string>
#include <vector>

namespace ntp::model {

constexpr std::size_t kHeaderInts = 256;

// FNV-1a (64 bit) over the bytes taken as little-endian 64-bit words (a
// shorter tail byte by byte): one multiply per 8 bytes. The checksum of
// checkpoint parts and of a run's training tokens.
std::uint64_t checksum_bytes(std::uint64_t h, const void* data, std::size_t bytes);
inline constexpr std::uint64_t kChecksumBasis = 1469598103934665603ull;

// checksum_bytes of a stream given in pieces of any length: the same value
// as over their concatenation (a partial word waits for the next piece).
class Checksum {
 public:
  void add(const void* data, std::size_t bytes);
  std::uint64_t value() const;

 private:
  std::uint64_t words_ = kChecksumBasis;  // over the whole words so far
  std::uint8_t tail_[8] = {};             // the bytes after them (< 8)
  std::size_t tail_bytes_ = 0;
};

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
//
// At the disk's speed: the bytes go out in 16 MiB pieces, each one's
// writeback started as soon as it is written and, four pieces later, waited
// for and dropped from the page cache (sync_file_range, POSIX_FADV_DONTNEED).
// The disk always has the next pieces queued, and the file never holds more
// than 64 MiB of the page cache, whose pages the next pieces reuse. Written
// whole and fsync'd once instead, a 1.5 GB checkpoint part first filled 1.5
// GB of fresh page cache, and on a host that backs guest memory lazily each
// fresh page cost more than the disk's write of it: 130 MB/s against dd's
// 500 (docs/train.md, "Saving at the disk's speed").
class BinaryWriter {
 public:
  explicit BinaryWriter(std::string path);
  ~BinaryWriter();
  BinaryWriter(const BinaryWriter&) = delete;
  BinaryWriter& operator=(const BinaryWriter&) = delete;
  void write(const void* data, std::uint64_t bytes);
  void close();  // fsync + rename; throws naming the file and the reason on an I/O error

 private:
  void start_writeback();  // of the bytes written since the last call
  std::string path_;
  std::string temp_;
  int fd_ = -1;
  std::uint64_t written_ = 0;  // bytes in the file
  std::uint64_t started_ = 0;  // bytes whose writeback was started
  std::deque<std::pair<std::uint64_t, std::uint64_t>> in_flight_;  // (offset, bytes) being written back
};

// "<path>: <field>: <why>"
[[noreturn]] void fail_file(const std::string& path, const std::string& field,
                            const std::string& why);

}  // namespace ntp::model
