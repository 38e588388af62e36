#include "model/optimizer.h"

#include <cmath>
#include <stdexcept>
#include <string>

#include "tensor/adamw.h"

namespace ntp::model {

void AdamWConfig::validate() const {
  const auto require = [](bool ok, const char* field) {
    if (!ok) throw std::invalid_argument(std::string("adamw: ") + field + " out of range");
  };
  require(lr >= 0.0f, "lr");
  require(beta1 >= 0.0f && beta1 < 1.0f, "beta1");
  require(beta2 >= 0.0f && beta2 < 1.0f, "beta2");
  require(eps > 0.0f, "eps");
  require(weight_decay >= 0.0f, "weight_decay");
  require(grad_clip >= 0.0f, "grad_clip");
}

AdamW::AdamW(const AdamWConfig& config, const ParameterLayout& layout)
    : config_(config),
      m_(static_cast<std::size_t>(layout.size())),
      v_(static_cast<std::size_t>(layout.size())) {
  config_.validate();
}

void AdamW::adopt(tensor::Buffer m, tensor::Buffer v) {
  if (m.size() != v.size()) throw std::invalid_argument("adamw: moment buffers differ in size");
  m_ = std::move(m);
  v_ = std::move(v);
}

double AdamW::grad_norm(Model& model, const SumAllReduce& sum) {
  double sq = model.local_grad_sq_norm();
  if (sum) sq = sum(sq);
  return std::sqrt(sq);
}

StepStats AdamW::step(Model& model, float lr, const SumAllReduce& sum) {
  // The norm is reported every step (metrics, --verify), clipping or not.
  return step_with_norm(model, lr, grad_norm(model, sum));
}

StepStats AdamW::step_with_norm(Model& model, float lr, double grad_norm) {
  const ParameterLayout& layout = model.layout();
  if (m_.size() != static_cast<std::size_t>(layout.size()))
    throw std::logic_error("adamw: moments do not match the model's layout (reshard both)");
  StepStats stats;
  stats.grad_norm = grad_norm;
  if (config_.grad_clip > 0.0f && grad_norm > config_.grad_clip)
    stats.grad_scale = static_cast<float>(config_.grad_clip / grad_norm);
  ++steps_;
  tensor::AdamWStep s{lr, config_.beta1, config_.beta2, config_.eps, 0.0f, stats.grad_scale,
                      steps_};
  std::vector<tensor::AdamWSegment> segments;
  for (const TensorSpec& t : layout.tensors()) {  // tensors are contiguous ranges
    if (t.name == frozen_for_test_) continue;
    segments.push_back({t.offset, t.count, t.weight_decay ? config_.weight_decay : 0.0f});
  }
  // With bf16 GEMMs the weights' rounded copy is updated in the same pass.
  const Model::ParamsForUpdate w = model.params_for_update();
  tensor::adamw_update(model.context().host(), w.params.data(), model.grads().data(), m_.data(), v_.data(), segments,
                       s, w.rounded.empty() ? nullptr : w.rounded.data());  // one pass over the pool
  return stats;
}

}  // namespace ntp::model
