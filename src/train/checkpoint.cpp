#include "train/checkpoint.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <future>
#include <thread>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "model/binary_file.h"
#include "train/run_dir.h"

namespace ntp::train {
namespace {

constexpr int kFormatVersion = 1;
constexpr std::array<const char*, 3> kStateNames = {"parameters", "first moment", "second moment"};

// Where each tensor of a part sits in one state block of the part (floats).
struct PartLayout {
  std::vector<std::int64_t> offset;  // per tensor of the layout; -1 = not in the part
  std::int64_t floats = 0;           // of one state block
};

PartLayout part_layout(const model::ParameterLayout& layout, bool replicated) {
  PartLayout out;
  for (const model::TensorSpec& spec : layout.tensors()) {
    const bool included = (spec.kind != model::UnitKind::kReplicated || replicated) && !layout.is_tied_copy(spec);
    out.offset.push_back(included ? out.floats : -1);
    if (included) out.floats += spec.count;
  }
  return out;
}

nlohmann::json intervals_json(const layout::IntervalSet& set) {
  nlohmann::json out = nlohmann::json::array();
  for (const layout::Interval& i : set.intervals()) out.push_back({i.start, i.end});
  return out;
}

layout::IntervalSet intervals_from_json(const nlohmann::json& j) {
  layout::IntervalSet set;
  for (const nlohmann::json& pair : j) set.add(pair.at(0).get<std::int64_t>(), pair.at(1).get<std::int64_t>());
  return set;
}

nlohmann::json model_json(const model::GptConfig& c) {
  nlohmann::json j = {{"family", model::to_string(c.family)}, {"vocab", c.vocab},
                      {"padded_vocab", c.padded_vocab},      {"layers", c.layers},
                      {"d_model", c.d_model},                {"heads", c.heads},
                      {"max_seq", c.max_seq}};
  if (c.llama()) {
    j["kv_heads"] = c.kv_heads;
    j["ffn_hidden"] = c.ffn_hidden;
    j["rope_theta"] = c.rope_theta;
    j["norm_eps"] = c.norm_eps;
  }
  return j;
}

model::GptConfig model_from_json(const nlohmann::json& j) {
  model::GptConfig c;
  c.vocab = j.at("vocab");
  c.padded_vocab = j.at("padded_vocab");
  c.layers = j.at("layers");
  c.d_model = j.at("d_model");
  c.heads = j.at("heads");
  c.max_seq = j.at("max_seq");
  // Manifests from before the Llama family have no "family": GPT-2.
  c.family = model::family_from_string(j.value("family", std::string("gpt2")));
  if (c.llama()) {
    c.kv_heads = j.at("kv_heads");
    c.ffn_hidden = j.at("ffn_hidden");
    c.rope_theta = j.at("rope_theta");
    c.norm_eps = j.at("norm_eps");
  }
  return c;
}

[[noreturn]] void io_fail(const std::filesystem::path& path, const std::string& what) {
  throw CheckpointError(fmt::format("{}: {} ({})", path.string(), what, std::strerror(errno)));
}

void fsync_dir(const std::filesystem::path& dir) {
  const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) io_fail(dir, "cannot open the folder to sync it");
  ::fsync(fd);
  ::close(fd);
}

// "step-12" -> 12; anything else -> -1.
std::int64_t step_of_name(const std::string& name) {
  if (name.rfind("step-", 0) != 0 || name.size() == 5) return -1;
  const std::string digits = name.substr(5);
  if (!std::all_of(digits.begin(), digits.end(), [](char c) { return c >= '0' && c <= '9'; })) return -1;
  return std::stoll(digits);
}

void read_at(int fd, const std::filesystem::path& path, std::uint64_t offset, void* dst, std::uint64_t bytes) {
  auto* out = static_cast<char*>(dst);
  while (bytes > 0) {
    const ssize_t n = ::pread(fd, out, bytes, static_cast<off_t>(offset));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) io_fail(path, "cannot read");
    if (n == 0) throw CheckpointError(fmt::format("{}: ends at byte {}, before its recorded size", path.string(), offset));
    out += n;
    offset += static_cast<std::uint64_t>(n);
    bytes -= static_cast<std::uint64_t>(n);
  }
}

