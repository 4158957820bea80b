#pragma once
// What cpt calibrate reads from the executor's measurements (calibrate-host's, typed:
// spec/host_measurements.h; calibrate-comm's JSON) and writes into its report: the samples the
// fits of costmodel/calibration_fit.h take and the collectives' α–β fit into a LocalCalibration.
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "cli/cpt/local_profile.h"
#include "costmodel/calibration_fit.h"
#include "spec/host_measurements.h"
#include "spec/hardware_spec.h"

namespace cpt::cli {

using CalibrationJson = nlohmann::ordered_json;

// An efficiency curve in the report: [{gflop, efficiency}, ...].
CalibrationJson curve_json(const std::vector<spec::EfficiencyPoint>& points);
// A collective sample's op, as cpt-exec calibrate-comm names it; RuntimeError for another name.
spec::LinkCall op_of(const std::string& name);

// The GEMM samples of the measurements, as calibration_fit.h takes them.
std::vector<cost::GemmSample> gemm_samples(const spec::HostMeasurements& host);
// The attention samples (forward and backward in one curve; FLOPs in the cost model's causal
// convention, costmodel/layer_costs.h).
std::vector<cost::GemmSample> attention_samples(const spec::HostMeasurements& host);
std::vector<spec::CrossEntropyPoint> cross_entropy_points(const spec::HostMeasurements& host);
// The compute half of a calibration from `host`, on `devices` devices: the GEMM curve against
// `peak_flops_per_s` (0: the fastest GEMM measured), its shape curves and the attention curve
// against the same peak, the cross-entropy rates, the dispatch cost, memory and copy bandwidth.
// The collectives are fit_collectives'.
LocalCalibration fit_host(const spec::HostMeasurements& host, int devices, double peak_flops_per_s = 0);

// The collective samples of calibrate-comm's JSON.
std::vector<cost::CollectiveSample> collective_samples(const CalibrationJson& comm);
// The per-ring-step latency of calibrate-comm's scalar all-reduce (spec::NodeSpec::
// scalar_all_reduce_step_latency): its seconds over 2(n − 1) steps; 0 where it was not measured.
double scalar_all_reduce_step_s(const CalibrationJson& comm);
// The node's α–β pair and each call's own (spec::NodeSpec::intra_measured), fitted into `c`;
// returns whether the pair was fitted to the all-reduces alone (calibration_samples.cpp says why).
bool fit_collectives(const std::vector<cost::CollectiveSample>& samples, LocalCalibration& c);

}  // namespace cpt::cli
