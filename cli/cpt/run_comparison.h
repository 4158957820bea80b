// Predicted vs measured for one `cpt train` run directory: the run's plan re-priced as the executor
// ran it, beside OUT/measured.json, field by field (`cpt compare`, docs/calibration.md).
//
// The prediction is re-evaluated in the executor's regime: fp32 on the CPU (bf16 on a GPU), the
// continual recipe of the run's copy of TRAIN.json, the run's gradient bucket, and fp32 weights,
// gradients and AdamW moments for the model state (4 + 4 + 8 bytes per parameter: the executor
// keeps fp32 weights also under autocast).
#pragma once

#include <filesystem>
#include <optional>
#include <string>
#include <vector>
#include <nlohmann/json.hpp>

#include "spec/plan.h"

namespace cpt::cli {

// One compared quantity. Its relative error (predicted / measured − 1) is undefined where nothing
// was measured (a part this layout does not have).
struct ComparedField {
  std::string name;
  double predicted = 0;
  double measured = 0;
  [[nodiscard]] std::optional<double> relative_error() const;
};

struct RunComparison {
  spec::Plan plan;  // the run's plan, on --cluster's profile where one was given
  // In this order: step time and its parts; kernels, calls and bytes per step (where the run
  // recorded its dispatch); kinds of work (where it profiled a step, on a CPU); the model state
  // and the recipe's (weights, grads, optimizer, teacher, ewc bytes); on a GPU the peak memory.
  std::vector<ComparedField> fields;
  // The profiled step the kind_* fields come from: OUT/profile/step_S.rank_R.ops.json.
  std::optional<nlohmann::ordered_json> profile;
  // The run trained with packing "padded" (measured.json's `packing`): its steps are not the plan's.
  bool padded = false;

  // {NAME: {predicted, measured, rel_err}}, in the fields' order; rel_err null where undefined.
  [[nodiscard]] nlohmann::ordered_json fields_json() const;
};

// Compares the run in `run_dir`; `cluster` (a profile name or file, may be empty) replaces the
// plan's hardware. ConfigError naming the file where the directory is not a run, the profile has
// fewer devices than the run's ranks, or the cost model finds the plan infeasible.
RunComparison compare_run(const std::filesystem::path& run_dir, const std::string& cluster);

}  // namespace cpt::cli
