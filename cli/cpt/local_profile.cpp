#include "cli/cpt/local_profile.h"

#include <cctype>
#include <cstdlib>

#include "core/error.h"
#include "core/str_cat.h"
#include "costmodel/cost_options.h"
#include "spec/hardware_catalog.h"

namespace cpt::cli {

using core::str_cat;
namespace fs = std::filesystem;

spec::ClusterSpec one_machine_cluster(const std::string& name, spec::GpuSpec gpu, int devices,
                                      core::BytesPerSecond intra_bandwidth, core::Seconds intra_latency) {
  gpu.default_node = name + "_node";
  spec::NodeSpec n;
  n.name = gpu.default_node;
  n.display_name = str_cat("this machine, ", devices, " device", devices == 1 ? "" : "s");
  n.gpu = std::move(gpu);
  n.gpus_per_node = devices;
  n.intra_kind = spec::IntraNodeKind::kPcie;
  n.intra_bandwidth = intra_bandwidth;
  n.intra_latency = intra_latency;
  n.nics_per_node = 1;
  n.nic_bandwidth = core::BytesPerSecond(1.25e9);
  n.default_fabric = "loopback";
  spec::FabricSpec f;
  f.name = "loopback";
  f.display_name = "none (one machine)";
  f.link_bandwidth = core::BytesPerSecond(1.25e9);
  f.latency = core::Seconds(5e-5);
  f.switch_radix = 2;
  return spec::ClusterSpec{name, n, f, 1, devices};
}

spec::ClusterSpec local_cluster(const LocalCalibration& c) {
  const cost::CostModelOptions defaults;
  spec::GpuSpec g;
  g.name = "local";
  g.display_name = str_cat("this machine: one rank of ", c.threads, " thread", c.threads == 1 ? "" : "s", " (", c.cores,
                           " cores, calibrated fp32)");
  g.aliases = {"local-cpu"};
  g.hbm_capacity = core::Bytes(static_cast<std::int64_t>(c.memory_bytes / c.devices));
  // Measured by all ranks copying at once: each one's share of the machine's bandwidth.
  g.hbm_bandwidth = core::BytesPerSecond(c.copy_bytes_per_s / defaults.hbm_efficiency);
  // CPUs train in fp32; the profile format needs a bf16 figure, so it repeats the fp32 one (plans
  // for `local` evaluate in fp32).
  for (const auto p : {spec::Precision::kFp32, spec::Precision::kBf16}) {
    g.dense_peak[static_cast<std::size_t>(p)] = core::FlopsPerSecond(c.gemm.peak_flops_per_s);
    g.gemm_efficiency[static_cast<std::size_t>(p)] = c.gemm.curve;
    g.gemm_efficiency_by_min_dim[static_cast<std::size_t>(p)] = c.gemm_by_min_dim;
    g.attention_efficiency[static_cast<std::size_t>(p)] = c.attention.curve;
  }
  // Compute-bound on a CPU core (exponentials), so not divided among the ranks like the bandwidth.
  g.cross_entropy_rates = c.cross_entropy_rates;
  if (c.seconds_per_dispatched_op > 0) g.kernel_overhead = core::Seconds(c.seconds_per_dispatched_op);
  if (c.compute_jitter_sqrt_s >= 0) g.compute_jitter_sqrt_s = c.compute_jitter_sqrt_s;
  auto cluster = one_machine_cluster("local", g, c.devices,
                                     core::BytesPerSecond(c.comm.bandwidth_bytes_per_s / defaults.network_efficiency),
                                     core::Seconds(c.comm.alpha_s));
  for (std::size_t i = 0; i < c.per_call.size(); ++i) {
    if (const auto& f = c.per_call[i]) {
      cluster.node.intra_measured[i] = spec::MeasuredLink{
          core::Seconds(f->alpha_s), core::BytesPerSecond(f->bandwidth_bytes_per_s / defaults.network_efficiency)};
    }
  }
  if (c.scalar_all_reduce_step_s > 0)
    cluster.node.scalar_all_reduce_step_latency = core::Seconds(c.scalar_all_reduce_step_s);
  if (c.overlap_slowdown >= 0) cluster.node.overlap_compute_slowdown = c.overlap_slowdown;
  if (c.resume_s >= 0) cluster.node.compute_lost_resuming_from_call = core::Seconds(c.resume_s);
  // The ranks share the machine's cores; the rates above were measured with all of them computing.
  cluster.node.shared_cores = spec::SharedCores{c.cores, c.threads};
  return cluster;
}

spec::ClusterSpec calibrated_gpu_cluster(const LocalCalibration& c, const spec::ClusterSpec& base,
                                         const std::string& device_name) {
  const cost::CostModelOptions defaults;
  auto cluster = base;
  cluster.name = "local";
  cluster.num_nodes = 1;
  cluster.num_gpus = c.devices;
  auto& node = cluster.node;
  node.gpus_per_node = c.devices;
  node.display_name = str_cat("this machine: ", c.devices, " x ", device_name, " (node profile ", base.node.name, ")");
  auto& g = node.gpu;
  const std::string base_gpu = g.name;
  g.name = "local";
  g.aliases = {"local-gpu"};
  g.display_name = str_cat(device_name, " (calibrated bf16; datasheet from ", base_gpu, ")");
  for (const auto p : {spec::Precision::kBf16, spec::Precision::kFp16}) {
    g.gemm_efficiency[static_cast<std::size_t>(p)] = c.gemm.curve;
    g.gemm_efficiency_by_min_dim[static_cast<std::size_t>(p)] = c.gemm_by_min_dim;
    g.attention_efficiency[static_cast<std::size_t>(p)] = c.attention.curve;
  }
  g.hbm_bandwidth = core::BytesPerSecond(c.copy_bytes_per_s / defaults.hbm_efficiency);
  g.cross_entropy_rates = c.cross_entropy_rates;
  if (c.comm.samples > 0) {
    node.intra_bandwidth = core::BytesPerSecond(c.comm.bandwidth_bytes_per_s / defaults.network_efficiency);
    node.intra_latency = core::Seconds(c.comm.alpha_s);
    for (std::size_t i = 0; i < c.per_call.size(); ++i) {
      if (const auto& f = c.per_call[i]) {
        node.intra_measured[i] = spec::MeasuredLink{
            core::Seconds(f->alpha_s), core::BytesPerSecond(f->bandwidth_bytes_per_s / defaults.network_efficiency)};
      }
    }
    if (c.scalar_all_reduce_step_s > 0) node.scalar_all_reduce_step_latency = core::Seconds(c.scalar_all_reduce_step_s);
  }
  return cluster;
}

fs::path local_profile_path() {
  if (const char* p = std::getenv("CPT_LOCAL_PROFILE"); p != nullptr && *p != '\0') return p;
  return fs::path("hardware_profiles") / "calibration" / "local.json";
}

spec::ClusterSpec cluster_for_gpu_flag(const std::string& gpu, int gpus, const std::string& flag) {
  const auto& cat = spec::HardwareCatalog::builtin();
  if (gpu != "local") return cat.cluster_for_gpu(gpu, gpus, flag);
  const auto path = local_profile_path();
  if (!fs::exists(path)) {
    throw core::ConfigError(str_cat(flag, " local: no calibration at ", path.string(),
                                    " (run `cpt calibrate` first, or set CPT_LOCAL_PROFILE)"));
  }
  auto c = cat.load_cluster_file(path);
  if (gpus > c.node.gpus_per_node) {
    throw core::ConfigError(str_cat(flag, " local: ", path.string(), " describes ", c.node.gpus_per_node,
                                    " ranks on this machine, got --gpus ", gpus,
                                    " (calibrate with `cpt calibrate --ranks ", gpus, "`)"));
  }
  c.num_nodes = 1;
  c.num_gpus = gpus;
  return c;
}

// The local host as a one-device cluster, from the quick probe's measurements (used when no `cpt
// calibrate` profile exists).
spec::ClusterSpec probed_host_cluster(const nlohmann::ordered_json& probe) {
  spec::GpuSpec g;
  g.name = "host_cpu";
  g.display_name = str_cat("the local CPU (", probe["cores"].get<int>(), " cores, measured fp32)");
  g.aliases = {"host"};
  g.hbm_capacity = core::Bytes(static_cast<std::int64_t>(probe["memory_bytes"].get<double>()));
  g.hbm_bandwidth = core::BytesPerSecond(probe["copy_bytes_per_s"].get<double>());
  const double peak = probe["peak_flops_per_s"].get<double>();
  g.dense_peak[static_cast<std::size_t>(spec::Precision::kFp32)] = core::FlopsPerSecond(peak);
  // The profile format requires a bf16 figure; cpt trains in fp32 on CPUs and plans in fp32 here,
  // so it repeats the fp32 rate rather than inventing one.
  g.dense_peak[static_cast<std::size_t>(spec::Precision::kBf16)] = core::FlopsPerSecond(peak);
  for (const auto& s : probe["gemm"]) {
    g.gemm_efficiency[static_cast<std::size_t>(spec::Precision::kFp32)].push_back(
        {s["gflop"].get<double>(), s["flops_per_s"].get<double>() / peak});
  }
  // The executor's per-operator cost (the cost model's default is a GPU launch's).
  if (probe.contains("seconds_per_dispatched_op")) {
    g.kernel_overhead = core::Seconds(probe["seconds_per_dispatched_op"].get<double>());
  }
  return one_machine_cluster("this-machine", g, 1, g.hbm_bandwidth, core::Seconds(1e-5));
}

}  // namespace cpt::cli
