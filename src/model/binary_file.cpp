#include "model/binary_file.h"

#include <filesystem>
#include <stdexcept>

namespace ntp::model {

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

BinaryWriter::BinaryWriter(std::string path) : path_(std::move(path)) {
  out_.open(path_, std::ios::binary | std::ios::trunc);
  if (!out_) fail_file(path_, "file", "cannot open for writing");
}

void BinaryWriter::write(const void* data, std::uint64_t bytes) {
  out_.write(static_cast<const char*>(data), static_cast<std::streamsize>(bytes));
  if (!out_) fail_file(path_, "file", "write error");
}

void BinaryWriter::close() {
  out_.close();
  if (!out_) fail_file(path_, "file", "error while closing");
}

}  // namespace ntp::model
