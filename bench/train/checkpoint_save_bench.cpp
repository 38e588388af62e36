// A GPT-2 124M checkpoint save beside the disk's sequential write rate,
// measured in the same run, alternating so both see the same load:
//
//   disk      the part's bytes written with write() in 1 MiB blocks from one
//             buffer, then fsync: what `dd bs=1M conv=fsync` does
//   final     write_part of a view of the state (the save that ends a run:
//             no copy), target >= 70 % of the disk
//   periodic  the host copy (snapshot_part into the previous save's buffer)
//             and write_part of it, the copy timed apart: it runs while the
//             next step computes
//   model     model.bin (write_model_file: llm.c order, 0.5 GB)
//
// The first repetition runs right after the bench touched 4.5 GB of fresh
// state, and its save is slow (26-42 % of the disk in four runs) while the
// plain write beside it is not, for a reason not pinned down (khugepaged
// collapsing the fresh state is a guess): it is printed and left out of the
// median. A save at the end of `ntp train` comes after training
// (docs/train.md, "Saving at the disk's speed").
//
//   build/bench/train/checkpoint_save_bench [--reps N] [--dir DIR]
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "bench/support/bench_args.h"
#include "bench/support/host_load.h"
#include "model/model_file.h"
#include "model/parameters.h"
#include "train/checkpoint.h"

namespace {

namespace fs = std::filesystem;
using namespace ntp;

using bench::flag;
using bench::now_s;

// MB/s of `bytes` written as dd writes them: 1 MiB write()s of one buffer, fsync.
double plain_write_mb_s(const fs::path& file, std::uint64_t bytes) {
  std::vector<char> block(std::size_t{1} << 20, 1);
  const double start = now_s();
  const int fd = ::open(file.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) throw std::runtime_error(file.string() + ": cannot open");
  for (std::uint64_t done = 0; done < bytes;) {
    const ssize_t n = ::write(fd, block.data(), std::min<std::uint64_t>(block.size(), bytes - done));
    if (n <= 0) throw std::runtime_error(file.string() + ": write error");
    done += static_cast<std::uint64_t>(n);
  }
  ::fsync(fd);
  ::close(fd);
  const double seconds = now_s() - start;
  fs::remove(file);
  return static_cast<double>(bytes) / 1e6 / seconds;
}

double median(std::vector<double> x) {
  std::sort(x.begin(), x.end());
  return x.empty() ? 0.0 : x[x.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  const int reps = std::stoi(flag(argc, argv, "reps", "3"));
  const fs::path dir = flag(argc, argv, "dir", (fs::temp_directory_path() / "ntp_checkpoint_save_bench").string());
  fs::create_directories(dir);
  const model::GptConfig gpt = model::preset("gpt2");
  const model::ParameterLayout layout(gpt, model::Shard::full(gpt));
  // The state, touched once (a trainer's buffers are in use when it saves).
  std::vector<float> params(static_cast<std::size_t>(layout.size()), 0.5f), m(params.size(), 0.25f),
      v(params.size(), 0.125f);
  for (std::size_t i = 0; i < params.size(); i += 1024) params[i] = static_cast<float>(i);
  const std::uint64_t bytes = 3 * params.size() * sizeof(float);
  std::printf("checkpoint save bench: GPT-2 124M, one part of %.1f MB (params, m, v), load %s\n\n", bytes / 1e6,
              bench::load_average().c_str());
  std::vector<float> spare;
  std::vector<double> ratios;
  for (int rep = 0; rep < reps; ++rep) {
    const double disk_before = plain_write_mb_s(dir / "plain.bin", bytes);
    fs::remove_all(dir / "final");
    fs::create_directories(dir / "final");
    double start = now_s();
    train::write_part(dir / "final", 0, train::part_view(layout, params, m, v, true));
    const double final_mb_s = bytes / 1e6 / (now_s() - start);
    start = now_s();
    train::CheckpointPart copy = train::snapshot_part(layout, params, m, v, true, std::move(spare));
    const double copy_s = now_s() - start;
    fs::remove_all(dir / "periodic");
    fs::create_directories(dir / "periodic");
    start = now_s();
    train::write_part(dir / "periodic", 0, copy);
    const double periodic_mb_s = bytes / 1e6 / (now_s() - start);
    spare = std::move(copy.values);
    start = now_s();
    model::write_model_file((dir / "model.bin").string(), gpt, params);
    const double model_mb_s = static_cast<double>(fs::file_size(dir / "model.bin")) / 1e6 / (now_s() - start);
    const double disk_after = plain_write_mb_s(dir / "plain.bin", bytes);
    const double disk = (disk_before + disk_after) / 2;
    if (rep > 0 || reps == 1) ratios.push_back(final_mb_s / disk);
    std::printf("rep %d: disk %.0f MB/s (before %.0f, after %.0f); final save %.0f MB/s = %.0f %% of the disk; "
                "periodic: copy %.2f s, write %.0f MB/s; model.bin %.0f MB/s; load %s\n",
                rep, disk, disk_before, disk_after, final_mb_s, 100 * final_mb_s / disk, copy_s, periodic_mb_s,
                model_mb_s, bench::load_average().c_str());
    std::fflush(stdout);
  }
  std::printf("\nmedian%s: the final save at %.0f %% of the disk's sequential write rate (target >= 70 %%)\n",
              reps > 1 ? " after the first repetition" : "", 100 * median(ratios));
  fs::remove_all(dir);
  return 0;
}