// The layout of a part's tensors.
model::ParameterLayout layout_of(const PartRecord& p, const model::GptConfig& gpt) {
  return p.layers ? model::ParameterLayout(gpt, p.shard, *p.layers) : model::ParameterLayout(gpt, p.shard);
}

// A part's stage: none for the whole model, so that a checkpoint without
// stages reads as it always did.
std::optional<model::StageRange> stage_of(const model::ParameterLayout& layout) {
  if (layout.stage().is_whole(layout.config())) return std::nullopt;
  return layout.stage();
}

// A layout the manifest describes; its errors (units or blocks outside the
// model) as CheckpointError naming the manifest and `what`, so that a damaged
// checkpoint is skipped for an older one like any other.
template <class Make>
model::ParameterLayout described(Make&& make, const std::filesystem::path& manifest, const std::string& what) {
  try {
    return make();
  } catch (const std::exception& e) {
    throw CheckpointError(fmt::format("{}: {}: {}", manifest.string(), what, e.what()));
  }
}

// Every tensor of the model must be held by the parts: each unit of a sharded
// tensor by exactly one part, a replicated tensor by exactly one part. A part
// holds the tensors of its stage (all of them without stages) less a tied copy.
void check_coverage(const std::vector<PartRecord>& parts, const model::GptConfig& gpt,
                    const std::filesystem::path& manifest) {
  const model::ParameterLayout whole =
      described([&] { return model::ParameterLayout(gpt, model::Shard::full(gpt)); }, manifest, "model");
  std::vector<layout::IntervalSet> seen(whole.tensors().size());
  std::vector<int> replicated(whole.tensors().size(), 0);
  for (const PartRecord& p : parts) {
    const model::ParameterLayout part = described([&] { return layout_of(p, gpt); }, manifest, "part " + p.file);
    const PartLayout at = part_layout(part, p.replicated);
    for (std::size_t t = 0; t < part.tensors().size(); ++t) {
      if (at.offset[t] < 0) continue;
      const model::TensorSpec& spec = part.tensors()[t];
      const std::size_t w = whole.index_of(spec.name);
      if (spec.kind == model::UnitKind::kReplicated) {
        ++replicated[w];
        continue;
      }
      if (!seen[w].intersect(spec.units).empty()) {
        throw CheckpointError(fmt::format("{}: {} units {} of {} are held by two parts (one is {})", manifest.string(),
                                          model::to_string(spec.kind), seen[w].intersect(spec.units).to_string(),
                                          spec.name, p.file));
      }
      seen[w].add(spec.units);
    }
  }
  for (std::size_t w = 0; w < whole.tensors().size(); ++w) {
    const model::TensorSpec& spec = whole.tensors()[w];
    if (spec.kind == model::UnitKind::kReplicated) {
      if (replicated[w] != 1) {
        throw CheckpointError(fmt::format("{}: {} parts carry the replicated tensor {}, expected 1", manifest.string(),
                                          replicated[w], spec.name));
      }
    } else if (seen[w] != spec.units) {
      throw CheckpointError(fmt::format("{}: the parts hold {} units {} of {}, the model has {}", manifest.string(),
                                        model::to_string(spec.kind), seen[w].to_string(), spec.name,
                                        spec.units.to_string()));
    }
  }
}

}  // namespace

CheckpointPart snapshot_part(const model::ParameterLayout& layout, std::span<const float> params,
                             std::span<const float> m, std::span<const float> v, bool replicated,
                             std::vector<float> reuse) {
  CheckpointPart part;
  part.values = std::move(reuse);
  part.shard = layout.shard();
  part.layers = stage_of(layout);
  part.replicated = replicated;
  const PartLayout at = part_layout(layout, replicated);
  part.values.resize(static_cast<std::size_t>(3 * at.floats));
  const std::span<const float> states[3] = {params, m, v};
  float* out = part.values.data();
  for (const std::span<const float>& state : states) {
    const auto& tensors = layout.tensors();
    for (std::size_t t = 0; t < tensors.size(); ++t) {
      if (at.offset[t] < 0) continue;
      std::copy_n(state.begin() + tensors[t].offset, tensors[t].count, out + at.offset[t]);
    }
    out += at.floats;
  }
  return part;
}

