// One rank's parameters out of a GPT-2 124M llm.c checkpoint, side by side:
// the whole-file path (read the file, reorder it into the full layout, cut
// the rank's shard out) against the shard reader (positioned reads of the
// rank's units straight into its buffer), at TP 1 and for rank 0 of TP 2 and
// TP 3, alternating so both see the same load. Prints seconds per read (the
// reorder and the scatter of the whole-file path separately), the bytes read,
// the ratio and the load average. The file comes from the page cache after
// the first pass, as it does for every rank but the first.
//
//   checkpoint_read_bench [--reps N] [--checkpoint PATH (written when missing)]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "bench/support/bench_args.h"
#include "bench/support/host_load.h"
#include "model/binary_file.h"
#include "model/init.h"
#include "model/llmc_checkpoint.h"
#include "model/parameters.h"

namespace {

namespace fs = std::filesystem;
using namespace ntp::model;

using ntp::bench::flag;
using ntp::bench::now_s;

// Rank 0 of `tp` with the contiguous (Megatron) split of each unit kind.
Shard rank0(const GptConfig& c, std::int64_t tp) {
  const auto first = [&](std::int64_t units) { return ntp::layout::IntervalSet::range(0, (units + tp - 1) / tp); };
  return {first(c.head_units()), first(c.ffn()), first(c.padded_vocab)};
}

struct Old {
  double read_s = 0, reorder_s = 0, scatter_s = 0;
};

// The path the ranks took before: whole file, reorder, scatter.
Old whole_file(const std::string& path, const ParameterLayout& shard, std::vector<float>& out) {
  Old t;
  double t0 = now_s();
  std::vector<float> llmc(static_cast<std::size_t>(parameter_count(shard.config())));
  {
    std::ifstream in(path, std::ios::binary);
    in.seekg(static_cast<std::streamoff>(kHeaderInts * 4));
    in.read(reinterpret_cast<char*>(llmc.data()), static_cast<std::streamsize>(llmc.size() * 4));
  }
  t.read_s = now_s() - t0;
  t0 = now_s();
  const std::vector<float> full = from_llmc_order(shard.config(), llmc);
  t.reorder_s = now_s() - t0;
  t0 = now_s();
  scatter_from_full(ParameterLayout(shard.config(), Shard::full(shard.config())), full, shard, out);
  t.scatter_s = now_s() - t0;
  return t;
}

}  // namespace

int main(int argc, char** argv) {
  const int reps = std::stoi(flag(argc, argv, "reps", "3"));
  const std::string checkpoint =
      flag(argc, argv, "checkpoint", (fs::temp_directory_path() / "ntp_checkpoint_read_bench.bin").string());
  const GptConfig config = preset("gpt2");
  if (!fs::exists(checkpoint)) {
    const ParameterLayout full(config, Shard::full(config));
    std::vector<float> params(static_cast<std::size_t>(full.size()));
    init_parameters(full, params, 1);
    write_llmc_checkpoint(checkpoint, config, params);
  }
  std::printf("checkpoint: %s (%.0f MiB)\nload average at start: %s\n", checkpoint.c_str(),
              static_cast<double>(fs::file_size(checkpoint)) / (1 << 20), ntp::bench::load_average().c_str());
  for (int rep = 0; rep < reps; ++rep) {
    for (std::int64_t tp : {1, 2, 3}) {
      const ParameterLayout layout(config, rank0(config, tp));
      std::vector<float> old_values(static_cast<std::size_t>(layout.size()));
      std::vector<float> new_values(static_cast<std::size_t>(layout.size()));
      const Old old = whole_file(checkpoint, layout, old_values);
      const double t0 = now_s();
      read_llmc_shard(checkpoint, layout, new_values);
      const double shard_s = now_s() - t0;
      const bool same = std::memcmp(old_values.data(), new_values.data(), old_values.size() * 4) == 0;
      const double old_s = old.read_s + old.reorder_s + old.scatter_s;
      std::printf("rep %d tp %lld rank 0: whole file %.3f s (read %.3f, reorder %.3f, scatter %.3f), %.0f MiB read; "
                  "shard reader %.3f s, %.0f MiB read; ratio %.3f; same bits: %s\n",
                  rep, static_cast<long long>(tp), old_s, old.read_s, old.reorder_s, old.scatter_s,
                  static_cast<double>(fs::file_size(checkpoint)) / (1 << 20), shard_s,
                  static_cast<double>(layout.size()) * 4 / (1 << 20), shard_s / old_s, same ? "yes" : "NO");
      std::fflush(stdout);
      if (!same) return 1;
    }
  }
  std::printf("load average at end: %s\n", ntp::bench::load_average().c_str());
  return 0;
}
