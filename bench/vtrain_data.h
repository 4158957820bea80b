#pragma once
// vTrain's published measurements (../shared/validation/vtrain/, Bang et al., MICRO 2024) and
// cpt's prediction of each, shared by bench/vtrain_accuracy.cpp and tests/costmodel.
//
// Assumptions, from the data set's README (anything else is unknown): GPT models (GeLU MLP of 4h,
// LayerNorm, learned positions, tied embeddings, vocabulary 51,200), Megatron-DeepSpeed in fp16,
// full recomputation, no sequence parallelism, no FlashAttention, 1F1B, gradients reduced after
// backward (no bucketing), A100-SXM4-80GB in nodes of 8 (NVLink 3 from the profile) and 800 Gb/s
// per node across nodes (8 NICs of 100 Gb/s).

#include <string>
#include <vector>

#include "costmodel/cost_options.h"

namespace cpt::bench {

struct VtrainRow {
  std::string group;  // "3.6B" (multi-node file) or "h1024-L24" (single-node file)
  int gpus = 0, global_batch = 0, micro_batch = 0, hidden = 0, heads = 0, layers = 0, seq = 0, tp = 0, dp = 0, pp = 0;
  double measured_s = 0;
  double predicted_s = 0;
  bool feasible = true;
  std::string why;  // when infeasible
};

// Reads one of the two CSV files; `has_params` for the multi-node file. Exits 2 when unreadable.
std::vector<VtrainRow> read_vtrain_csv(const std::string& path, bool has_params);
// Fills predicted_s (or feasible = false and why) with cost::evaluate under `options`
// (precision, flash attention and DP overlap are set to the data set's values).
void predict_vtrain(VtrainRow& row, cost::CostModelOptions options);
// Mean absolute percentage error over the rows (an infeasible row counts as 100%), as a fraction.
double vtrain_mape(std::vector<VtrainRow>& rows, const cost::CostModelOptions& options);

}  // namespace cpt::bench