nlohmann::json PartRecord::to_json() const {
  nlohmann::json j = {{"file", file},
                      {"bytes", bytes},
                      {"checksum", fmt::format("{:016x}", checksum)},
                      {"heads", intervals_json(shard.heads)},
                      {"neurons", intervals_json(shard.neurons)},
                      {"vocab", intervals_json(shard.vocab)},
                      {"replicated", replicated}};
  if (layers) j["layers"] = {layers->first_layer, layers->end_layer};
  return j;
}

PartRecord PartRecord::from_json(const nlohmann::json& j, const std::string& where) {
  try {
    PartRecord p;
    p.file = j.at("file").get<std::string>();
    if (p.file.find('/') != std::string::npos || p.file.empty()) {
      throw CheckpointError(fmt::format("{}: part file name '{}' is not a plain name", where, p.file));
    }
    p.bytes = j.at("bytes").get<std::uint64_t>();
    p.checksum = std::stoull(j.at("checksum").get<std::string>(), nullptr, 16);
    p.shard = {intervals_from_json(j.at("heads")), intervals_from_json(j.at("neurons")),
               intervals_from_json(j.at("vocab"))};
    p.replicated = j.at("replicated").get<bool>();
    // Manifests from before pipeline stages: every part holds the whole model.
    if (j.contains("layers")) {
      const nlohmann::json& layers = j.at("layers");
      const auto block = [](const nlohmann::json& v) {
        return v.is_number_integer() && v.get<std::int64_t>() >= 0 && v.get<std::int64_t>() <= (1 << 30);
      };
      if (!layers.is_array() || layers.size() != 2 || !block(layers[0]) || !block(layers[1])) {
        throw CheckpointError(fmt::format("{}: part {}: \"layers\" must be [first, end) block indices, got {}", where,
                                          p.file, layers.dump()));
      }
      p.layers = model::StageRange{layers[0].get<int>(), layers[1].get<int>()};
    }
    return p;
  } catch (const CheckpointError&) {
    throw;
  } catch (const std::exception& e) {
    throw CheckpointError(fmt::format("{}: malformed part record: {}", where, e.what()));
  }
}

CheckpointPart part_view(const model::ParameterLayout& layout, std::span<const float> params,
                         std::span<const float> m, std::span<const float> v, bool replicated) {
  CheckpointPart part;
  part.shard = layout.shard();
  part.layers = stage_of(layout);
  part.replicated = replicated;
  const PartLayout at = part_layout(layout, replicated);
  for (const std::span<const float>& state : {params, m, v}) {
    const auto& tensors = layout.tensors();
    for (std::size_t t = 0; t < tensors.size(); ++t) {
      if (at.offset[t] < 0 || tensors[t].count == 0) continue;
      const std::span<const float> run = state.subspan(static_cast<std::size_t>(tensors[t].offset),
                                                       static_cast<std::size_t>(tensors[t].count));
      // Tensors that follow each other in the buffer make one run.
      if (!part.view.empty() && part.view.back().data() + part.view.back().size() == run.data()) {
        part.view.back() = {part.view.back().data(), part.view.back().size() + run.size()};
      } else {
        part.view.push_back(run);
      }
    }
  }
  return part;
}

std::vector<std::span<const float>> CheckpointPart::runs() const {
  return values.empty() ? view : std::vector<std::span<const float>>{values};
}

std::uint64_t CheckpointPart::bytes() const {
  std::uint64_t floats = 0;
  for (const std::span<const float>& run : runs()) floats += run.size();
  return floats * sizeof(float);
}

