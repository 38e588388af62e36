#pragma once
// Layout-independent checkpoints (format: docs/train.md, "Checkpoints").
//
//   <run>/checkpoints/step-<N>/   the state after N steps (steps 0..N-1 applied)
//     manifest.json               written last: its presence marks the checkpoint complete
//     config.toml                 the resolved configuration of the run that saved it
//     rank-<r>.bin                a part: the units writer rank r held, in its part layout
//
// State is keyed by global unit ids, not by ranks: a part names the unit sets
// (heads, FFN neurons, vocabulary rows) it holds, and the parts of one
// checkpoint hold every unit exactly once (the ranks of one replica), plus
// the replicated tensors once. Any layout can read it back: a rank reads only
// the byte ranges of the units its slot holds (unit-major storage makes each
// held interval one contiguous run).
//
// A part's bytes: the parameters, then AdamW's first moment, then its second,
// each as the tensors of ParameterLayout(model, part shard, part layers) in
// layout order (replicated tensors only in the part that carries them, a
// tied wte copy never), little-endian fp32. With pipeline stages a part holds
// its stage's tensors: every tensor's units are held exactly once over the
// parts that hold the tensor, so a checkpoint of any stage split reads back
// into any other (tensors are matched by name).
//
// Writing is split so the trainer stalls only for the host copy:
// snapshot_part() copies (the stall), write_part() and complete_checkpoint()
// run in the background (checkpoint_saver.h). A save is atomic: parts go to
// step-<N>.partial-e<epoch>/, the manifest is written last and the folder is
// renamed to step-<N>; a crash during a save leaves an ignored .partial
// folder and the previous checkpoint intact.
#include <chrono>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <optional>
#include <span>
#include <stdexcept>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "model/parameters.h"
#include "model/stage.h"
#include "train/dataset.h"

