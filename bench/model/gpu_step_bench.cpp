// One training step of a GPT-2 preset on the GPU (model.device = "cuda"):
// zero_grad, forward with the fused loss, backward with each gradient tensor
// copied to the host as it is final, the gradient norm and AdamW on the host
// master weights (the product's path), next to cuBLAS's fp32 sgemm measured
// in the same run. Reports each phase's time, tokens/s and model FLOP/s (per
// token 6 * parameters + 6 * layers * d_model * seq, llm.c's count) as a
// fraction of the measured sgemm rate. Skips (exit 0) without a GPU.
//
//   gpu_step_bench [--preset gpt2] [--batch 16] [--seq 1024] [--steps 10] [--threads N]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "model/config.h"
#include "model/model.h"
#include "model/optimizer.h"
#include "tensor/buffer.h"
#include "tensor/context.h"
#include "tensor/gpu.h"
#include "tensor/matmul.h"

namespace {

using namespace ntp;
using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point start) { return std::chrono::duration<double>(Clock::now() - start).count(); }

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// cuBLAS sgemm FLOP/s on n x n x n, the median of `reps` products after a warm-up.
double sgemm_rate(tensor::Context& ctx, std::int64_t n, int reps) {
  tensor::Buffer a(static_cast<std::size_t>(n * n), ctx.gpu()), b(a.size(), ctx.gpu()), c(a.size(), ctx.gpu());
  std::vector<float> host(a.size());
  for (std::size_t i = 0; i < host.size(); ++i) host[i] = static_cast<float>(i % 97) * 0.01f - 0.5f;
  ctx.gpu()->upload(a.data(), host.data(), host.size() * sizeof(float));
  ctx.gpu()->upload(b.data(), host.data(), host.size() * sizeof(float));
  std::vector<double> times;
  for (int r = 0; r < reps + 2; ++r) {
    const auto start = Clock::now();
    tensor::gemm(ctx, false, false, n, n, n, 1.0f, a.data(), n, b.data(), n, 0.0f, c.data(), n);
    ctx.gpu()->synchronize();
    if (r >= 2) times.push_back(seconds_since(start));
  }
  return 2.0 * static_cast<double>(n) * n * n / median(times);
}

}  // namespace

int main(int argc, char** argv) {
  std::string preset = "gpt2";
  std::int64_t batch = 16, seq = 1024;
  int steps = 10, threads = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string key = argv[i];
    const char* value = argv[i + 1];
    if (key == "--preset") preset = value;
    else if (key == "--batch") batch = std::atoll(value);
    else if (key == "--seq") seq = std::atoll(value);
    else if (key == "--steps") steps = std::atoi(value);
    else if (key == "--threads") threads = std::atoi(value);
    else {
      std::fprintf(stderr, "gpu_step_bench: unknown flag %s\n", key.c_str());
      return 2;
    }
  }
  if (tensor::Gpu::count() == 0) {
    std::printf("gpu_step_bench: skipped, no CUDA device visible\n");
    return 0;
  }
  tensor::Context ctx(tensor::ThreadSetup{threads, tensor::GemmBackend::kOneDnn, true});
  std::printf("device: %s\n", ctx.describe().c_str());
  const double peak = sgemm_rate(ctx, 8192, 10);
  std::printf("cuBLAS sgemm 8192^3 fp32: %.1f TFLOP/s\n", peak / 1e12);

  const model::GptConfig c = model::preset(preset, model::Family::kGpt2);
  model::Model m(c, model::Shard::full(c), ctx);
  m.init(1);
  model::AdamW opt(model::AdamWConfig{}, m.layout());
  std::vector<std::int32_t> inputs(static_cast<std::size_t>(batch * seq)), targets(inputs.size());
  for (std::size_t i = 0; i < inputs.size(); ++i) {
    inputs[i] = static_cast<std::int32_t>((i * 7919) % static_cast<std::size_t>(c.vocab));
    targets[i] = static_cast<std::int32_t>((i * 104729 + 1) % static_cast<std::size_t>(c.vocab));
  }
  const model::Batch view{inputs.data(), targets.data(), batch, seq};
  std::vector<double> fwd, bwd, upd, total;
  double loss = 0.0;
  for (int s = 0; s < steps + 3; ++s) {
    const auto start = Clock::now();
    m.zero_grad();
    loss = m.forward(view).mean();
    const double t_fwd = seconds_since(start);
    m.backward();
    const double t_bwd = seconds_since(start) - t_fwd;
    opt.step(m, 1e-4f);
    const double t_all = seconds_since(start);
    if (s < 3) continue;  // warm-up: allocations, cuBLAS's kernel choice
    fwd.push_back(t_fwd);
    bwd.push_back(t_bwd);
    upd.push_back(t_all - t_fwd - t_bwd);
    total.push_back(t_all);
  }
  const double params = static_cast<double>(model::parameter_count(c));
  const double tokens = static_cast<double>(batch * seq);
  const double flops = tokens * (6.0 * params + 6.0 * c.layers * c.d_model * seq);
  const double step = median(total), fb = median(fwd) + median(bwd);
  std::printf("model: %s, %.1fM parameters, batch %lld x seq %lld, %d timed steps, last loss %.4f\n", preset.c_str(),
              params / 1e6, static_cast<long long>(batch), static_cast<long long>(seq), steps, loss);
  std::printf("median ms: forward %.1f, backward (with gradient copies) %.1f, norm + AdamW on host %.1f, step %.1f\n",
              1e3 * median(fwd), 1e3 * median(bwd), 1e3 * median(upd), 1e3 * step);
  std::printf("step: %.0f tokens/s, %.1f TFLOP/s = %.2f of sgemm peak\n", tokens / step, flops / step / 1e12,
              flops / step / peak);
  std::printf("forward + backward alone: %.0f tokens/s, %.1f TFLOP/s = %.2f of sgemm peak\n", tokens / fb,
              flops / fb / 1e12, flops / fb / peak);
  return 0;
}