PartRecord write_part(const std::filesystem::path& dir, int rank, const CheckpointPart& part) {
  PartRecord record;
  record.file = fmt::format("rank-{}.bin", rank);
  record.bytes = part.bytes();
  record.shard = part.shard;
  record.layers = part.layers;
  record.replicated = part.replicated;
  const std::vector<std::span<const float>> runs = part.runs();
  // Summed on another core while this one writes: both only read the part.
  std::future<std::uint64_t> checksum = std::async(std::launch::async, [&runs] {
    model::Checksum sum;
    for (const std::span<const float>& run : runs) sum.add(run.data(), run.size_bytes());
    return sum.value();
  });
  try {
    model::BinaryWriter out((dir / record.file).string());  // temp + fsync + rename
    for (const std::span<const float>& run : runs) out.write(run.data(), run.size_bytes());
    out.close();
  } catch (const std::exception& e) {
    checksum.wait();
    throw CheckpointError(e.what());
  }
  record.checksum = checksum.get();
  write_file_atomic(dir / fmt::format("rank-{}.json", rank), record.to_json().dump() + "\n");
  return record;
}

std::filesystem::path partial_dir(const std::filesystem::path& root, std::int64_t step, std::uint64_t epoch) {
  return root / fmt::format("step-{}.partial-e{}", step, epoch);
}

std::filesystem::path final_dir(const std::filesystem::path& root, std::int64_t step) {
  return root / fmt::format("step-{}", step);
}

std::uint64_t complete_checkpoint(const std::filesystem::path& partial, const std::filesystem::path& final,
                                  const CheckpointInfo& info, const std::vector<int>& writers,
                                  const std::string& config_toml, std::chrono::milliseconds deadline,
                                  const std::function<bool(int rank)>& abandoned) {
  const auto give_up = std::chrono::steady_clock::now() + deadline;
  std::vector<PartRecord> parts;
  for (int rank : writers) {
    const std::filesystem::path record = partial / fmt::format("rank-{}.json", rank);
    while (!std::filesystem::exists(record)) {
      if (abandoned && abandoned(rank) && !std::filesystem::exists(record)) {
        throw CheckpointError(fmt::format("{}: abandoned: rank {} was lost, could not write its part, or the job "
                                          "reconfigured before it wrote it",
                                          partial.string(), rank));
      }
      if (std::chrono::steady_clock::now() > give_up) {
        throw CheckpointError(fmt::format("{}: rank {} did not write its part within deadline.checkpoint_s",
                                          partial.string(), rank));
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    std::ifstream in(record);
    parts.push_back(PartRecord::from_json(nlohmann::json::parse(in), record.string()));
  }
  // The check a reader makes, before the folder is published: a writer list
  // that misses a shard or holds one twice must fail this save, not leave a
  // "complete" checkpoint that no resume can open.
  check_coverage(parts, model_from_json(model_json(info.model)), partial);  // the model as the manifest will say
  write_file_atomic(partial / "config.toml", config_toml);
  nlohmann::json manifest = {{"format", "ntp-checkpoint"},
                             {"version", kFormatVersion},
                             {"step", info.step},
                             {"optimizer_steps", info.optimizer_steps},
                             {"model", model_json(info.model)},
                             {"seq_len", info.seq_len},
                             {"schedule", {{"seed", info.seed}, {"order", info.order},
                                           {"global_batch", info.global_batch}, {"next_step", info.step}}},
                             {"data", info.data ? info.data->to_json() : nlohmann::json(nullptr)},
                             {"saved_by", info.saved_by},
                             {"time", unix_time_s()},
                             {"parts", nlohmann::json::array()}};
  std::uint64_t bytes = 0;
  for (const PartRecord& p : parts) {
    manifest["parts"].push_back(p.to_json());
    bytes += p.bytes;
  }
  for (int rank : writers) std::filesystem::remove(partial / fmt::format("rank-{}.json", rank));
  write_file_atomic(partial / "manifest.json", manifest.dump(2) + "\n");
  fsync_dir(partial);
  if (std::filesystem::exists(final)) {
    std::filesystem::remove_all(partial);  // saved before a recovery redid the step: the same state
    return bytes;
  }
  std::error_code ec;
  std::filesystem::rename(partial, final, ec);
  if (ec) throw CheckpointError(fmt::format("{}: cannot rename to {}: {}", partial.string(), final.string(), ec.message()));
  fsync_dir(final.parent_path());
  return bytes;
}

std::int64_t checkpoint_step(const std::filesystem::path& dir) { return step_of_name(dir.filename().string()); }

std::vector<std::filesystem::path> complete_checkpoints(const std::filesystem::path& root) {
  std::vector<std::pair<std::int64_t, std::filesystem::path>> found;
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator(root, ec)) {
    const std::int64_t step = step_of_name(entry.path().filename().string());
    if (step >= 0 && std::filesystem::exists(entry.path() / "manifest.json")) found.emplace_back(step, entry.path());
  }
  std::sort(found.begin(), found.end());
  std::vector<std::filesystem::path> out;
  for (auto& [step, path] : found) out.push_back(std::move(path));
  return out;
}

std::optional<std::filesystem::path> newest_checkpoint(const std::filesystem::path& root) {
  std::vector<std::filesystem::path> all = complete_checkpoints(root);
  if (all.empty()) return std::nullopt;
  return all.back();
}

void prune_checkpoints(const std::filesystem::path& root, std::int64_t keep, std::int64_t partial_upto) {
  const std::vector<std::filesystem::path> complete = complete_checkpoints(root);
  for (std::size_t i = 0; i + static_cast<std::size_t>(std::max<std::int64_t>(keep, 1)) < complete.size(); ++i) {
    std::filesystem::remove_all(complete[i]);
  }
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator(root, ec)) {
    const std::string name = entry.path().filename().string();
    const std::size_t mark = name.find(".partial");
    if (mark == std::string::npos) continue;
    const std::int64_t step = step_of_name(name.substr(0, mark));
    if (step >= 0 && step <= partial_upto) std::filesystem::remove_all(entry.path());
  }
}

