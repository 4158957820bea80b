#include "spec/stage_partition.h"

#include <algorithm>
#include <numeric>

#include "core/check.h"
#include "core/str_cat.h"

namespace cpt::spec {

using core::str_cat;

StagePartition::StagePartition(std::vector<int> layers_per_stage, int pp, int virtual_stages)
    : layers_per_stage_(std::move(layers_per_stage)), pp_(pp), virtual_stages_(virtual_stages) {}

int StagePartition::balanced_layers_in(int layers, int pp, int virtual_stages, int stage) {
  const int stages = pp * virtual_stages;
  CPT_CHECK(pp >= 1 && virtual_stages >= 1 && stages <= layers, "pp ", pp, " virtual_stages ", virtual_stages,
            " layers ", layers);
  CPT_CHECK(stage >= 0 && stage < stages, "stage ", stage, " of ", stages);
  const int extra = layers % stages;  // < stages: the last stage never gets one when stages > 1
  // The extra layers go to stages 1, 2, ..., S-2, then 0, then S-1 (the order of the contract).
  bool gets_extra = false;
  if (stages == 1) {
    gets_extra = extra > 0;
  } else if (stage == 0) {
    gets_extra = extra >= stages - 1;
  } else if (stage < stages - 1) {
    gets_extra = stage <= extra;
  }
  return layers / stages + (gets_extra ? 1 : 0);
}

int StagePartition::balanced_first_layer(int layers, int pp, int virtual_stages, int stage) {
  const int stages = pp * virtual_stages;
  (void)balanced_layers_in(layers, pp, virtual_stages, stage);  // checks the arguments
  if (stage == 0) return 0;
  const int extra = layers % stages;
  // Before `stage`: stages 1..stage-1 take an extra each while their index is <= extra, and stage 0
  // takes one only when every inner stage has (extra == stages - 1).
  const int inner_extras = std::min(stage - 1, extra);
  return stage * (layers / stages) + inner_extras + (extra == stages - 1 ? 1 : 0);
}

std::vector<LayerRange> StagePartition::balanced_ranges_of_rank(int layers, int pp, int virtual_stages, int pp_rank) {
  CPT_CHECK(pp_rank >= 0 && pp_rank < pp, "pp rank ", pp_rank, " of ", pp);
  std::vector<LayerRange> ranges;
  ranges.reserve(static_cast<std::size_t>(virtual_stages));
  for (int chunk = 0; chunk < virtual_stages; ++chunk) {
    const int stage = chunk * pp + pp_rank;
    ranges.push_back({balanced_first_layer(layers, pp, virtual_stages, stage),
                      balanced_layers_in(layers, pp, virtual_stages, stage)});
  }
  return ranges;
}

StagePartition StagePartition::balanced(int layers, int pp, int virtual_stages) {
  const int stages = pp * virtual_stages;
  std::vector<int> per(static_cast<std::size_t>(stages));
  for (int s = 0; s < stages; ++s) per[static_cast<std::size_t>(s)] = balanced_layers_in(layers, pp, virtual_stages, s);
  return StagePartition(std::move(per), pp, virtual_stages);
}

std::optional<std::string> StagePartition::find_error(const std::vector<int>& per, int layers, int pp,
                                                      int virtual_stages) {
  const int stages = pp * virtual_stages;
  if (static_cast<int>(per.size()) != stages) {
    return str_cat(per.size(), " entries for pp (", pp, ") * virtual_stages (", virtual_stages, ") = ", stages,
                   " stages");
  }
  for (std::size_t i = 0; i < per.size(); ++i) {
    if (per[i] < 1) return str_cat("stage ", i, " must hold >= 1 layer, got ", per[i]);
  }
  const int sum = std::accumulate(per.begin(), per.end(), 0);
  if (sum != layers) return str_cat("layers per stage sum to ", sum, ", the model has ", layers);
  return std::nullopt;
}

StagePartition StagePartition::from_list(std::vector<int> per, int pp, int virtual_stages) {
  const auto error = find_error(per, std::accumulate(per.begin(), per.end(), 0), pp, virtual_stages);
  CPT_CHECK(!error, *error);
  return StagePartition(std::move(per), pp, virtual_stages);
}

int StagePartition::num_layers() const {
  return std::accumulate(layers_per_stage_.begin(), layers_per_stage_.end(), 0);
}

int StagePartition::layers_in(int stage) const {
  CPT_CHECK(stage >= 0 && stage < num_stages(), "stage ", stage, " of ", num_stages());
  return layers_per_stage_[static_cast<std::size_t>(stage)];
}

int StagePartition::first_layer(int stage) const {
  CPT_CHECK(stage >= 0 && stage < num_stages(), "stage ", stage, " of ", num_stages());
  return std::accumulate(layers_per_stage_.begin(), layers_per_stage_.begin() + stage, 0);
}

int StagePartition::stage_of_layer(int layer) const {
  int end = 0;
  for (int s = 0; s < num_stages(); ++s) {
    end += layers_per_stage_[static_cast<std::size_t>(s)];
    if (layer < end) return s;
  }
  CPT_UNREACHABLE("layer ", layer, " beyond ", end, " layers");
}

std::vector<int> StagePartition::stages_of_rank(int pp_rank) const {
  CPT_CHECK(pp_rank >= 0 && pp_rank < pp_, "pp_rank ", pp_rank, " of ", pp_);
  std::vector<int> out;
  for (int c = 0; c < virtual_stages_; ++c) out.push_back(stage_of(pp_rank, c));
  return out;
}

int StagePartition::layers_of_rank(int pp_rank) const {
  int n = 0;
  for (int s : stages_of_rank(pp_rank)) n += layers_in(s);
  return n;
}

}  // namespace cpt::spec
