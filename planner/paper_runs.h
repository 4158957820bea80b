#pragma once
// Measured runs published with two papers, as `cpt validate` checks them (planner/validation.h):
//
// - Korthikanti et al. 2022, "Reducing Activation Recomputation in Large Transformer Models"
//   (MLSys 2023), Table 5: iteration times of four GPT models on A100-SXM4-80GB, TP 8, sequence
//   2048, no FlashAttention, under full recomputation without sequence parallelism and under
//   sequence parallelism with selective recomputation (their Table 3 gives the configurations).
//   Eight numbers, kept here as data.
// - vTrain (Bang et al., MICRO 2024): 1,549 measured iteration times of GPT models under
//   Megatron-DeepSpeed, read from the data set's two CSV files (ground_truth_multi.csv,
//   ground_truth_single.csv). Assumptions, from its README (anything else is unknown): GeLU MLP of
//   4h, LayerNorm, learned positions, tied embeddings, vocabulary 51,200, fp16, full recomputation,
//   no sequence parallelism, no FlashAttention, 1F1B, gradients reduced after the backward (no
//   bucketing), A100-SXM4-80GB in nodes of 8 (NVLink 3 from the profile) and 800 Gb/s per node
//   across nodes (8 NICs of 100 Gb/s).
//
// Both are priced as Megatron-LM runs unless the caller names another runtime.

#include <filesystem>
#include <istream>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "costmodel/cost_options.h"
#include "core/units.h"
#include "planner/validation.h"
#include "spec/hardware_spec.h"
#include "spec/parallel_config.h"

namespace cpt::planner {

struct KorthikantiRun {
  const char* model;  // cpt's catalog name
  int gpus, pp, virtual_stages, global_batch, micro_batch;
  double selective_s, full_s;  // measured iteration time under each recomputation
};

// Table 5's four rows (the 1T row states no virtual stages: one assumed).
[[nodiscard]] std::span<const KorthikantiRun> korthikanti_table5();
// The configuration of a row: TP 8, its pipeline, and selective recomputation with sequence
// parallelism or full recomputation without.
[[nodiscard]] spec::ParallelConfig korthikanti_config(const KorthikantiRun& run, bool selective);
// Eight checks, group "Korthikanti Table 5 A100-80GB bf16", metric "step_time_s".
[[nodiscard]] std::vector<RunCheck> check_korthikanti_runs(const cost::CostModelOptions& options,
                                                           std::optional<spec::Runtime> runtime = std::nullopt);

struct VtrainRow {
  std::string group;  // "3.6B" (multi-node file) or "h1024-L24" (single-node file)
  int line = 0;       // in its file
  int gpus = 0, global_batch = 0, micro_batch = 0, hidden = 0, heads = 0, layers = 0, seq = 0, tp = 0, dp = 0, pp = 0;
  double measured_s = 0;
  double predicted_s = 0;
  bool feasible = true;
  std::string why;  // when infeasible
};

// One of the two CSV files; `multi_node` for ground_truth_multi.csv (its first column is the
// model's size). Throws core::ConfigError naming the file and line of a malformed row, or of one
// that cannot have run (heads not dividing the width, degrees not filling the GPUs, a batch that
// does not divide).
[[nodiscard]] std::vector<VtrainRow> read_vtrain_csv(const std::filesystem::path& path, bool multi_node);
// The same from `lines`, named `origin` in errors.
[[nodiscard]] std::vector<VtrainRow> read_vtrain_csv(std::istream& lines, const std::string& origin, bool multi_node);
// The cluster vTrain measured on, `gpus` GPUs; `intra_node` replaces the profile's NVLink rate
// (the README's 150 GB/s is vTrain's simulator parameter, not a measurement).
[[nodiscard]] spec::ClusterSpec vtrain_cluster(int gpus, std::optional<core::BytesPerSecond> intra_node = {});
// Fills predicted_s (or feasible = false and why) with cost::evaluate under `options`, with the
// data set's precision, attention and DP overlap.
void predict_vtrain(VtrainRow& row, cost::CostModelOptions options,
                    std::optional<core::BytesPerSecond> intra_node = {});
// Mean absolute percentage error over the rows (an infeasible row counts as 100%), as a fraction.
[[nodiscard]] double vtrain_mape(std::vector<VtrainRow>& rows, const cost::CostModelOptions& options,
                                 std::optional<core::BytesPerSecond> intra_node = {});
// Every row of DIR's two files, groups "vTrain multi-node A100-80GB fp16" and "vTrain
// single-node A100-80GB fp16", metric "step_time_s".
[[nodiscard]] std::vector<RunCheck> check_vtrain_runs(const std::filesystem::path& dir,
                                                      const cost::CostModelOptions& options,
                                                      std::optional<spec::Runtime> runtime = std::nullopt);

}  // namespace cpt::planner
