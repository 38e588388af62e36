#include "model/shard_read.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstring>
#include <stdexcept>

#include "model/binary_file.h"

namespace ntp::model {

PositionedFile::PositionedFile(std::string path) : path_(std::move(path)) {
  fd_ = ::open(path_.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd_ < 0) fail_file(path_, "file", std::string("cannot open for reading: ") + std::strerror(errno));
  struct stat st {};
  if (::fstat(fd_, &st) != 0) {
    const std::string why = std::strerror(errno);
    ::close(fd_);
    fail_file(path_, "file", "cannot stat (" + why + ")");
  }
  size_ = static_cast<std::uint64_t>(st.st_size);
}

PositionedFile::~PositionedFile() { ::close(fd_); }

void PositionedFile::read(std::uint64_t offset, void* out, std::uint64_t bytes, const std::string& field) const {
  const iovec piece{out, bytes};
  read(offset, std::span<const iovec>(&piece, 1), field);
}

void PositionedFile::read(std::uint64_t offset, std::span<const iovec> pieces, const std::string& field) const {
  std::uint64_t bytes = 0;
  for (const iovec& p : pieces) bytes += p.iov_len;
  const auto truncated = [&] {
    fail_file(path_, field, "truncated: needs " + std::to_string(bytes) + " bytes at offset " +
                                std::to_string(offset) + ", file has " + std::to_string(size_));
  };
  if (offset + bytes > size_) truncated();
  if (bytes == 0) return;  // preadv would return 0, which reads as the end of the file
  // preadv takes at most IOV_MAX pieces and may stop early: go on from where it stopped.
  std::vector<iovec> left(pieces.begin(), pieces.end());
  std::size_t first = 0;
  while (first < left.size()) {
    const int count = static_cast<int>(std::min<std::size_t>(left.size() - first, IOV_MAX));
    const ssize_t n = ::preadv(fd_, left.data() + first, count, static_cast<off_t>(offset));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) fail_file(path_, field, std::string("read error: ") + std::strerror(errno));
    if (n == 0) truncated();  // the file shrank under us
    offset += static_cast<std::uint64_t>(n);
    for (auto done = static_cast<std::size_t>(n); done > 0;) {
      iovec& p = left[first];
      const std::size_t step = std::min(done, p.iov_len);
      p.iov_base = static_cast<char*>(p.iov_base) + step;
      p.iov_len -= step;
      done -= step;
      if (p.iov_len == 0) ++first;
    }
    while (first < left.size() && left[first].iov_len == 0) ++first;
  }
}

namespace {

// dst[c][r] = src[r][c] for a [rows][cols] src, in tiles that stay in cache.
void transpose(const float* src, std::int64_t rows, std::int64_t cols, float* dst) {
  constexpr std::int64_t kTile = 32;
  for (std::int64_t r0 = 0; r0 < rows; r0 += kTile)
    for (std::int64_t c0 = 0; c0 < cols; c0 += kTile)
      for (std::int64_t c = c0; c < std::min(cols, c0 + kTile); ++c)
        for (std::int64_t r = r0; r < std::min(rows, r0 + kTile); ++r) dst[c * rows + r] = src[r * cols + c];
}

// Unit-major reads: per block, one preadv per run of units (file-contiguous),
// each unit's block landing in its place in `dst`.
void read_blocks(const PositionedFile& file, std::uint64_t payload, const TensorSource& source,
                 const TensorSpec& spec, float* dst, const std::string& field) {
  std::int64_t within = 0;  // the block's place inside a unit
  for (const FileBlock& block : source.blocks) {
    float* unit = dst;
    for (const layout::Interval& iv : spec.units.intervals()) {
      std::vector<iovec> pieces;
      for (std::int64_t u = iv.start; u < iv.end; ++u, unit += spec.unit_size) {
        float* at = unit + within;
        const auto bytes = static_cast<std::size_t>(block.length) * sizeof(float);
        if (!pieces.empty() && static_cast<char*>(pieces.back().iov_base) + pieces.back().iov_len ==
                                   reinterpret_cast<char*>(at)) {
          pieces.back().iov_len += bytes;  // one block per unit: the run is one piece
        } else {
          pieces.push_back({at, bytes});
        }
      }
      const auto offset = static_cast<std::uint64_t>(block.offset + iv.start * block.length);
      file.read(payload + offset * sizeof(float), pieces, field);
    }
    within += block.length;
  }
  if (within != spec.unit_size) throw std::logic_error("checkpoint source of " + spec.name + " does not fill a unit");
}

// Transposed reads: the held columns of every row, then transposed into place.
void read_transposed(const PositionedFile& file, std::uint64_t payload, const TensorSource& source,
                     const TensorSpec& spec, float* dst, const std::string& field) {
  if (source.width * source.rows != spec.unit_size)
    throw std::logic_error("checkpoint source of " + spec.name + " does not fill a unit");
  std::vector<float> rows;
  for (const layout::Interval& iv : spec.units.intervals()) {
    const std::int64_t first = iv.start * source.width, n = iv.size() * source.width;
    rows.resize(static_cast<std::size_t>(source.rows * n));
    const auto at = [&](std::int64_t row) {
      return payload + static_cast<std::uint64_t>(source.offset + row * source.cols + first) * sizeof(float);
    };
    if (n == source.cols) {  // every column: the rows are one range
      file.read(at(0), rows.data(), rows.size() * sizeof(float), field);
    } else {
      for (std::int64_t r = 0; r < source.rows; ++r)
        file.read(at(r), rows.data() + r * n, static_cast<std::uint64_t>(n) * sizeof(float), field);
    }
    transpose(rows.data(), source.rows, n, dst);
    dst += n * source.rows;
  }
}

}  // namespace

void read_shard(const PositionedFile& file, const GptConfig& file_model, std::uint64_t payload,
                const std::vector<TensorSource>& sources, const ParameterLayout& layout, std::span<float> values) {
  if (!(file_model == layout.config())) {
    fail_file(file.path(), "header",
              "holds the model " + to_string(file_model) + ", the run's is " + to_string(layout.config()));
  }
  if (values.size() != static_cast<std::size_t>(layout.size()) || sources.size() != layout.tensors().size())
    throw std::invalid_argument("read_shard: buffer or sources do not match the layout");
  for (std::size_t i = 0; i < sources.size(); ++i) {
    const TensorSpec& spec = layout.tensors()[i];
    const std::string field = "parameters (" + spec.name + ")";
    float* dst = values.data() + spec.offset;
    if (sources[i].rows > 0) read_transposed(file, payload, sources[i], spec, dst, field);
    else read_blocks(file, payload, sources[i], spec, dst, field);
  }
}

}  // namespace ntp::model
