#include "model/parameters.h"

#include <algorithm>
#include <stdexcept>

namespace ntp::model {

const char* to_string(UnitKind kind) {
  switch (kind) {
    case UnitKind::kReplicated: return "replicated";
    case UnitKind::kHead: return "head";
    case UnitKind::kNeuron: return "neuron";
    case UnitKind::kVocab: return "vocab";
  }
  return "?";
}

ParameterLayout::ParameterLayout(const GptConfig& config, const Shard& shard)
    : ParameterLayout(config, shard, StageRange::whole(config)) {}

ParameterLayout::ParameterLayout(const GptConfig& config, const Shard& shard, const StageRange& stage)
    : config_(config), shard_(shard), stage_(stage) {
  config_.validate();
  shard_.validate(config_);
  stage_.validate(config_);
  if (config_.llama()) add_llama();
  else add_gpt2();
}

void ParameterLayout::add_gpt2() {
  const std::int64_t C = config_.d_model;
  const std::int64_t hd = config_.head_dim();
  add("wte", UnitKind::kVocab, C, true, -1);
  add("wpe", UnitKind::kReplicated, config_.max_seq * C, true, -1);
  for (int l = 0; l < config_.layers; ++l) {
    const std::string p = "h" + std::to_string(l) + ".";
    add(p + "ln1_w", UnitKind::kReplicated, C, false, l);
    add(p + "ln1_b", UnitKind::kReplicated, C, false, l);
    add(p + "qkv_w", UnitKind::kHead, 3 * hd * C, true, l);
    add(p + "qkv_b", UnitKind::kHead, 3 * hd, false, l);
    add(p + "proj_wt", UnitKind::kHead, hd * C, true, l);
    add(p + "proj_b", UnitKind::kReplicated, C, false, l);
    add(p + "ln2_w", UnitKind::kReplicated, C, false, l);
    add(p + "ln2_b", UnitKind::kReplicated, C, false, l);
    add(p + "fc1_w", UnitKind::kNeuron, C, true, l);
    add(p + "fc1_b", UnitKind::kNeuron, 1, false, l);
    add(p + "fc2_wt", UnitKind::kNeuron, C, true, l);
    add(p + "fc2_b", UnitKind::kReplicated, C, false, l);
  }
  add("lnf_w", UnitKind::kReplicated, C, false, -1);
  add("lnf_b", UnitKind::kReplicated, C, false, -1);
}

void ParameterLayout::add_llama() {
  const std::int64_t C = config_.d_model;
  const std::int64_t hd = config_.head_dim();
  const std::int64_t g = config_.queries_per_group();
  add("wte", UnitKind::kVocab, C, true, -1);
  for (int l = 0; l < config_.layers; ++l) {
    const std::string p = "h" + std::to_string(l) + ".";
    add(p + "ln1_w", UnitKind::kReplicated, C, false, l);
    add(p + "qkv_w", UnitKind::kHead, (g + 2) * hd * C, true, l);
    add(p + "proj_wt", UnitKind::kHead, g * hd * C, true, l);
    add(p + "ln2_w", UnitKind::kReplicated, C, false, l);
    add(p + "fc1_w", UnitKind::kNeuron, 2 * C, true, l);
    add(p + "fc2_wt", UnitKind::kNeuron, C, true, l);
  }
  add("lnf_w", UnitKind::kReplicated, C, false, -1);
  add("lm_head", UnitKind::kVocab, C, true, -1);
}

// Outside the blocks: the embedding on the first stage; the final norm and
// the LM head on the last, where GPT-2's head is the tied wte.
bool ParameterLayout::holds_outside_blocks(const std::string& name) const {
  const bool first = stage_.has_embedding(), last = stage_.has_head(config_);
  if (name == "wte") return first || (last && !config_.llama());
  if (name == "wpe") return first;
  return last;  // lnf_w, lnf_b, lm_head
}

void ParameterLayout::add(const std::string& name, UnitKind kind, std::int64_t unit_size,
                          bool decay, int layer) {
  const std::size_t whole_index = offered_++;
  if (!(layer >= 0 ? stage_.holds_layer(layer) : holds_outside_blocks(name))) return;
  TensorSpec t;
  t.name = name;
  t.kind = kind;
  t.unit_size = unit_size;
  t.units = kind == UnitKind::kReplicated ? layout::IntervalSet::range(0, 1) : shard_.of(kind);
  t.offset = size_;
  t.count = t.units.size() * unit_size;
  t.weight_decay = decay;
  t.layer = layer;
  t.whole_index = whole_index;
  size_ += t.count;
  tensors_.push_back(std::move(t));
}

const TensorSpec* ParameterLayout::find(const std::string& name) const {
  for (const TensorSpec& t : tensors_)
    if (t.name == name) return &t;
  return nullptr;
}

std::size_t ParameterLayout::index_of(const std::string& name) const {
  if (const TensorSpec* t = find(name)) return static_cast<std::size_t>(t - tensors_.data());
  throw std::out_of_range("parameter layout: no tensor named '" + name + "'");
}

std::pair<std::size_t, std::size_t> ParameterLayout::layer_range(int layer) const {
  if (!stage_.holds_layer(layer))
    throw std::out_of_range("parameter layout: layer " + std::to_string(layer) + " is outside this stage (" +
                            to_string(stage_) + " of " + std::to_string(config_.layers) + ")");
  const auto first = std::find_if(tensors_.begin(), tensors_.end(),
                                  [&](const TensorSpec& t) { return t.layer == layer; });
  const auto last = std::find_if(first, tensors_.end(),
                                 [&](const TensorSpec& t) { return t.layer != layer; });
  return {static_cast<std::size_t>(first - tensors_.begin()),
          static_cast<std::size_t>(last - tensors_.begin())};
}

namespace {

void check_pair(const ParameterLayout& a, const ParameterLayout& b, std::size_t a_size,
                std::size_t b_size) {
  if (!(a.config() == b.config())) throw std::invalid_argument("parameter layouts: configs differ");
  if (a_size != static_cast<std::size_t>(a.size()) || b_size != static_cast<std::size_t>(b.size()))
    throw std::invalid_argument("parameter layouts: buffer size does not match its layout");
}

// Calls fn(full_offset, shard_offset, elements) for every run of units the shard holds.
template <typename Fn>
void for_each_run(const TensorSpec& full, const TensorSpec& shard, Fn fn) {
  std::int64_t local = shard.offset;
  for (const layout::Interval& iv : shard.units.intervals()) {
    const std::int64_t elements = iv.size() * shard.unit_size;
    fn(full.offset + iv.start * full.unit_size, local, elements);
    local += elements;
  }
}

}  // namespace

void scatter_from_full(const ParameterLayout& full, std::span<const float> full_values,
                       const ParameterLayout& shard, std::span<float> shard_values) {
  check_pair(full, shard, full_values.size(), shard_values.size());
  for (const TensorSpec& t : shard.tensors()) {
    for_each_run(full[t.name], t, [&](auto src, auto dst, auto n) {
      std::copy_n(full_values.begin() + src, n, shard_values.begin() + dst);
    });
  }
}

bool ParameterLayout::is_tied_copy(const TensorSpec& t) const {
  return !config_.llama() && !stage_.has_embedding() && t.name == "wte";
}

void gather_into_full(const ParameterLayout& shard, std::span<const float> shard_values,
                      const ParameterLayout& full, std::span<float> full_values,
                      bool include_replicated) {
  check_pair(full, shard, full_values.size(), shard_values.size());
  for (const TensorSpec& t : shard.tensors()) {
    if ((t.kind == UnitKind::kReplicated && !include_replicated) || shard.is_tied_copy(t)) continue;
    for_each_run(full[t.name], t, [&](auto dst, auto src, auto n) {
      std::copy_n(shard_values.begin() + src, n, full_values.begin() + dst);
    });
  }
}

}  // namespace ntp::model
