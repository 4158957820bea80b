#include "cli/cpt/calibrate_cuda.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>
#include <utility>
#include <vector>

#include "cli/cpt/calibration_samples.h"
#include "cli/executor_process.h"
#include "cli/cpt/local_profile.h"
#include "cli/output.h"
#include "core/atomic_file.h"
#include "core/error.h"
#include "core/json_reader.h"
#include "core/output_directory.h"
#include "core/str_cat.h"
#include "costmodel/cost_options.h"
#include "spec/gpu_for_device_name.h"
#include "spec/hardware_catalog.h"
#include "spec/hardware_io.h"
#include "spec/host_measurements.h"

namespace cpt::cli {

namespace {

using core::str_cat;
using Json = nlohmann::ordered_json;
namespace fs = std::filesystem;

// What the fit takes: calibrate-host's measurements, calibrate-comm's JSON (null with one GPU) and
// the devices.
struct CudaMeasurements {
  spec::HostMeasurements host;
  Json comm;
  int devices = 0;
};

// The collectives of a saved report: null, or calibrate-comm's JSON with every sample whole.
void check_collective_measurements(const Json& comm, const std::string& file) {
  if (comm.is_null()) return;
  if (!(comm.is_object() && comm.contains("samples") && comm["samples"].is_array())) {
    throw core::ConfigError(str_cat("--measurements: ", file,
                                    ": $.collectives: expected calibrate-comm's JSON ({\"samples\": [...]}) or null"));
  }
  std::vector<std::string> ops;
  for (const auto call : spec::kAllLinkCalls) ops.push_back(spec::to_string(call));
  for (std::size_t i = 0; i < comm["samples"].size(); ++i) {
    core::JsonObjectReader sample(comm["samples"][i], str_cat("--measurements: ", file),
                                  str_cat("$.collectives.samples[", i, "]"));
    (void)sample.one_of("op", ops);
    (void)sample.integer("ranks", 2);
    (void)sample.positive_number("bytes");
    (void)sample.positive_number("seconds");
  }
  if (comm.contains("scalar_all_reduce")) {
    core::JsonObjectReader scalar(comm["scalar_all_reduce"], str_cat("--measurements: ", file),
                                  "$.collectives.scalar_all_reduce");
    (void)scalar.integer("ranks", 2);
    (void)scalar.positive_number("bytes");
    (void)scalar.positive_number("seconds");
  }
}

// An earlier run's report (its "host" and "collectives"), or calibrate-host's JSON alone.
CudaMeasurements read_measurements(const std::string& file) {
  std::ifstream in(file);
  const auto j = Json::parse(in, nullptr, false);
  if (!in || j.is_discarded() || !j.is_object()) {
    throw core::ConfigError(str_cat("--measurements: ", file, ": expected the JSON of a calibration report"));
  }
  CudaMeasurements m;
  const Json& host = j.contains("host") ? j["host"] : j;
  if (host.value("device", std::string()).rfind("cuda", 0) != 0 || !host.contains("gemm")) {
    throw core::ConfigError(str_cat("--measurements: ", file, ": $.host.device: expected a CUDA device's ",
                                    "measurements, found \"", host.value("device", std::string("none")), "\""));
  }
  // Every number the fit reads, strictly: a one-line ConfigError naming the file and the first
  // missing, misspelt or mistyped key (not a JSON exception, exit 1).
  m.host = spec::host_measurements_from_json(host, str_cat("--measurements: ", file), "$.host");
  for (const auto& [key, empty] :
       {std::pair{"attention", m.host.attention.empty()}, std::pair{"cross_entropy", m.host.cross_entropy.empty()}}) {
    if (empty) {
      throw core::ConfigError(str_cat("--measurements: ", file, ": $.host.", key,
                                      ": expected a non-empty array of measurements, got an empty array"));
    }
  }
  m.comm = j.value("collectives", Json(nullptr));
  check_collective_measurements(m.comm, file);
  m.devices = j.value("devices", std::max(1, m.host.cuda_devices));
  return m;
}

// This machine's first GPU, and NCCL's collectives among all of them where there are two or more.
CudaMeasurements measure(double seconds) {
  if (!find_executor())
    throw core::RuntimeError("`cpt calibrate` needs the LibTorch executor (run scripts/setup and rebuild)");
  const auto info = run_executor_json({"info", "--json"});
  CudaMeasurements m;
  m.devices = info.value("cuda_devices", 0);
  if (!info.value("cuda_compiled", false) || m.devices < 1) {
    throw core::ConfigError(str_cat("--device cuda: cpt-exec sees no CUDA device (",
                                    info.value("cuda_compiled", false) ? "0 visible" : "a CPU-only LibTorch", ")"));
  }
  m.host = spec::host_measurements_from_json(
      run_executor_json({"calibrate-host", "--device", "cuda", "--seconds", fixed(seconds * 0.7, 1)}),
      "cpt-exec calibrate-host");
  m.comm = nullptr;
  if (m.devices >= 2) {
    m.comm =
        run_executor_json({"calibrate-comm", "--device", "cuda", "--nproc-per-node", std::to_string(m.devices),
                           "--max-mib", "256", "--seconds-per-point", fixed(std::max(0.02, seconds * 0.3 / 36), 3)});
  }
  return m;
}

// The catalog GPU the profile starts from: --base-gpu, else the one the device's name names.
spec::GpuSpec base_gpu_of(const std::string& flag, const std::string& device_name) {
  const auto& cat = spec::HardwareCatalog::builtin();
  std::string name = flag;
  if (name.empty()) {
    const auto found = spec::gpu_for_device_name(device_name, cat);
    if (!found) {
      throw core::ConfigError(str_cat("--base-gpu: the device \"", device_name,
                                      "\" is no GPU of the catalog (cpt profiles list); name the closest one"));
    }
    name = *found;
  }
  return cat.gpu(name, "--base-gpu");
}

LocalCalibration fit(const CudaMeasurements& m, double peak) {
  LocalCalibration c = fit_host(m.host, m.devices, peak);
  if (m.comm.is_object() && m.comm.contains("samples")) {
    fit_collectives(collective_samples(m.comm), c);
    c.scalar_all_reduce_step_s = scalar_all_reduce_step_s(m.comm);
  }
  return c;
}

// A fitted curve beside the cost model's default at the measured sizes.
Json versus_catalog(const std::vector<spec::EfficiencyPoint>& measured, const cost::EfficiencyCurve& catalog) {
  Json rows = Json::array();
  for (const auto& p : measured) {
    rows.push_back({{"gflop", p.gflops},
                    {"measured_efficiency", p.efficiency},
                    {"catalog_efficiency", catalog.at(p.gflops * 1e9)}});
  }
  return rows;
}

Json report_of(const fs::path& out, const std::string& device_name, const spec::GpuSpec& gpu, const CudaMeasurements& m,
               const LocalCalibration& c) {
  const cost::CostModelOptions defaults;
  const double peak = gpu.peak(spec::Precision::kBf16)->value();
  return {{"profile", out.string()},
          {"device_name", device_name},
          {"base_gpu", gpu.name},
          {"devices", m.devices},
          {"datasheet_bf16_flops_per_s", peak},
          {"fastest_gemm_flops_per_s", cost::fit_gemm_curve(gemm_samples(m.host)).peak_flops_per_s},
          {"gemm_efficiency_vs_catalog", versus_catalog(c.gemm.curve, defaults.gemm_efficiency)},
          {"attention_efficiency_vs_catalog", versus_catalog(c.attention.curve, defaults.attention_efficiency)},
          {"copy_bytes_per_s", c.copy_bytes_per_s},
          {"catalog_copy_bytes_per_s", gpu.hbm_bandwidth.value() * defaults.hbm_efficiency},
          {"adamw_params_per_s", m.host.adamw_params_per_s},
          {"kernel_overhead_s_measured_not_applied", c.seconds_per_dispatched_op},
          {"collectives_measured", m.comm.is_object() && m.comm.contains("samples")},
          {"host", spec::to_json(m.host)},
          {"collectives", m.comm}};
}

std::string efficiencies_text(const Json& versus) {
  std::string text;
  for (const auto& v : versus) {
    text += str_cat(" ", fixed(v["measured_efficiency"].get<double>(), 2), "/",
                    fixed(v["catalog_efficiency"].get<double>(), 2), "@", fixed(v["gflop"].get<double>(), 1), "GF");
  }
  return text;
}

void print_summary(const Json& report, const fs::path& report_path, const LocalCalibration& c) {
  const int devices = report["devices"].get<int>();
  const double peak = report["datasheet_bf16_flops_per_s"].get<double>();
  std::cout << str_cat(
      "calibrated ", report["profile"].get<std::string>(), ": ", devices, " x ",
      report["device_name"].get<std::string>(), " on the catalog's ", report["base_gpu"].get<std::string>(),
      " (measurements and fit: ", report_path.string(), ")\n", "  bf16 GEMM: fastest ",
      fixed(report["fastest_gemm_flops_per_s"].get<double>() / 1e12, 0), " TFLOP/s of the datasheet's ",
      fixed(peak / 1e12, 0),
      "; efficiency measured / catalog:", efficiencies_text(report["gemm_efficiency_vs_catalog"]),
      "\n  attention efficiency measured / catalog:", efficiencies_text(report["attention_efficiency_vs_catalog"]),
      "\n  memory copy ", fixed(c.copy_bytes_per_s / 1e9, 0), " GB/s (catalog assumes ",
      fixed(report["catalog_copy_bytes_per_s"].get<double>() / 1e9, 0), "); AdamW ",
      fixed(report["adamw_params_per_s"].get<double>() / 1e9, 2), " G parameters/s; ",
      fixed(c.seconds_per_dispatched_op * 1e6, 1), " us per dispatched operator (not applied)\n",
      report["collectives_measured"].get<bool>()
          ? str_cat("  collectives (NCCL, ", devices, " GPUs): alpha ", fixed(c.comm.alpha_s * 1e6, 1),
                    " us per step, bandwidth ", fixed(c.comm.bandwidth_bytes_per_s / 1e9, 0), " GB/s\n")
          : std::string("  collectives: not measured (one GPU), kept the catalog's node links\n"),
      "  use it: cpt plan --gpu local --gpus ", devices, " ... (or --cluster ", report["profile"].get<std::string>(),
      ")\n");
}

}  // namespace

void calibrate_cuda(const CudaCalibrationOptions& o) {
  const CudaMeasurements m = o.measurements.empty() ? measure(o.seconds) : read_measurements(o.measurements);
  const std::string device_name = m.host.device_name;
  const spec::GpuSpec gpu = base_gpu_of(o.base_gpu, device_name);
  const auto base = spec::HardwareCatalog::builtin().cluster_for_gpu(gpu.name, 1, "--base-gpu");
  const LocalCalibration c = fit(m, gpu.peak(spec::Precision::kBf16)->value());
  const fs::path out = o.out.empty() ? local_profile_path() : fs::path(o.out);
  core::prepare_output_file(out);
  core::write_file_atomic(out, spec::cluster_to_json(calibrated_gpu_cluster(c, base, device_name)).dump(2) + "\n");
  const Json report = report_of(out, device_name, gpu, m, c);
  auto report_path = out;
  report_path.replace_extension(".report.json");
  core::write_file_atomic(report_path, report.dump(2) + "\n");
  if (o.json) {
    Json brief = report;
    brief.erase("host");
    brief.erase("collectives");
    print_json(brief);
    return;
  }
  print_summary(report, report_path, c);
}

}  // namespace cpt::cli