Checkpoint Checkpoint::open(const std::filesystem::path& dir) {
  const std::filesystem::path manifest_path = dir / "manifest.json";
  if (!std::filesystem::is_directory(dir)) {
    throw CheckpointError(fmt::format("{}: not a checkpoint folder", dir.string()));
  }
  if (!std::filesystem::exists(manifest_path)) {
    throw CheckpointError(fmt::format("{}: missing (an incomplete checkpoint: its save did not finish)",
                                      manifest_path.string()));
  }
  Checkpoint c;
  c.dir_ = dir;
  nlohmann::json m;
  try {
    std::ifstream in(manifest_path);
    m = nlohmann::json::parse(in);
    if (m.at("format") != "ntp-checkpoint") throw CheckpointError("not an ntp checkpoint manifest");
    if (m.at("version") != kFormatVersion) {
      throw CheckpointError(fmt::format("format version {}, this build reads {}", m.at("version").dump(), kFormatVersion));
    }
    CheckpointInfo& i = c.info_;
    i.step = m.at("step");
    i.optimizer_steps = m.at("optimizer_steps");
    i.model = model_from_json(m.at("model"));
    i.seq_len = m.at("seq_len");
    i.seed = m.at("schedule").at("seed");
    i.order = m.at("schedule").at("order");
    i.global_batch = m.at("schedule").at("global_batch");
    if (m.contains("data") && !m.at("data").is_null()) i.data = DataIdentity::from_json(m.at("data"));
    i.saved_by = m.value("saved_by", nlohmann::json::object());
    for (const nlohmann::json& p : m.at("parts")) c.parts_.push_back(PartRecord::from_json(p, manifest_path.string()));
  } catch (const CheckpointError& e) {
    throw CheckpointError(fmt::format("{}: {}", manifest_path.string(), e.what()));
  } catch (const std::exception& e) {
    throw CheckpointError(fmt::format("{}: malformed manifest: {}", manifest_path.string(), e.what()));
  }
  check_coverage(c.parts_, c.info_.model, manifest_path);
  if (!std::filesystem::exists(c.config_file())) {
    throw CheckpointError(fmt::format("{}: missing", c.config_file().string()));
  }
  for (const PartRecord& p : c.parts_) {
    const std::filesystem::path file = dir / p.file;
    std::error_code ec;
    const std::uintmax_t size = std::filesystem::file_size(file, ec);
    if (ec) throw CheckpointError(fmt::format("{}: missing ({})", file.string(), ec.message()));
    if (size != p.bytes) {
      throw CheckpointError(fmt::format("{}: {} bytes, the manifest records {} (truncated or replaced)", file.string(),
                                        size, p.bytes));
    }
    const model::ParameterLayout layout = layout_of(p, c.info_.model);
    const std::uint64_t expected = 3 * sizeof(float) * static_cast<std::uint64_t>(part_layout(layout, p.replicated).floats);
    if (p.bytes != expected) {
      throw CheckpointError(fmt::format("{}: the manifest records {} bytes, its units need {}", file.string(), p.bytes,
                                        expected));
    }
  }
  return c;
}

