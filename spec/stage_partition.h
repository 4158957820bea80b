#pragma once
// StagePartition: which layers each pipeline stage holds.
//
// There are S = pp·v stages (v = virtual stages per pipeline rank). Stage s holds a contiguous
// range of layers, in order, and lives on pipeline rank s mod pp as that rank's model chunk
// s / pp (Megatron's interleaved assignment: rank r holds stages r, r+pp, r+2pp, ...).
// Example: pp = 2, v = 2, 8 layers -> stages [0,2) [2,4) [4,6) [6,8); rank 0 holds stages 0 and 2
// (layers 0-1 and 4-5), rank 1 holds stages 1 and 3.
//
// The first stage also holds the embedding and the last stage the final norm, LM head and loss.

#include <optional>
#include <string>
#include <vector>

namespace cpt::spec {

// Layers [first, first + count) of a model.
struct LayerRange {
  int first = 0;
  int count = 0;
};

class StagePartition {
 public:
  // Layers split as evenly as possible. When layers % S != 0 the extra layers go to the inner
  // stages first (1, 2, ..., S−2, then 0 and S−1), because the first and last stages also carry the
  // embedding and the LM head. REQUIRES: 1 <= pp·v <= layers.
  static StagePartition balanced(int layers, int pp, int virtual_stages);
  // balanced(...).layers_in(stage) and .first_layer(stage) without building the partition, in O(1),
  // for the planner's search (a rank's layers: costmodel/memory_model.h balanced_held_layers). REQUIRES: as balanced,
  // and a valid index.
  static int balanced_layers_in(int layers, int pp, int virtual_stages, int stage);
  static int balanced_first_layer(int layers, int pp, int virtual_stages, int stage);
  // The layers of pipeline rank `pp_rank`'s chunks in balanced(...), one range per chunk, in
  // chunk order (ascending). REQUIRES: as balanced, and 0 <= pp_rank < pp.
  static std::vector<LayerRange> balanced_ranges_of_rank(int layers, int pp, int virtual_stages, int pp_rank);
  // An explicit list of layers per stage (uneven allowed). Returns the reason when the list does
  // not have pp·v entries, has an entry < 1, or does not sum to `layers`.
  static std::optional<std::string> find_error(const std::vector<int>& layers_per_stage, int layers, int pp,
                                               int virtual_stages);
  // REQUIRES: find_error(...) is empty.
  static StagePartition from_list(std::vector<int> layers_per_stage, int pp, int virtual_stages);

  [[nodiscard]] int num_stages() const { return static_cast<int>(layers_per_stage_.size()); }
  [[nodiscard]] int pp() const { return pp_; }
  [[nodiscard]] int virtual_stages() const { return virtual_stages_; }
  [[nodiscard]] int num_layers() const;
  [[nodiscard]] const std::vector<int>& layers_per_stage() const { return layers_per_stage_; }
  [[nodiscard]] int layers_in(int stage) const;
  [[nodiscard]] int first_layer(int stage) const;  // layers [first_layer, first_layer + layers_in)
  [[nodiscard]] int stage_of_layer(int layer) const;
  [[nodiscard]] int pp_rank_of(int stage) const { return stage % pp_; }
  [[nodiscard]] int chunk_of(int stage) const { return stage / pp_; }
  [[nodiscard]] int stage_of(int pp_rank, int chunk) const { return chunk * pp_ + pp_rank; }
  // Stages of one pipeline rank, by chunk.
  [[nodiscard]] std::vector<int> stages_of_rank(int pp_rank) const;
  // Layers held by one pipeline rank over all its chunks.
  [[nodiscard]] int layers_of_rank(int pp_rank) const;

  bool operator==(const StagePartition&) const = default;

 private:
  StagePartition(std::vector<int> layers_per_stage, int pp, int virtual_stages);
  std::vector<int> layers_per_stage_;
  int pp_ = 1;
  int virtual_stages_ = 1;
};

}  // namespace cpt::spec
