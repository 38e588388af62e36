#pragma once
// AdamW over a model's flat parameters: decoupled weight decay on the 2-D
// weights only (GPT-2 convention), optional global-norm clipping. The moments
// are flat buffers laid out exactly like the parameters, so the trainer can
// move them unit by unit along with the parameters (see reshard.h).
#include <cstdint>
#include <functional>
#include <string>

#include "model/model.h"
#include "tensor/buffer.h"

namespace ntp::model {

struct AdamWConfig {
  float lr = 3e-4f;
  float beta1 = 0.9f;
  float beta2 = 0.95f;
  float eps = 1e-8f;
  float weight_decay = 0.0f;
  float grad_clip = 0.0f;  // max global gradient norm; 0 disables clipping
  void validate() const;   // throws std::invalid_argument naming the field
};

// Sums a value over the ranks that together hold one copy of every parameter
// (the TP group of a replica). Identity when there is one rank.
using SumAllReduce = std::function<double(double)>;

struct StepStats {
  double grad_norm = 0.0;   // global norm before clipping (computed on every step)
  float grad_scale = 1.0f;  // factor applied to the gradients (clipping)
};

class AdamW {
 public:
  AdamW(const AdamWConfig& config, const ParameterLayout& layout);

  const AdamWConfig& config() const { return config_; }
  std::int64_t steps() const { return steps_; }
  void set_steps(std::int64_t steps) { steps_ = steps; }  // after loading a checkpoint
  tensor::Buffer& m() { return m_; }
  tensor::Buffer& v() { return v_; }
  // Replaces both moments (the layout changed; see reshard.h).
  void adopt(tensor::Buffer m, tensor::Buffer v);

  // The global gradient norm: sqrt(sum over the group of local_grad_sq_norm).
  static double grad_norm(Model& model, const SumAllReduce& sum = nullptr);
  // One update with learning rate `lr` (the schedule lives in the trainer).
  StepStats step(Model& model, float lr, const SumAllReduce& sum = nullptr);
  // The same with the global gradient norm already known (the distributed
  // trainer agrees on it before the step commits); clipping uses it.
  StepStats step_with_norm(Model& model, float lr, double grad_norm);
  // Test hook (a mutation the checkers must catch): never update this tensor.
  void freeze_for_test(std::string tensor) { frozen_for_test_ = std::move(tensor); }

 private:
  AdamWConfig config_;
  tensor::Buffer m_;
  tensor::Buffer v_;
  std::int64_t steps_ = 0;
  std::string frozen_for_test_;
};

}  // namespace ntp::model