void Checkpoint::verify_checksums() const {
  std::vector<char> buffer(std::size_t{8} << 20);
  for (const PartRecord& p : parts_) {
    const std::filesystem::path file = dir_ / p.file;
    const int fd = ::open(file.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) io_fail(file, "cannot open");
    std::uint64_t h = model::kChecksumBasis;
    std::uint64_t done = 0;
    try {
      while (done < p.bytes) {
        const std::uint64_t n = std::min<std::uint64_t>(buffer.size(), p.bytes - done);
        read_at(fd, file, done, buffer.data(), n);
        h = model::checksum_bytes(h, buffer.data(), n);
        done += n;
      }
    } catch (...) {
      ::close(fd);
      throw;
    }
    ::close(fd);
    if (h != p.checksum) {
      throw CheckpointError(fmt::format("{}: checksum {:016x}, the manifest records {:016x} (corrupted)",
                                        file.string(), h, p.checksum));
    }
  }
}

void Checkpoint::check_model(const model::GptConfig& gpt) const {
  const model::GptConfig& saved = info_.model;
  if (saved.family != gpt.family) {
    throw CheckpointError(fmt::format("{}: model family is {}, the configured model is {}",
                                      (dir_ / "manifest.json").string(), model::to_string(saved.family),
                                      model::to_string(gpt.family)));
  }
  const std::pair<const char*, std::pair<std::int64_t, std::int64_t>> fields[] = {
      {"vocab", {saved.vocab, gpt.vocab}},       {"padded_vocab", {saved.padded_vocab, gpt.padded_vocab}},
      {"layers", {saved.layers, gpt.layers}},    {"d_model", {saved.d_model, gpt.d_model}},
      {"heads", {saved.heads, gpt.heads}},       {"max_seq", {saved.max_seq, gpt.max_seq}},
      {"kv_heads", {saved.kv_heads, gpt.kv_heads}}, {"ffn_hidden", {saved.ffn_hidden, gpt.ffn_hidden}}};
  const auto refuse = [&](const char* name, const std::string& saved_value, const std::string& configured) {
    throw CheckpointError(fmt::format("{}: model {} is {}, the configured model has {}",
                                      (dir_ / "manifest.json").string(), name, saved_value, configured));
  };
  for (const auto& [name, values] : fields) {
    if (values.first != values.second) refuse(name, std::to_string(values.first), std::to_string(values.second));
  }
  const std::pair<const char*, std::pair<float, float>> settings[] = {
      {"rope_theta", {saved.rope_theta, gpt.rope_theta}}, {"norm_eps", {saved.norm_eps, gpt.norm_eps}}};
  for (const auto& [name, values] : settings) {
    if (values.first != values.second) {
      refuse(name, model::float_text(values.first), model::float_text(values.second));
    }
  }
}

