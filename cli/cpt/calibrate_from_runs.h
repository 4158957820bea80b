#pragma once
// `cpt calibrate --from-runs DIR...`: instead of measuring, rescale a profile's computation and
// communication so that the cost model's parts match what the executor measured in those runs
// (costmodel/calibration_fit.h, fit_run_scales), each run priced with its own continual recipe.
#include <string>
#include <vector>

namespace cpt::cli {

struct FromRunsOptions {
  std::vector<std::string> from_runs;  // cpt train output directories
  std::string base;                    // the profile to start from (default: the local profile)
  std::string out;                     // the profile to write (default: the local profile's path)
  bool json = false;                   // print the report as JSON
};

void refit_from_runs(const FromRunsOptions& o);

}  // namespace cpt::cli
