#include "model/binary_file.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <stdexcept>

namespace ntp::model {

namespace {
constexpr std::uint64_t kFnvPrime = 1099511628211ull;
}  // namespace

std::uint64_t checksum_bytes(std::uint64_t h, const void* data, std::size_t bytes) {
  const auto* p = static_cast<const unsigned char*>(data);
  std::size_t i = 0;
  for (; i + 8 <= bytes; i += 8) {
    std::uint64_t word = 0;
    std::memcpy(&word, p + i, 8);
    h = (h ^ word) * kFnvPrime;
  }
  for (; i < bytes; ++i) h = (h ^ p[i]) * kFnvPrime;
  return h;
}

void Checksum::add(const void* data, std::size_t bytes) {
  const auto* at = static_cast<const std::uint8_t*>(data);
  std::size_t i = 0;
  while (tail_bytes_ > 0 && i < bytes) {
    tail_[tail_bytes_++] = at[i++];
    if (tail_bytes_ == 8) {
      words_ = checksum_bytes(words_, tail_, 8);
      tail_bytes_ = 0;
    }
  }
  const std::size_t words = (bytes - i) / 8 * 8;
  words_ = checksum_bytes(words_, at + i, words);
  for (i += words; i < bytes; ++i) tail_[tail_bytes_++] = at[i];
}

std::uint64_t Checksum::value() const { return checksum_bytes(words_, tail_, tail_bytes_); }

void fail_file(const std::string& path, const std::string& field, const std::string& why) {
  throw std::runtime_error(path + ": " + field + ": " + why);
}

BinaryReader::BinaryReader(std::string path) : path_(std::move(path)) {
  std::error_code ec;
  size_ = std::filesystem::file_size(path_, ec);
  if (ec) fail_file(path_, "file", "cannot stat (" + ec.message() + ")");
  in_.open(path_, std::ios::binary);
  if (!in_) fail_file(path_, "file", "cannot open for reading");
}

std::vector<std::int32_t> BinaryReader::header(const char* what) {
  std::vector<std::int32_t> h(kHeaderInts);
  read(h.data(), h.size(), std::string(what) + " header");
  return h;
}

void BinaryReader::read_bytes(void* out, std::uint64_t bytes, const std::string& field) {
  if (pos_ + bytes > size_)
    fail_file(path_, field,
              "truncated: needs " + std::to_string(bytes) + " bytes at offset " +
                  std::to_string(pos_) + ", file has " + std::to_string(size_));
  in_.read(static_cast<char*>(out), static_cast<std::streamsize>(bytes));
  if (!in_) fail_file(path_, field, "read error");
  pos_ += bytes;
}

void BinaryReader::expect_end(const char* what) {
  if (pos_ != size_)
    fail_file(path_, what,
              std::to_string(size_ - pos_) + " unexpected trailing bytes after the payload");
}

namespace {
constexpr std::uint64_t kPiece = std::uint64_t{16} << 20;  // the writeback unit
constexpr std::size_t kPiecesInFlight = 4;                 // queued at the disk before the oldest is waited for
}  // namespace

BinaryWriter::BinaryWriter(std::string path)
    : path_(std::move(path)), temp_(path_ + ".tmp." + std::to_string(::getpid())) {
  fd_ = ::open(temp_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd_ < 0) fail_file(path_, "file", std::string("cannot open for writing: ") + std::strerror(errno));
}

BinaryWriter::~BinaryWriter() {
  if (fd_ < 0) return;
  ::close(fd_);
  ::unlink(temp_.c_str());
}

void BinaryWriter::write(const void* data, std::uint64_t bytes) {
  const auto* at = static_cast<const char*>(data);
  while (bytes > 0) {
    const std::uint64_t piece = std::min(bytes, kPiece - (written_ - started_));
    const ssize_t n = ::pwrite(fd_, at, piece, static_cast<off_t>(written_));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) fail_file(path_, "file", std::string("write error: ") + std::strerror(errno));
    at += n;
    bytes -= static_cast<std::uint64_t>(n);
    written_ += static_cast<std::uint64_t>(n);
    if (written_ - started_ == kPiece) start_writeback();
  }
}

void BinaryWriter::start_writeback() {
  ::sync_file_range(fd_, static_cast<off_t>(started_), static_cast<off_t>(written_ - started_),
                    SYNC_FILE_RANGE_WRITE);  // best effort: the fsync in close() is the check
  in_flight_.emplace_back(started_, written_ - started_);
  started_ = written_;
  if (in_flight_.size() <= kPiecesInFlight) return;
  const auto [offset, bytes] = in_flight_.front();
  in_flight_.pop_front();
  ::sync_file_range(fd_, static_cast<off_t>(offset), static_cast<off_t>(bytes),
                    SYNC_FILE_RANGE_WAIT_BEFORE | SYNC_FILE_RANGE_WRITE | SYNC_FILE_RANGE_WAIT_AFTER);
  ::posix_fadvise(fd_, static_cast<off_t>(offset), static_cast<off_t>(bytes), POSIX_FADV_DONTNEED);
}

void BinaryWriter::close() {
  if (::fsync(fd_) != 0) fail_file(path_, "file", std::string("fsync: ") + std::strerror(errno));
  ::posix_fadvise(fd_, 0, 0, POSIX_FADV_DONTNEED);  // the last pieces too: the file is on the disk
  const int fd = fd_;
  fd_ = -1;
  if (::close(fd) != 0) {
    ::unlink(temp_.c_str());
    fail_file(path_, "file", std::string("error while closing: ") + std::strerror(errno));
  }
  if (::rename(temp_.c_str(), path_.c_str()) != 0) {
    const std::string why = std::strerror(errno);
    ::unlink(temp_.c_str());
    fail_file(path_, "file", "cannot rename the finished file into place: " + why);
  }
}

}  // namespace ntp::model
