// One training step (zero_grad, forward, fused loss, backward, fused AdamW) of
// the GPT-2 presets at TP = 1, batch 4 x sequence 64, on each GEMM backend,
// and of the Llama presets llama-small and llama-1b at batch 4 x sequence 128
// on oneDNN,
// next to the fastest sgemm on the machine (oneDNN's, on the same pool) in the
// same run. Reports tokens/s, model FLOP/s (per token 6 * parameters + 6 *
// layers * d_model * seq, llm.c's count; Llama's untied input embedding, a
// lookup, not counted) as a fraction of the measured sgemm
// FLOP/s, the non-GEMM share of the step, the time of each phase (forward,
// backward, gradient norm, AdamW) and the process's peak RSS. Both
// rates are also given per second of process CPU time (all threads), which
// stays meaningful when other jobs share the cores (the load average is printed).
//
//   model_bench [--threads=N] [--precision=fp32|bf16|both] [--llama_1b_layers=L] [--tp=K [--align=A]]
//               [benchmark flags]
//
// --precision (default both) picks model.precision of the oneDNN steps of
// GPT-2 124M and llama-small: with bf16 (docs/model.md, "Mixed precision")
// the step's FLOP/s is a fraction of oneDNN's bf16 matmul peak (bf16_matmul/
// onednn, measured the same way through gemm() on a bf16 context, interleaved
// with the steps), and with both the summary gives each model's bf16 step
// time over its fp32 step time and the peak RSS of each.
//
// --llama_1b_layers runs llama-1b with L of its 22 layers (each layer the same
// shape), for hosts without the ~19 GB its full training state needs; the
// name of the benchmark says the layers run. Peak RSS is each case's own
// (VmHWM reset at its start through /proc/self/clear_refs; where that is not
// allowed, the process's: then run one model per process for a per-model figure).
//
// --tp=K adds the step of one rank of a TP-K replica of GPT-2 124M (slot 0:
// the largest share of every kind) with the shares of align 1 and of
// --align (default 64; layout/shares.h), on oneDNN: what aligned GEMM widths
// are worth on this CPU (docs/layout.md). The rank runs alone, in a group of
// one: its compute, no TP all-reduce. Model FLOPs count the rank's own
// parameters.
#include <benchmark/benchmark.h>
#include <sys/resource.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <ctime>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "bench/support/host_load.h"
#include "comm/group.h"
#include "comm/store.h"
#include "layout/job_layout.h"
#include "model/model.h"
#include "model/optimizer.h"
#include "tensor/attention.h"
#include "tensor/buffer.h"
#include "tensor/context.h"
#include "tensor/matmul.h"

