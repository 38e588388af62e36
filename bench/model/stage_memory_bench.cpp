// Peak resident memory of one pipeline-stage rank against the whole model's:
// for each degree in --pp and each stage of it, a child process builds that
// stage of the preset (parameters, gradients, AdamW's moments), runs the
// forwards 1F1B keeps in flight there at its peak (pp - stage micro-batches,
// each in its own activation slot, at most --microbatches), their backwards
// and one optimizer step, and reports its VmHWM (the peak) and that less its
// RSS before it built anything (what the stage itself needs; the rest is the
// libraries, the same in every process). One process per stage, so each
// figure is that rank's own.
//
//   stage_memory_bench [--preset small] [--pp 1,4] [--batch 4] [--seq 64] [--microbatches 8]
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <algorithm>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "model/model.h"
#include "model/optimizer.h"
#include "model/stage.h"
#include "tests/model/model_test_util.h"

namespace {

using namespace ntp;

// A field of /proc/self/status in KiB (VmHWM: the peak, VmRSS: now; 0 where missing).
long status_kib(const char* field) {
  std::ifstream status("/proc/self/status");
  std::string line;
  while (std::getline(status, line)) {
    if (line.rfind(field, 0) == 0) return std::atol(line.c_str() + std::strlen(field));
  }
  return 0;
}

// What a stage's rank measured: its RSS before it built anything (the
// libraries, the same for every stage) and its peak.
struct Rss {
  long before_kib = 0;
  long peak_kib = 0;
};

struct Options {
  std::string preset = "small";
  std::vector<int> pp = {1, 4};
  std::int64_t batch = 4, seq = 64;
  int microbatches = 8;
};

// One stage's rank.
Rss run_stage(const model::GptConfig& c, const model::StageRange& stage, int in_flight, const Options& o) {
  Rss rss;
  rss.before_kib = status_kib("VmRSS:");
  tensor::Context ctx({1});
  model::Model m(c, model::Shard::full(c), ctx, nullptr, stage);
  m.init(1);
  model::AdamW adam({}, m.layout());
  const auto batch = model::testing::random_batch(c, o.batch, o.seq, 7);
  const auto boundary = static_cast<std::size_t>(o.batch * o.seq * c.d_model);  // the residual stream
  const std::vector<float> input(stage.has_embedding() ? 0 : boundary, 0.01f);
  const std::vector<float> doutput(stage.has_head(c) ? 0 : boundary, 0.01f);
  m.zero_grad();
  for (int k = 0; k < in_flight; ++k) {
    m.select_slot(k);
    m.forward_stage(batch.view(), input);
  }
  for (int k = 0; k < in_flight; ++k) {
    m.select_slot(k);
    m.backward_stage(doutput);
  }
  adam.step_with_norm(m, 1e-4f, 1.0);
  rss.peak_kib = status_kib("VmHWM:");
  return rss;
}

std::vector<int> parse_list(const char* text) {
  std::vector<int> out;
  std::stringstream in(text);
  std::string item;
  while (std::getline(in, item, ',')) out.push_back(std::atoi(item.c_str()));
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string flag = argv[i];
    if (flag == "--preset") o.preset = argv[i + 1];
    else if (flag == "--pp") o.pp = parse_list(argv[i + 1]);
    else if (flag == "--batch") o.batch = std::atol(argv[i + 1]);
    else if (flag == "--seq") o.seq = std::atol(argv[i + 1]);
    else if (flag == "--microbatches") o.microbatches = std::atoi(argv[i + 1]);
    else {
      std::fprintf(stderr, "stage_memory_bench: unknown flag %s\n", flag.c_str());
      return 2;
    }
  }
  const model::GptConfig c = model::preset(o.preset);
  std::printf("preset %s (%lld layers, d_model %lld), micro-batch %lld x %lld, %d micro-batches\n", o.preset.c_str(),
              static_cast<long long>(c.layers), static_cast<long long>(c.d_model), static_cast<long long>(o.batch),
              static_cast<long long>(o.seq), o.microbatches);
  std::printf("%4s %6s %8s %10s %12s %12s %12s\n", "pp", "stage", "layers", "in flight", "params (M)",
              "peak (MiB)", "its own (MiB)");
  for (int pp : o.pp) {
    const std::vector<model::StageRange> stages = model::split_layers(static_cast<int>(c.layers), pp);
    for (int s = 0; s < pp; ++s) {
      const model::StageRange& stage = stages[static_cast<std::size_t>(s)];
      const int in_flight = std::min(pp - s, o.microbatches);
      int fds[2];
      if (::pipe(fds) != 0) return 1;
      const pid_t child = ::fork();
      if (child == 0) {
        ::close(fds[0]);
        const Rss rss = run_stage(c, stage, in_flight, o);
        const ssize_t wrote = ::write(fds[1], &rss, sizeof rss);
        ::_exit(wrote == sizeof rss ? 0 : 1);
      }
      ::close(fds[1]);
      Rss rss;
      const bool got = ::read(fds[0], &rss, sizeof rss) == static_cast<ssize_t>(sizeof rss);
      ::close(fds[0]);
      int status = 0;
      ::waitpid(child, &status, 0);
      if (!got || !WIFEXITED(status) || WEXITSTATUS(status) != 0) {
        std::fprintf(stderr, "stage_memory_bench: pp %d stage %d failed\n", pp, s);
        return 1;
      }
      const model::ParameterLayout layout(c, model::Shard::full(c), stage);
      const std::string layers = std::to_string(stage.first_layer) + "-" + std::to_string(stage.end_layer - 1);
      std::printf("%4d %6d %8s %10d %12.2f %12.1f %12.1f\n", pp, s, layers.c_str(), in_flight,
                  static_cast<double>(layout.size()) / 1e6, static_cast<double>(rss.peak_kib) / 1024.0,
                  static_cast<double>(rss.peak_kib - rss.before_kib) / 1024.0);
    }
  }
  return 0;
}
