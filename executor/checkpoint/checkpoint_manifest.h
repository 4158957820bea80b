#pragma once
// A checkpoint's manifest.json, read strictly and without LibTorch (so it can be fuzzed:
// fuzz/checkpoint_manifest_fuzzer.cpp):
//   {"format": "cpt-checkpoint-v1", "step": N, "model": {ModelSpec},
//    "files": {"model.safetensors": {"bytes": B, "fnv1a64": "<16 hex digits>"}, ...}}
// checkpoint.h checks the listed files against the disk.
#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include "core/json_reader.h"
#include "spec/model_spec.h"

namespace cpt::exec {

inline constexpr const char* kCheckpointFormat = "cpt-checkpoint-v1";

struct ManifestFile {
  std::string name;            // as listed
  std::filesystem::path path;  // inside the checkpoint directory
  std::uintmax_t bytes = 0;
  std::string fnv1a64;  // file_checksum's form
};

struct CheckpointManifest {
  std::int64_t step = 0;
  spec::ModelSpec model;
  std::vector<ManifestFile> files;  // model.safetensors among them
};

// ConfigError naming the manifest's origin and JSON path: another format, a missing or misspelt
// key, a value of the wrong type or range, no model.safetensors, a file named outside `dir`.
[[nodiscard]] CheckpointManifest read_checkpoint_manifest(const core::JsonDocument& doc,
                                                          const std::filesystem::path& dir);

}  // namespace cpt::exec