namespace {

using namespace ntp;

int g_threads = 2;
int g_llama_1b_layers = 0;  // 0: all of them
int g_tp = 0;               // --tp: 0 = no TP-rank cases
int g_align = 64;           // --align of the aligned TP-rank case
tensor::Context* g_peak_ctx = nullptr;  // oneDNN: the fastest sgemm here
tensor::Context* g_peak_bf16_ctx = nullptr;  // oneDNN's bf16 matmul
bool g_fp32 = true, g_bf16 = true;           // --precision

double process_cpu_seconds() {
  timespec ts{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
}

using ntp::bench::load_average;

// The peak RSS since the last reset_peak_rss(): /proc/self/status's VmHWM,
// which writing 5 to /proc/self/clear_refs sets back to the current RSS (the
// earlier cases' freed buffers are gone from it), so each case reports its
// own peak; the process's (ru_maxrss) where /proc does not allow it.
bool g_peak_resettable = false;

void reset_peak_rss() {
  std::FILE* f = std::fopen("/proc/self/clear_refs", "w");
  g_peak_resettable = f != nullptr && std::fputs("5", f) >= 0;
  if (f != nullptr && std::fclose(f) != 0) g_peak_resettable = false;
}

double peak_rss_mib() {
  if (g_peak_resettable) {
    std::FILE* f = std::fopen("/proc/self/status", "r");
    char line[256];
    double kib = -1;
    while (f != nullptr && kib < 0 && std::fgets(line, sizeof line, f) != nullptr) {
      if (std::strncmp(line, "VmHWM:", 6) == 0) kib = std::atof(line + 6);
    }
    if (f != nullptr) std::fclose(f);
    if (kib >= 0) return kib / 1024.0;
  }
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  return static_cast<double>(usage.ru_maxrss) / 1024.0;  // ru_maxrss is KiB on Linux
}

struct Rate {
  double per_second = 0.0;      // FLOP per wall-clock second
  double per_cpu_second = 0.0;  // FLOP per second of process CPU time
};

// sgemm FLOP/s on a large square product (OpenBLAS near its peak).
Rate measure_sgemm_flops(tensor::Context& ctx, std::int64_t n, double min_seconds) {
  tensor::Buffer a(n * n), b(n * n), c(n * n);
  for (std::size_t i = 0; i < a.size(); ++i) a.data()[i] = b.data()[i] = 1e-3f * static_cast<float>(i % 97);
  tensor::gemm(ctx, false, false, n, n, n, 1.0f, a.data(), n, b.data(), n, 0.0f, c.data(), n);  // warm up
  int reps = 0;
  const double cpu_start = process_cpu_seconds();
  const auto start = std::chrono::steady_clock::now();
  double seconds = 0.0;
  while (seconds < min_seconds) {
    tensor::gemm(ctx, false, false, n, n, n, 1.0f, a.data(), n, b.data(), n, 0.0f, c.data(), n);
    ++reps;
    seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  }
  const double flop = 2.0 * static_cast<double>(n * n * n) * reps;
  return {flop / seconds, flop / (process_cpu_seconds() - cpu_start)};
}


void BM_Sgemm(benchmark::State& state, tensor::GemmBackend backend, tensor::Precision precision) {
  const std::int64_t n = state.range(0);
  tensor::Context ctx({.threads = g_threads, .gemm = backend, .precision = precision});
  Rate rate;
  for (auto _ : state) rate = measure_sgemm_flops(ctx, n, 1.0);
  state.counters["GFLOP/s"] = rate.per_second / 1e9;
  state.counters["GFLOP/cpu_s"] = rate.per_cpu_second / 1e9;
}

struct StepCase {
  std::string preset;
  model::Family family = model::Family::kGpt2;
  std::int64_t seq = 64;
  std::int64_t layers = 0;  // 0: the preset's
  int tp = 1;               // > 1: slot 0 of a TP-tp replica, shares in blocks of `align`
  int align = 1;
  tensor::Precision precision = tensor::Precision::kFp32;
};

// Slot 0's units of every kind in a healthy TP-`tp` replica: heads whole,
// neurons and vocabulary rows in blocks of `align` (as the trainer's job_config).
model::Shard slot0_shard(const model::GptConfig& c, int tp, int align) {
  const auto units = [&](std::int64_t count, int block) {
    const layout::JobConfig job{.units = count, .tp = tp, .replicas = 1, .align = block};
    return layout::plan_job(job).units_of(0, 0);
  };
  return {units(c.head_units(), 1), units(c.ffn(), align), units(c.padded_vocab, align)};
}

std::string solo_store_dir() { return "/tmp/ntp_model_bench_store_" + std::to_string(::getpid()); }

// A TP group of one: a partial shard computes alone, with no all-reduce.
// Each group takes a new epoch, so no group sees another's store keys.
std::unique_ptr<comm::Group> solo_group() {
  static std::uint64_t epoch = 0;
  comm::GroupOptions o;
  o.ranks = {0};
  o.global_rank = 0;
  o.epoch = ++epoch;
  o.name = "bench";
  return comm::create_group(comm::open_store("file:" + solo_store_dir()), o);
}

void BM_TrainStep(benchmark::State& state, const StepCase& sc, tensor::GemmBackend backend) {
  reset_peak_rss();
  model::GptConfig config = model::preset(sc.preset, sc.family);
  if (sc.layers > 0) config.layers = sc.layers;
  const std::int64_t B = 4, T = sc.seq;
  tensor::Context ctx({.threads = g_threads, .gemm = backend, .precision = sc.precision});
  tensor::Context& peak_ctx = sc.precision == tensor::Precision::kBf16 ? *g_peak_bf16_ctx : *g_peak_ctx;
  const std::unique_ptr<comm::Group> solo = sc.tp > 1 ? solo_group() : nullptr;
  const model::Shard shard = sc.tp > 1 ? slot0_shard(config, sc.tp, sc.align) : model::Shard::full(config);
  model::Model m(config, shard, ctx, solo.get());
  m.init(1);
  model::AdamWConfig opt_config;
  opt_config.lr = 1e-4f;
  opt_config.weight_decay = 0.1f;
  opt_config.grad_clip = 1.0f;
  model::AdamW opt(opt_config, m.layout());
  std::vector<std::int32_t> inputs(B * T), targets(B * T);
  // Token ids this rank holds: alone in its group, it must own every target
  // (the vocabulary-parallel loss counts each target's holders).
  const std::int64_t ids = sc.tp > 1 ? shard.vocab.size() : config.vocab;
  const auto id = [&](std::int64_t k) {
    return static_cast<std::int32_t>(sc.tp > 1 ? shard.vocab.unit_at(k) : k);
  };
  for (std::int64_t i = 0; i < B * T; ++i) {
    inputs[i] = id((i * 7919) % std::min(ids, config.vocab));
    targets[i] = id((i * 104729 + 1) % std::min(ids, config.vocab));
  }
  const model::Batch batch{inputs.data(), targets.data(), B, T};
  // Wall seconds of each phase over the timed steps (the breakdown printed
  // after the table): forward (with the loss), backward, the gradient norm,
  // AdamW.
  double phase[4] = {0.0, 0.0, 0.0, 0.0};
  bool timing = false;
  const auto timed = [&](int i, auto&& f) {
    const auto t0 = std::chrono::steady_clock::now();
    f();
    if (timing) phase[i] += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  };
  const auto train_step = [&] {
    m.zero_grad();
    double loss = 0.0, norm = 0.0;
    timed(0, [&] { loss = m.forward(batch).mean(); });
    timed(1, [&] { m.backward(); });
    timed(2, [&] { norm = model::AdamW::grad_norm(m); });
    timed(3, [&] { opt.step_with_norm(m, opt_config.lr, norm); });
    return loss;
  };
  double loss = train_step();  // warm-up: first-touch of the activations
  // Each timed step is followed by ~0.5 s of sgemm (timing paused), so the
  // two rates are measured interleaved, under the same machine load.
  double step_cpu = 0.0, step_wall = 0.0, sgemm_flop = 0.0, sgemm_wall = 0.0, sgemm_cpu = 0.0;
  const double gemm_before = ctx.gemm_seconds();
  timing = true;
  for (auto _ : state) {
    const double cpu0 = process_cpu_seconds();
    const auto step0 = std::chrono::steady_clock::now();
    loss = train_step();
    step_wall += std::chrono::duration<double>(std::chrono::steady_clock::now() - step0).count();
    step_cpu += process_cpu_seconds() - cpu0;
    state.PauseTiming();
    const auto wall0 = std::chrono::steady_clock::now();
    const double cpu1 = process_cpu_seconds();
    const Rate r = measure_sgemm_flops(peak_ctx, 2048, 0.5);
    const double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - wall0).count();
    sgemm_flop += r.per_second * wall;
    sgemm_wall += wall;
    sgemm_cpu += process_cpu_seconds() - cpu1;
    state.ResumeTiming();
  }
  const Rate peak{sgemm_flop / sgemm_wall, sgemm_flop / sgemm_cpu};
  const double cpu_seconds = step_cpu;
  const double params = static_cast<double>(sc.tp > 1 ? m.layout().size() : model::parameter_count(config));
  const double lookup_only = config.llama() ? static_cast<double>(config.padded_vocab * config.d_model) : 0.0;
  const double attention_width =
      static_cast<double>(shard.heads.size() * config.head_dim() * config.queries_per_group());
  const double flops_per_token = 6.0 * (params - lookup_only) +
                                 6.0 * static_cast<double>(config.layers) * attention_width * static_cast<double>(T);
  const double tokens = static_cast<double>(state.iterations() * B * T);
  state.counters["tokens/s"] = benchmark::Counter(tokens, benchmark::Counter::kIsRate);
  state.counters["model_GFLOP/s"] =
      benchmark::Counter(tokens * flops_per_token / 1e9, benchmark::Counter::kIsRate);
  state.counters["sgemm_GFLOP/s"] = peak.per_second / 1e9;
  state.counters["cpu_fraction"] = tokens * flops_per_token / cpu_seconds / peak.per_cpu_second;
  state.counters["non_gemm_share"] = 1.0 - (ctx.gemm_seconds() - gemm_before) / step_wall;
  const char* phase_names[] = {"forward_ms", "backward_ms", "norm_ms", "adamw_ms"};
  for (int i = 0; i < 4; ++i)
    state.counters[phase_names[i]] = 1e3 * phase[i] / static_cast<double>(state.iterations());
  state.counters["params_M"] = params / 1e6;
  state.counters["neurons"] = static_cast<double>(shard.neurons.size());
  state.counters["vocab_rows"] = static_cast<double>(shard.vocab.size());
  state.counters["peak_rss_MiB"] = peak_rss_mib();
  state.counters["loss"] = loss;
}

// The attention kernels alone, forward and backward of one micro-batch, on
// each path side by side (alternating within each iteration, so both see the
// same machine load): milliseconds per training step (times the model's
// layers) on each, and the ratio. The model shapes, and GPT-2's heads over a
// range of sequence lengths (the rule of attention_path_for).
struct AttentionCase {
  std::string name;
  tensor::AttentionShape shape;
  std::int64_t layers = 1;
};

void BM_Attention(benchmark::State& state, const AttentionCase& ac, tensor::GemmBackend backend) {
  const tensor::AttentionShape& s = ac.shape;
  tensor::Context ctx({g_threads, backend});
  const std::int64_t rows = s.batch * s.seq;
  tensor::Buffer qkv(rows * s.qkv_row()), dqkv(rows * s.qkv_row()), out(rows * s.heads * s.head_dim),
      dout(rows * s.heads * s.head_dim), att(s.batch * s.heads * s.seq * s.seq);
  std::uint32_t lcg = 12345;  // inputs in [-2, 2)
  const auto fill = [&](tensor::Buffer& b) {
    for (std::size_t i = 0; i < b.size(); ++i) {
      lcg = lcg * 1664525u + 1013904223u;
      b.data()[i] = 4.0f * static_cast<float>(lcg >> 8) / 16777216.0f - 2.0f;
    }
  };
  fill(qkv);
  fill(dout);
  const tensor::AttentionPath paths[] = {tensor::AttentionPath::kLoops, tensor::AttentionPath::kGemm};
  const auto pass = [&](tensor::AttentionPath path) {
    const auto start = std::chrono::steady_clock::now();
    tensor::attention_forward(ctx, out.data(), att.data(), qkv.data(), s, path);
    dqkv.zero();  // as the model does before the backward
    tensor::attention_backward(ctx, dqkv.data(), dout.data(), qkv.data(), att.data(), s, path);
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  };
  for (const auto path : paths) pass(path);  // warm up: first touch, scratch buffers
  double seconds[2] = {0.0, 0.0};
  for (auto _ : state)
    for (int p = 0; p < 2; ++p) seconds[p] += pass(paths[p]);
  const double ms_per_step = static_cast<double>(ac.layers) * 1e3 / static_cast<double>(state.iterations());
  state.counters["loops_ms/step"] = seconds[0] * ms_per_step;
  state.counters["gemm_ms/step"] = seconds[1] * ms_per_step;
  state.counters["gemm_speedup"] = seconds[0] / seconds[1];
}

void register_attention_benchmarks() {
  const auto gpt2_heads = [](std::int64_t seq) { return tensor::AttentionShape{4, seq, 12, 64, 1}; };
  std::vector<AttentionCase> cases = {{"gpt2/B4xT64", gpt2_heads(64), 12},
                                      {"llama-small/B4xT128", {4, 128, 8, 32, 2}, 4}};
  for (std::int64_t seq : {4, 8, 16, 32, 128, 256})
    cases.push_back({"gpt2-heads/B4xT" + std::to_string(seq), gpt2_heads(seq), 12});
  for (const AttentionCase& ac : cases) {
    for (const auto backend : {tensor::GemmBackend::kOneDnn, tensor::GemmBackend::kOpenBlas}) {
      benchmark::RegisterBenchmark(("attention/" + ac.name + "/" + std::string(tensor::gemm_backend_name(backend)))
                                       .c_str(),
                                   BM_Attention, ac, backend)
          ->Unit(benchmark::kMillisecond)
          ->Iterations(ac.shape.seq >= 128 ? 20 : 60)
          ->UseRealTime();
    }
  }
}

// "fraction of sgemm" = model_GFLOP/s / sgemm_GFLOP/s, printed after the table
// from the same measurements; with both precisions, bf16 step / fp32 step.
class FractionReporter : public benchmark::ConsoleReporter {
 public:
  void ReportRuns(const std::vector<Run>& runs) override {
    ConsoleReporter::ReportRuns(runs);
    for (const Run& run : runs) {
      const std::string full_name = run.benchmark_name();
      const std::string name = full_name.substr(0, full_name.find("/iterations:"));
      const double step_s = run.iterations > 0 ? run.real_accumulated_time / static_cast<double>(run.iterations) : 0;
      if (run.counters.count("peak_rss_MiB") > 0 && name.find("train_step/") == 0) {
        step_[name] = {step_s, static_cast<double>(run.counters.at("peak_rss_MiB"))};
        const std::string bf16 = "/bf16";
        if (name.size() > bf16.size() && name.compare(name.size() - bf16.size(), bf16.size(), bf16) == 0) {
          const auto fp32 = step_.find(name.substr(0, name.size() - bf16.size()));
          if (fp32 != step_.end()) {
            std::printf("  %s: bf16 step / fp32 step = %.3f s / %.3f s = %.2f; peak RSS %.0f -> %.0f MiB\n",
                        name.c_str(), step_s, fp32->second.first, step_s / fp32->second.first,
                        fp32->second.second, static_cast<double>(run.counters.at("peak_rss_MiB")));
          }
        }
      }
      const auto speedup = run.counters.find("gemm_speedup");
      if (speedup != run.counters.end()) {
        std::printf("  %s: attention %.2f ms/step on the loops, %.2f ms/step through GEMM (%.2fx)\n",
                    run.benchmark_name().c_str(), static_cast<double>(run.counters.at("loops_ms/step")),
                    static_cast<double>(run.counters.at("gemm_ms/step")), static_cast<double>(speedup->second));
        continue;
      }
      const auto model_rate = run.counters.find("model_GFLOP/s");
      const auto peak = run.counters.find("sgemm_GFLOP/s");
      if (model_rate == run.counters.end() || peak == run.counters.end()) continue;
      // Rate counters are already divided by the measured time in the reporter's copy.
      std::printf("  %s: %.1f%% of sgemm FLOP/s (%.1f%% per CPU second), non-GEMM %.1f%% of "
                  "the step, %.0f tokens/s, %.3f s/step, peak RSS %.0f MiB\n",
                  run.benchmark_name().c_str(), 100.0 * model_rate->second / peak->second,
                  100.0 * static_cast<double>(run.counters.at("cpu_fraction")),
                  100.0 * static_cast<double>(run.counters.at("non_gemm_share")),
                  static_cast<double>(run.counters.at("tokens/s")),
                  static_cast<double>(run.iterations) > 0
                      ? run.real_accumulated_time / static_cast<double>(run.iterations)
                      : 0.0,
                  static_cast<double>(run.counters.at("peak_rss_MiB")));
      std::printf("    per step: forward %.1f ms, backward %.1f ms, gradient norm %.1f ms, AdamW %.1f ms\n",
                  static_cast<double>(run.counters.at("forward_ms")),
                  static_cast<double>(run.counters.at("backward_ms")),
                  static_cast<double>(run.counters.at("norm_ms")),
                  static_cast<double>(run.counters.at("adamw_ms")));
    }
  }

