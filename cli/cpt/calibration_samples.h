#pragma once
// What cpt calibrate reads from the executor's measurements (cpt-exec calibrate-host and
// calibrate-comm JSON) and writes into its report: the samples the fits of
// costmodel/calibration_fit.h take, the collectives' α–β fit into a LocalCalibration, and the
// arithmetic that averages the probes of several processes.
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "cli/cpt/local_profile.h"
#include "costmodel/calibration_fit.h"
#include "spec/hardware_spec.h"

namespace cpt::cli {

using CalibrationJson = nlohmann::ordered_json;

// An efficiency curve in the report: [{gflop, efficiency}, ...].
CalibrationJson curve_json(const std::vector<spec::EfficiencyPoint>& points);
// A collective sample's op, as cpt-exec calibrate-comm names it; RuntimeError for another name.
spec::LinkCall op_of(const std::string& name);

// Adds every floating-point number of `b` to `sum`'s at the same place (two runs of the same
// probe: same keys, same array lengths, same integers); scale_floats multiplies them by `factor`.
void accumulate(CalibrationJson& sum, const CalibrationJson& b);
void scale_floats(CalibrationJson& j, double factor);

// The GEMM samples of calibrate-host's JSON, as calibration_fit.h takes them.
std::vector<cost::GemmSample> gemm_samples(const CalibrationJson& host);
// The attention samples (forward and backward in one curve; FLOPs in the cost model's causal
// convention, costmodel/layer_costs.h).
std::vector<cost::GemmSample> attention_samples(const CalibrationJson& host);
std::vector<spec::CrossEntropyPoint> cross_entropy_points(const CalibrationJson& host);
// The collective samples of calibrate-comm's JSON.
std::vector<cost::CollectiveSample> collective_samples(const CalibrationJson& comm);
// The per-ring-step latency of calibrate-comm's scalar all-reduce (spec::NodeSpec::
// scalar_all_reduce_step_latency): its seconds over 2(n − 1) steps; 0 where it was not measured.
double scalar_all_reduce_step_s(const CalibrationJson& comm);
// The node's α–β pair and each call's own (spec::NodeSpec::intra_measured), fitted into `c`;
// returns whether the pair was fitted to the all-reduces alone (calibration_samples.cpp says why).
bool fit_collectives(const std::vector<cost::CollectiveSample>& samples, LocalCalibration& c);

}  // namespace cpt::cli