namespace ntp::train {

// A checkpoint that cannot be used: names the file and what is wrong.
class CheckpointError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// One part's state: copied out of a rank's buffers (snapshot_part), or the
// buffers themselves (part_view) for a save after which nothing changes them.
struct CheckpointPart {
  model::Shard shard;
  std::optional<model::StageRange> layers;  // a pipeline stage's blocks; none: the whole model
  bool replicated = false;    // carries the replicated tensors
  std::vector<float> values;  // the copy: params | m | v, each in the part layout
  // Without a copy: the runs of the rank's buffers that make those bytes, in order.
  std::vector<std::span<const float>> view;
  bool borrows_state() const { return values.empty() && !view.empty(); }
  // What is written, in file order: the copy, or the view.
  std::vector<std::span<const float>> runs() const;
  std::uint64_t bytes() const;
};

// The host copy of the units `layout` holds (every one of them), with the
// replicated tensors if `replicated`. `m` and `v` are laid out like `params`.
// `reuse`: the buffer of an earlier part, so that a save touches no fresh
// pages (the copy is the stall training sees).
CheckpointPart snapshot_part(const model::ParameterLayout& layout, std::span<const float> params,
                             std::span<const float> m, std::span<const float> v, bool replicated,
                             std::vector<float> reuse = {});

// What the manifest says about a part file.
struct PartRecord {
  std::string file;  // "rank-3.bin"
  std::uint64_t bytes = 0;
  std::uint64_t checksum = 0;
  model::Shard shard;
  // The blocks of the pipeline stage the part holds; none ("layers" absent
  // from the manifest): the whole model. A stage holds only its own tensors,
  // a last stage's tied wte copy never: the first stage's part holds wte.
  std::optional<model::StageRange> layers;
  bool replicated = false;
  nlohmann::json to_json() const;
  static PartRecord from_json(const nlohmann::json& j, const std::string& where);
};

// The part `layout` holds as a view of its buffers, no copy: for the save
// that ends a run (or a stop), where the state does not change until the
// part is written. The caller keeps the buffers unchanged until then.
CheckpointPart part_view(const model::ParameterLayout& layout, std::span<const float> params,
                         std::span<const float> m, std::span<const float> v, bool replicated);

// Writes <dir>/rank-<rank>.bin (fsync'd) and then <dir>/rank-<rank>.json (its
// PartRecord, atomically): the json's presence says the part is complete.
// Straight from the part's runs, no copy made: written at the disk's pace
// (model::BinaryWriter) while another thread takes their checksum.
PartRecord write_part(const std::filesystem::path& dir, int rank, const CheckpointPart& part);

// What a checkpoint records beside the state.
struct CheckpointInfo {
  std::int64_t step = 0;             // steps applied; a resume runs this step next
  std::int64_t optimizer_steps = 0;  // AdamW's bias-correction count
  model::GptConfig model;
  std::int64_t seq_len = 0;
  // The sample schedule is a pure function of (seed, order, batch, step), so
  // its position is `step`; there is no other random state.
  std::int64_t seed = 0;
  std::string order;
  std::int64_t global_batch = 0;
  // The training data the schedule indexes (none in checkpoints of older
  // builds): a resume over other tokens under the same name is refused.
  std::optional<DataIdentity> data;
  nlohmann::json saved_by;  // the layout and epoch of the job that saved it
};

// The folder names of a save in progress and of its result.
std::filesystem::path partial_dir(const std::filesystem::path& root, std::int64_t step, std::uint64_t epoch);
std::filesystem::path final_dir(const std::filesystem::path& root, std::int64_t step);

// Waits until every rank of `writers` completed its part in `partial` (at most
// `deadline`), then writes config.toml and manifest.json, fsyncs and renames
// the folder to `final`. Throws CheckpointError when a part is missing at the
// deadline (the partial folder is left for prune_checkpoints), and when the
// parts do not hold every unit of the model exactly once. An existing
// `final` (the same step saved before a recovery redid it) is kept and the new
// copy dropped. Returns the total bytes.
// `abandoned(rank)` (polled while waiting for that writer's part; may be
// empty) ends the wait early with the same error: the writer is gone (lost,
// stopped) or the job reconfigured. A part found after it says so still counts:
// a writer that wrote its part and then ended is not a lost one.
std::uint64_t complete_checkpoint(const std::filesystem::path& partial, const std::filesystem::path& final,
                                  const CheckpointInfo& info, const std::vector<int>& writers,
                                  const std::string& config_toml, std::chrono::milliseconds deadline,
                                  const std::function<bool(int rank)>& abandoned = {});

// The complete checkpoints under `root`, oldest first (by step).
std::vector<std::filesystem::path> complete_checkpoints(const std::filesystem::path& root);

// The step a checkpoint folder is named for ("step-12" -> 12), -1 for any
// other name: known without opening it, which a damaged one may refuse.
std::int64_t checkpoint_step(const std::filesystem::path& dir);
// The newest complete checkpoint under `root`, if any.
std::optional<std::filesystem::path> newest_checkpoint(const std::filesystem::path& root);
// Removes all but the newest `keep` complete checkpoints, and the partial
// folders (abandoned saves) of steps up to `partial_upto`; a later step's
// partial folder may be a save still in flight on another rank.
void prune_checkpoints(const std::filesystem::path& root, std::int64_t keep, std::int64_t partial_upto);

// A complete checkpoint, opened for reading.
class Checkpoint {
 public:
  // Parses the manifest and checks that the parts cover every unit exactly
  // once and that each file exists with its recorded size. Throws
  // CheckpointError naming the file.
  static Checkpoint open(const std::filesystem::path& dir);

  const std::filesystem::path& dir() const { return dir_; }
  const CheckpointInfo& info() const { return info_; }
  const std::vector<PartRecord>& parts() const { return parts_; }
  std::filesystem::path config_file() const { return dir_ / "config.toml"; }

  // Reads every byte of every file once and compares the checksums.
  void verify_checksums() const;
  // Throws CheckpointError naming the first model field that differs.
  void check_model(const model::GptConfig& model) const;
  // Fills the parameters and moments of every tensor `layout` holds from the
  // parts that hold its units; reads nothing else.
  void load(const model::ParameterLayout& layout, std::span<float> params, std::span<float> m,
            std::span<float> v) const;

 private:
  std::filesystem::path dir_;
  CheckpointInfo info_;
  std::vector<PartRecord> parts_;
};

// The newest checkpoint under `root` that opens (its manifest reads, every
// part is there at its recorded size: what a full disk or a partial copy
// breaks); the ones skipped on the way, each with why, go to `skipped`. The
// checksums are left to the load, which reads every byte anyway.
std::optional<std::filesystem::path> newest_intact_checkpoint(const std::filesystem::path& root,
                                                              std::vector<std::string>* skipped = nullptr);

// The checkpoint an argument names: a checkpoint folder (it has
// manifest.json) or a run directory (its newest intact checkpoint; a newer
// damaged one is skipped and named in `skipped`). Throws CheckpointError
// saying what was looked for.
std::filesystem::path resolve_checkpoint(const std::filesystem::path& path, std::vector<std::string>* skipped = nullptr);

// The run directory a checkpoint belongs to (<run>/checkpoints/step-N), if it
// lies inside one.
std::optional<std::filesystem::path> run_dir_of_checkpoint(const std::filesystem::path& checkpoint);

}  // namespace ntp::train