void Checkpoint::load(const model::ParameterLayout& layout, std::span<float> params, std::span<float> m,
                      std::span<float> v) const {
  const std::span<float> states[3] = {params, m, v};
  for (const PartRecord& p : parts_) {
    const model::ParameterLayout part = layout_of(p, info_.model);
    const PartLayout at = part_layout(part, p.replicated);
    const std::filesystem::path file = dir_ / p.file;
    const int fd = ::open(file.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) io_fail(file, "cannot open");
    try {
      for (const model::TensorSpec& want : layout.tensors()) {
        // Tensors by name: the part and `layout` may be different stages.
        const model::TensorSpec* held = part.find(want.name);
        if (held == nullptr) continue;
        const auto t = static_cast<std::size_t>(held - part.tensors().data());
        const model::TensorSpec& have = *held;
        if (at.offset[t] < 0) continue;
        // The run of `want`'s elements this part holds: all of a replicated
        // tensor, or the intersection of the unit sets, interval by interval.
        std::vector<std::pair<std::int64_t, std::int64_t>> runs;  // (source, destination) element offsets
        std::vector<std::int64_t> lengths;
        if (want.kind == model::UnitKind::kReplicated) {
          runs.emplace_back(0, 0);
          lengths.push_back(want.count);
        } else {
          const layout::IntervalSet common = want.units.intersect(have.units);
          for (const layout::Interval& i : common.intervals()) {
            runs.emplace_back(have.units.offset_of(i.start) * want.unit_size, want.units.offset_of(i.start) * want.unit_size);
            lengths.push_back(i.size() * want.unit_size);
          }
        }
        for (std::size_t s = 0; s < 3; ++s) {
          for (std::size_t r = 0; r < runs.size(); ++r) {
            const std::uint64_t source =
                (static_cast<std::uint64_t>(s) * at.floats + at.offset[t] + runs[r].first) * sizeof(float);
            float* dst = states[s].data() + want.offset + runs[r].second;
            read_at(fd, file, source, dst, static_cast<std::uint64_t>(lengths[r]) * sizeof(float));
          }
        }
      }
    } catch (...) {
      ::close(fd);
      throw;
    }
    ::close(fd);
  }
}

std::optional<std::filesystem::path> newest_intact_checkpoint(const std::filesystem::path& root,
                                                              std::vector<std::string>* skipped) {
  const std::vector<std::filesystem::path> all = complete_checkpoints(root);
  for (auto it = all.rbegin(); it != all.rend(); ++it) {
    try {
      Checkpoint::open(*it);
      return *it;
    } catch (const CheckpointError& e) {
      if (skipped != nullptr) skipped->push_back(fmt::format("{}: {}", it->filename().string(), e.what()));
    }
  }
  return std::nullopt;
}

std::filesystem::path resolve_checkpoint(const std::filesystem::path& path, std::vector<std::string>* skipped) {
  if (!std::filesystem::exists(path)) throw CheckpointError(fmt::format("{}: no such file or folder", path.string()));
  if (!std::filesystem::is_directory(path)) {
    throw CheckpointError(fmt::format("{}: not a folder (expected a run directory or a checkpoint folder)", path.string()));
  }
  if (std::filesystem::exists(path / "manifest.json")) return path;
  if (step_of_name(path.filename().string()) >= 0 || path.filename().string().find(".partial") != std::string::npos) {
    throw CheckpointError(fmt::format("{}: no manifest.json: the save of this checkpoint did not finish",
                                      path.string()));
  }
  std::vector<std::string> damaged;
  const std::optional<std::filesystem::path> newest = newest_intact_checkpoint(path / "checkpoints", &damaged);
  if (!newest) {
    throw CheckpointError(fmt::format("{}: no {}checkpoint in {}{}", path.string(), damaged.empty() ? "complete " : "intact ",
                                      (path / "checkpoints").string(),
                                      damaged.empty() ? "" : fmt::format(" ({})", fmt::join(damaged, "; "))));
  }
  if (skipped != nullptr) skipped->insert(skipped->end(), damaged.begin(), damaged.end());
  return *newest;
}

std::optional<std::filesystem::path> run_dir_of_checkpoint(const std::filesystem::path& checkpoint) {
  const std::filesystem::path abs = std::filesystem::absolute(checkpoint).lexically_normal();
  const std::filesystem::path parent = (abs.filename().empty() ? abs.parent_path() : abs).parent_path();
  if (parent.filename() != "checkpoints") return std::nullopt;
  const std::filesystem::path run = parent.parent_path();
  if (!std::filesystem::exists(run / "config.toml")) return std::nullopt;
  return run;
}

}  // namespace ntp::train
