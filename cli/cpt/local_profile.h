#pragma once
// This machine as a hardware profile: built by `cpt calibrate` from its measurements, written as a
// cluster JSON (hardware_profiles/calibration/local.json by default, or $CPT_LOCAL_PROFILE), and
// used wherever a GPU name is accepted as `--gpu local`.
//
// A "device" of the local profile is one executor rank with `threads` intra-op threads (the
// machine's cores shared by `devices` ranks); the node holds `devices` of them.
#include <array>
#include <nlohmann/json.hpp>
#include <filesystem>
#include <optional>
#include <string>

#include "costmodel/calibration_fit.h"
#include "spec/hardware_spec.h"

namespace cpt::cli {

struct LocalCalibration {
  int cores = 0;
  int threads = 0;              // per device
  int devices = 0;              // ranks the node holds (collectives measured among them)
  double memory_bytes = 0;      // of the whole machine
  double copy_bytes_per_s = 0;  // per rank, every rank copying at once
  cost::GemmFit gemm;
  std::vector<spec::GemmShapeCurve> gemm_by_min_dim;         // against gemm's peak; empty: not measured
  cost::GemmFit attention;                                   // against gemm's peak; empty curve: not measured
  std::vector<spec::CrossEntropyPoint> cross_entropy_rates;  // by size; empty: not measured
  double seconds_per_dispatched_op = 0;                      // 0: not measured (the cost model's default)
  cost::AlphaBetaFit comm;                                   // the node's link: fitted to the all-reduces
  std::array<std::optional<cost::AlphaBetaFit>, spec::kAllLinkCalls.size()>
      per_call;  // by spec::LinkCall, where fitted apart
  // An all-reduce of a few bytes inside the node, per ring step (spec::NodeSpec::
  // scalar_all_reduce_step_latency); 0: not measured.
  double scalar_all_reduce_step_s = 0;
  // σ of a rank's compute over T seconds is this · √T (costmodel/straggler.h); < 0: not measured.
  double compute_jitter_sqrt_s = -1;
  // Compute seconds lost per second of communication overlapped with it (spec::NodeSpec::
  // overlap_compute_slowdown); < 0: not measured.
  double overlap_slowdown = -1;
  // Compute lost resuming from a blocking call (spec::NodeSpec::compute_lost_resuming_from_call),
  // seconds; < 0: not measured.
  double resume_s = -1;
};

// One machine as a cluster: a node of `devices` copies of `gpu` joined at `intra_bandwidth` and
// `intra_latency`, no fabric to speak of (a loopback placeholder, never used by one node).
spec::ClusterSpec one_machine_cluster(const std::string& name, spec::GpuSpec gpu, int devices,
                                      core::BytesPerSecond intra_bandwidth, core::Seconds intra_latency);

// The profile of `c`. Peaks and bandwidths are stored so that the cost model's default
// efficiencies (hbm_efficiency, network_efficiency) turn them back into the measured rates.
spec::ClusterSpec local_cluster(const LocalCalibration& c);

// A CUDA machine as a profile (`cpt calibrate --device cuda`): `base` (the catalog's cluster of the
// same GPU model: its datasheet peaks, node and fabric) with this machine's `c.devices` GPUs and
// what was measured in place of the cost model's defaults: the bf16/fp16 GEMM efficiency curves
// (against the datasheet peak, which MFU is reported against), those by smallest dimension, the
// attention kernel's curve, the memory bandwidth, the cross-entropy rates, and, where collectives
// were measured (2 GPUs or more, NCCL), the node's link per call. The per-operator dispatch cost
// is reported but not applied: on a GPU it overlaps the kernels of a busy stream.
spec::ClusterSpec calibrated_gpu_cluster(const LocalCalibration& c, const spec::ClusterSpec& base,
                                         const std::string& device_name);

// $CPT_LOCAL_PROFILE, else hardware_profiles/calibration/local.json under the current directory.
std::filesystem::path local_profile_path();

// `--gpu NAME --gpus N`: the catalog's cluster, or for NAME "local" the calibrated profile with N of
// its devices (ConfigError naming `flag` when there is no calibration or N exceeds its devices).
spec::ClusterSpec cluster_for_gpu_flag(const std::string& gpu, int gpus, const std::string& flag);

// The local host as a one-device cluster from `cpt-exec probe-host`'s quick measurements (its
// "cores", "memory_bytes", "copy_bytes_per_s", "peak_flops_per_s", "gemm" and
// "seconds_per_dispatched_op"): what `cpt run` plans with when no calibrated profile exists.
spec::ClusterSpec probed_host_cluster(const nlohmann::ordered_json& probe);

}  // namespace cpt::cli