 private:
  std::map<std::string, std::pair<double, double>> step_;  // name -> (s/step, peak RSS MiB)
};

int parse_flag(int& argc, char** argv, const char* name, int fallback) {
  const std::string prefix = std::string("--") + name + "=";
  int value = fallback;
  int out = 1;
  for (int i = 1; i < argc; ++i) {
    if (std::strncmp(argv[i], prefix.c_str(), prefix.size()) == 0) value = std::stoi(argv[i] + prefix.size());
    else argv[out++] = argv[i];
  }
  argc = out;
  return value;
}

}  // namespace

int main(int argc, char** argv) {
  g_threads = parse_flag(argc, argv, "threads", 2);
  g_llama_1b_layers = parse_flag(argc, argv, "llama_1b_layers", 0);
  g_tp = parse_flag(argc, argv, "tp", 0);
  g_align = parse_flag(argc, argv, "align", 64);
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (!arg.starts_with("--precision=")) continue;
    const std::string value = arg.substr(12);
    g_fp32 = value != "bf16";
    g_bf16 = value != "fp32";
    if (value != "fp32" && value != "bf16" && value != "both") {
      std::fprintf(stderr, "--precision: fp32 | bf16 | both, not '%s'\n", value.c_str());
      return 2;
    }
    for (int j = i; j + 1 < argc; ++j) argv[j] = argv[j + 1];
    --argc;
    --i;
  }
  tensor::Context peak_ctx({g_threads, tensor::GemmBackend::kOneDnn});
  g_peak_ctx = &peak_ctx;
  tensor::Context peak_bf16_ctx({.threads = g_threads, .precision = tensor::Precision::kBf16});
  g_peak_bf16_ctx = &peak_bf16_ctx;
  const tensor::Context blas_ctx({g_threads, tensor::GemmBackend::kOpenBlas});
  std::printf("threads: %s\n         %s\n         %s\nload average at start: %s\n",
              peak_ctx.describe().c_str(), blas_ctx.describe().c_str(), peak_bf16_ctx.describe().c_str(),
              load_average().c_str());
  benchmark::Initialize(&argc, argv);
  for (const auto backend : {tensor::GemmBackend::kOneDnn, tensor::GemmBackend::kOpenBlas}) {
    const std::string name(tensor::gemm_backend_name(backend));
    benchmark::RegisterBenchmark(("sgemm/" + name).c_str(), BM_Sgemm, backend, tensor::Precision::kFp32)
        ->Arg(2048)
        ->Iterations(1)
        ->Unit(benchmark::kMillisecond);
  }
  if (g_bf16) {
    benchmark::RegisterBenchmark("bf16_matmul/onednn", BM_Sgemm, tensor::GemmBackend::kOneDnn,
                                 tensor::Precision::kBf16)
        ->Arg(2048)
        ->Iterations(1)
        ->Unit(benchmark::kMillisecond);
  }
  for (const char* preset : {"small", "gpt2"}) {
    for (const auto backend : {tensor::GemmBackend::kOneDnn, tensor::GemmBackend::kOpenBlas}) {
      if (!g_fp32) continue;
      benchmark::RegisterBenchmark((std::string("train_step/") + preset + "/B4xT64/" +
                                    std::string(tensor::gemm_backend_name(backend)))
                                       .c_str(),
                                   BM_TrainStep, StepCase{preset}, backend)
          ->Unit(benchmark::kMillisecond)
          ->Iterations(4)
          ->UseRealTime();
    }
  }
  const StepCase llama_cases[] = {{"llama-small", model::Family::kLlama, 128, 0},
                                  {"llama-1b", model::Family::kLlama, 128, g_llama_1b_layers}};
  for (const StepCase& sc : llama_cases) {
    if (!g_fp32) continue;
    const std::string layers = sc.layers > 0 ? "/layers" + std::to_string(sc.layers) : "";
    benchmark::RegisterBenchmark(("train_step/" + sc.preset + layers + "/B4xT128/onednn").c_str(), BM_TrainStep,
                                 sc, tensor::GemmBackend::kOneDnn)
        ->Unit(benchmark::kMillisecond)
        ->Iterations(sc.preset == "llama-1b" ? 2 : 4)
        ->UseRealTime();
  }
  // bf16 steps, named after their fp32 twin + "/bf16" (the summary's ratio).
  const StepCase bf16_cases[] = {{"gpt2", model::Family::kGpt2, 64}, {"llama-small", model::Family::kLlama, 128}};
  for (StepCase sc : bf16_cases) {
    if (!g_bf16) continue;
    sc.precision = tensor::Precision::kBf16;
    benchmark::RegisterBenchmark(
        ("train_step/" + sc.preset + "/B4xT" + std::to_string(sc.seq) + "/onednn/bf16").c_str(), BM_TrainStep, sc,
        tensor::GemmBackend::kOneDnn)
        ->Unit(benchmark::kMillisecond)
        ->Iterations(4)
        ->UseRealTime();
  }
  if (g_tp > 1) {
    for (const int align : {1, g_align}) {
      StepCase sc{"gpt2"};
      sc.tp = g_tp;
      sc.align = align;
      const std::string name =
          "train_step_tp/gpt2/TP" + std::to_string(g_tp) + "/align" + std::to_string(align) + "/B4xT64/onednn";
      benchmark::RegisterBenchmark(name.c_str(), BM_TrainStep, sc, tensor::GemmBackend::kOneDnn)
          ->Unit(benchmark::kMillisecond)
          ->Iterations(4)
          ->UseRealTime();
    }
  }
  register_attention_benchmarks();
  FractionReporter reporter;
  benchmark::RunSpecifiedBenchmarks(&reporter);
  std::printf("load average at end: %s\n", load_average().c_str());
  std::filesystem::remove_all(solo_store_dir());
  benchmark::Shutdown();
  return 0;
}
