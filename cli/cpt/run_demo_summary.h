#pragma once
// Step 6 of `cpt run`'s demonstration (cli/cpt/cmd_run.cpp): forgetting and adaptation from the
// continual run's evaluations, what `cpt forecast` predicted for its end from its first third
// beside what it measured, and the throughput predicted and measured; printed and written to
// OUT/summary.json.
#include <chrono>
#include <filesystem>

#include "spec/model_spec.h"
#include "spec/plan.h"

namespace cpt::cli {

struct DemoOutcome {
  std::filesystem::path out;  // the demo's directory: train/ holds the continual run
  int steps = 0;              // of the continual run
  spec::ModelSpec base_model, extended;
  spec::Plan plan;                 // the continual run's, with the cost model's prediction
  std::filesystem::path base_dir;  // the base model's run
  std::chrono::steady_clock::time_point started;
};

void summarize_demo(const DemoOutcome& outcome);

}  // namespace cpt::cli
