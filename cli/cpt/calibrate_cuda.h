// `cpt calibrate --device cuda`: the first CUDA device measured in bf16 (cpt-exec calibrate-host
// --device cuda), NCCL's collectives among all visible devices when there are two or more, fitted
// as on the CPU, and written as the catalog's profile of the same GPU with the measurements in place
// of the defaults (local_profile.h, calibrated_gpu_cluster). The report (NAME.report.json beside the
// profile) sets the fitted curves beside the cost model's defaults for the catalog GPU (what plans
// for it use) at the measured sizes; `--measurements` fits a saved report instead of measuring.
#pragma once

#include <string>

namespace cpt::cli {

struct CudaCalibrationOptions {
  std::string out;           // the profile (default: the local profile)
  std::string base_gpu;      // the catalog GPU to start from (default: by device name)
  std::string measurements;  // fit this saved report instead of measuring
  double seconds = 20;       // time budget of the measurements
  bool json = false;         // print the report, less its raw measurements, as JSON
};

// ConfigError (one line naming the flag or file) for a report that is not a CUDA device's, a device
// the catalog does not know without --base-gpu, or no visible CUDA device; RuntimeError without
// the executor.
void calibrate_cuda(const CudaCalibrationOptions& options);

}  // namespace cpt::cli
