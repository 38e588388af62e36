#pragma once
// Reading one rank's shard straight out of a checkpoint file whose tensors are
// stored in another order (llm.c's and llama2.c's tensor-major files). Each
// tensor of the layout says where its units lie in the file (TensorSource);
// the reader issues positioned reads for exactly the units the rank holds,
// into the rank's own buffer: every byte the rank needs is read once, no other
// byte is read, and no full-model buffer exists. Only the transposed
// (row-parallel) tensors pass through a buffer of one tensor's shard, to be
// transposed into place.
#include <sys/uio.h>

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "model/parameters.h"

namespace ntp::model {

// `length` floats per unit, unit u's at `offset + u * length` (floats from the
// start of the payload).
struct FileBlock {
  std::int64_t offset = 0;
  std::int64_t length = 0;
};

// Where one tensor's units lie in the file.
struct TensorSource {
  // Unit u is its blocks, in order: blocks[b] at blocks[b].offset + u * blocks[b].length.
  // A tensor stored in the file's own order has one block of unit_size
  // (a replicated tensor: one block of its size); GPT-2's qkv_w has three
  // (its head's q, k and v rows, which llm.c stores apart).
  std::vector<FileBlock> blocks;
  // Transposed (rows > 0): the file holds a [rows][cols] matrix at `offset`
  // (out x in, as llm.c and llama2.c store the row-parallel projections);
  // unit u is its columns [u * width, (u + 1) * width), each stored as one
  // contiguous row of `rows` floats.
  std::int64_t offset = 0, rows = 0, cols = 0, width = 0;

  static TensorSource in_blocks(std::vector<FileBlock> blocks) { return {std::move(blocks), 0, 0, 0, 0}; }
  static TensorSource transposed(std::int64_t offset, std::int64_t rows, std::int64_t cols, std::int64_t width) {
    return {{}, offset, rows, cols, width};
  }
};

// A file read by position (pread): readers that take only some byte ranges.
class PositionedFile {
 public:
  explicit PositionedFile(std::string path);  // throws naming the file
  ~PositionedFile();
  PositionedFile(const PositionedFile&) = delete;
  PositionedFile& operator=(const PositionedFile&) = delete;
  const std::string& path() const { return path_; }
  std::uint64_t size() const { return size_; }
  // Reads [offset, offset + bytes); throws naming `field` when the file ends first.
  void read(std::uint64_t offset, void* out, std::uint64_t bytes, const std::string& field) const;
  // Reads the consecutive bytes from `offset` on into `pieces` in turn (preadv).
  void read(std::uint64_t offset, std::span<const iovec> pieces, const std::string& field) const;

 private:
  std::string path_;
  int fd_ = -1;
  std::uint64_t size_ = 0;
};

// Fills `values` (laid out by `layout`) from `file`, whose header says it
// holds `file_model` and whose payload starts at byte `payload`; `sources[i]`
// describes layout.tensors()[i] of the full model. A file of another model
// than the layout's is refused, naming the file's header.
void read_shard(const PositionedFile& file, const GptConfig& file_model, std::uint64_t payload,
                const std::vector<TensorSource>& sources, const ParameterLayout& layout, std::span<float> values);

}  // namespace ntp::model
