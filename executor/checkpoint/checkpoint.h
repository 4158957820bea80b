#pragma once
// cpt checkpoints: one directory per step,
//   <root>/step_00000100/
//     model.safetensors       fp32 master weights, Hugging Face names without "model."
//     optimizer.safetensors   AdamW state per parameter ("<param>/exp_avg", ...) (absent in exports)
//     rng.safetensors         the CPU generator state (and CUDA's when used)
//     trainer_state.json      step, tokens seen, data-loader position, seed
//     manifest.json           format, step, the model spec, and every other file's size and FNV-1a 64
// Written atomically: everything goes into <root>/.tmp-step_..-<pid>/, each file is fsynced, the
// directory is renamed into place and the parent fsynced; so a crash leaves either the whole
// checkpoint or none, and a reader verifies sizes and checksums before trusting one.
#include <torch/torch.h>

#include <filesystem>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/json_reader.h"
#include "executor/io/safetensors.h"
#include "spec/model_spec.h"

namespace cpt::exec {

using NamedTensors = std::vector<std::pair<std::string, torch::Tensor>>;

struct CheckpointContents {
  std::int64_t step = 0;
  spec::ModelSpec model;
  NamedTensors weights;
  NamedTensors optimizer;  // empty: a weights-only checkpoint
  NamedTensors rng;        // may be empty
  core::Json trainer_state = core::Json::object();
};

// "step_00000100".
std::string checkpoint_dir_name(std::int64_t step);

// Writes `c` as <root>/<checkpoint_dir_name(c.step)> atomically and returns that path. An existing
// checkpoint of the same step is replaced only after the new one is complete. A file-system
// failure (a full disk, a path that is not a directory) is a RuntimeError naming the step and path.
std::filesystem::path write_checkpoint(const std::filesystem::path& root, const CheckpointContents& c);
// Writes `c` atomically as exactly `dir` (which must not exist).
void write_checkpoint_dir(const std::filesystem::path& dir, const CheckpointContents& c);

// A verified checkpoint. open(): ConfigError naming the directory and the problem when the manifest
// is missing or unreadable (a half-written checkpoint) or a file's size or checksum differs (a
// corrupted one).
class Checkpoint {
 public:
  static Checkpoint open(const std::filesystem::path& dir);
  [[nodiscard]] const std::filesystem::path& dir() const { return dir_; }
  [[nodiscard]] std::int64_t step() const { return step_; }
  [[nodiscard]] const spec::ModelSpec& model() const { return model_; }
  [[nodiscard]] const core::Json& trainer_state() const { return trainer_state_; }
  [[nodiscard]] bool has_optimizer() const { return std::filesystem::exists(dir_ / "optimizer.safetensors"); }
  [[nodiscard]] SafetensorsFile weights() const { return SafetensorsFile::open(dir_ / "model.safetensors"); }
  [[nodiscard]] SafetensorsFile optimizer() const { return SafetensorsFile::open(dir_ / "optimizer.safetensors"); }
  [[nodiscard]] std::optional<SafetensorsFile> rng() const;

 private:
  std::filesystem::path dir_;
  std::int64_t step_ = 0;
  spec::ModelSpec model_;
  core::Json trainer_state_;
};

// The newest checkpoint under `root` that verifies; invalid ones are reported with a warning and
// skipped. nullopt when there is none.
std::optional<Checkpoint> latest_valid_checkpoint(const std::filesystem::path& root);

// True when `root` holds at least one step directory, valid or not.
bool has_step_directories(const std::filesystem::path& root);

// What a writer killed mid-checkpoint left under `root`: its `.tmp-` and `.new-` directories are
// deleted, and an `.old-step_N-PID` (a step being replaced) is renamed back to step_N when step_N
// is missing, else deleted. Returns how many entries it removed or restored. Only one writer may
// use `root` while this runs (the trainer's rank 0, before training).
int recover_unfinished_checkpoints(const std::filesystem::path& root);

// Deletes all but the newest `keep` step directories under `root` (never the one named `protect`).
void prune_checkpoints(const std::filesystem::path& root, int keep, const std::filesystem::path& protect);

// FNV-1a 64 of a file's bytes, as 16 hex digits (core::fnv1a64, streamed in 1 MiB pieces).
std::string file_checksum(const std::filesystem::path& path);

}  // namespace cpt::exec
