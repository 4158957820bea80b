#pragma once
// The console summary of `cpt calibrate` on the CPU: what was measured and fitted, in a few lines
// a person reads (the report JSON beside the profile has every number).

#include <nlohmann/json.hpp>

#include "cli/cpt/local_profile.h"

namespace cpt::cli {

// `report`: the calibration report cmd_calibrate writes (its "adamw_params_per_s",
// "collective_fit_rms_relative_error_per_op", "sync_waits", "overlap" and "resume"); `fitted`: the
// local calibration fitted from it. Prints the compute, collective and interference lines.
void print_calibration_summary(const nlohmann::ordered_json& report, const LocalCalibration& fitted);

}  // namespace cpt::cli
