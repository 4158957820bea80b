// cpt calibrate [--device cpu|cuda] [--out FILE] [--ranks N] [--seconds S]: measure this machine
// through the executor (LibTorch GEMMs, attention, cross-entropy, memory bandwidth, AdamW, and the
// collectives of its own backend: Gloo among N local ranks, or NCCL among the GPUs), fit the cost
// model's parameters (costmodel/calibration_fit.h) and write the machine as a cluster profile that
// `--gpu local` and `--cluster FILE` accept (cli/cpt/local_profile.h).
#include <CLI/CLI.hpp>
#include <algorithm>
#include <cmath>
#include <fstream>
#include <cstdlib>
#include <future>
#include <iostream>
#include <nlohmann/json.hpp>
#include <thread>

#include "cli/numeric_flags.h"
#include "cli/cpt/calibrate_cuda.h"
#include "cli/cpt/calibrate_from_runs.h"
#include "cli/cpt/calibration_samples.h"
#include "cli/cpt/calibration_summary.h"
#include "cli/cpt/commands.h"
#include "cli/executor_process.h"
#include "cli/cpt/local_profile.h"
#include "cli/output.h"
#include "core/atomic_file.h"
#include "core/error.h"
#include "core/json_reader.h"
#include "core/output_directory.h"
#include "core/str_cat.h"
#include "costmodel/cost_options.h"
#include "costmodel/straggler.h"
#include "spec/gpu_for_device_name.h"
#include "spec/hardware_catalog.h"
#include "spec/hardware_io.h"
#include "spec/host_measurements.h"

namespace cpt::cli {

namespace {

using core::str_cat;
using Json = nlohmann::ordered_json;
namespace fs = std::filesystem;

struct CalibrateOptions {
  std::string device = "cpu";
  std::string out;
  int ranks = 0;
  double seconds = 20;
  bool json = false;
  std::vector<std::string> from_runs;
  std::string base;
  std::string base_gpu;      // --device cuda: the catalog GPU to start from (default: by device name)
  std::string measurements;  // --device cuda: fit these (a report of an earlier run) instead of measuring
};

// The host probe run by `ranks` processes at once, each with `threads` threads — the machine as
// `cpt train` shares it among its local ranks (on a small VM two busy ranks each run ~20% slower
// than one alone: shared caches, memory bandwidth and the hypervisor) — and the mean of their
// measurements. The processes run each measurement in step (calibrate-host --together-dir), so
// every one is taken with all of them busy.
spec::HostMeasurements measure_hosts_together(int ranks, double seconds, int threads) {
  std::string pattern = (fs::temp_directory_path() / "cpt-calibrate-XXXXXX").string();
  if (::mkdtemp(pattern.data()) == nullptr) throw core::RuntimeError(str_cat("calibrate: cannot create ", pattern));
  const fs::path together(pattern);
  struct RemoveOnExit {
    fs::path dir;
    ~RemoveOnExit() {
      std::error_code ignored;
      fs::remove_all(dir, ignored);
    }
  } remove_on_exit{together};
  std::vector<std::future<Json>> runs;
  for (int r = 0; r < ranks; ++r) {
    std::vector<std::string> args{"calibrate-host",        "--seconds",        fixed(seconds, 2),    "--threads",
                                  std::to_string(threads), "--together-dir",   together.string(),    "--together-rank",
                                  std::to_string(r),       "--together-ranks", std::to_string(ranks)};
    if (r > 0) args.emplace_back("--quiet");
    runs.push_back(std::async(std::launch::async, [args] { return run_executor_json(args); }));
  }
  std::vector<spec::HostMeasurements> results;
  std::exception_ptr failed;
  for (std::size_t r = 0; r < runs.size(); ++r) {
    try {
      results.push_back(
          spec::host_measurements_from_json(runs[r].get(), str_cat("cpt-exec calibrate-host (process ", r, ")")));
    } catch (...) {
      if (!failed) failed = std::current_exception();
    }
  }
  if (failed) std::rethrow_exception(failed);
  return spec::average(results);
}

// The compute jitter: the extra waits after compute, least squares through the origin on
// e_n · √(segment) (costmodel/straggler.h); -1 where not measured.
double fit_compute_jitter(const Json& sync_waits, int ranks) {
  if (sync_waits.empty()) return -1;
  const double e = cost::expected_max_of_normals(ranks);
  double xy = 0, xx = 0;
  for (const auto& w : sync_waits) {
    const double x = e * std::sqrt(w["segment_s"].get<double>());
    xy += x * w["extra_wait_s"].get<double>();
    xx += x * x;
  }
  return xx > 0 ? std::max(0.0, xy / xx) : 0.0;
}

// `ranks` ranks of `threads` threads as calibrate-host and calibrate-comm measured them, fitted;
// and whether the collectives' pair was fitted to the all-reduces alone (fit_collectives).
struct CpuCalibration {
  LocalCalibration fitted;
  std::vector<cost::CollectiveSample> collective_samples;  // what the link's pair was fitted to
  bool collectives_fitted_on_all_reduce = false;
};

CpuCalibration fit_cpu(const spec::HostMeasurements& host, const Json& comm, int ranks, int threads) {
  CpuCalibration calibration;
  calibration.fitted = fit_host(host, ranks);
  LocalCalibration& c = calibration.fitted;
  calibration.collective_samples = collective_samples(comm);
  calibration.collectives_fitted_on_all_reduce = fit_collectives(calibration.collective_samples, c);
  c.scalar_all_reduce_step_s = scalar_all_reduce_step_s(comm);
  c.compute_jitter_sqrt_s = fit_compute_jitter(comm.value("sync_waits", Json::array()), ranks);
  // Compute beside an in-flight collective (collective_probe.h's OverlapMeasurement), capped at 4,
  // the most a profile accepts (a machine that loses more has other troubles).
  const Json overlap = comm.value("overlap", Json());
  if (overlap.is_object()) c.overlap_slowdown = std::min(4.0, overlap.at("slowdown").get<double>());
  // Resuming from a blocking call (collective_probe.h's ResumeMeasurement), where every rank has
  // its cores: with more ranks than cores the ranks that wait hand theirs to the others, and the
  // work after a call runs faster than back to back (four ranks on this VM's two cores: "lost" 0).
  const Json resume = comm.value("resume", Json());
  const bool ranks_share_cores = ranks * threads > c.cores;
  if (resume.is_object() && !ranks_share_cores) c.resume_s = std::min(0.1, resume.at("lost_per_call_s").get<double>());
  return calibration;
}

// Each collective's rms relative error under the node's one α–β pair.
Json collective_errors(const std::vector<cost::CollectiveSample>& samples, const LocalCalibration& c) {
  Json per_op = Json::object();
  for (const auto op : spec::kAllLinkCalls) {
    double sq = 0;
    int n = 0;
    for (const auto& s : samples) {
      if (s.op != op) continue;
      const auto [cf, ff] = cost::alpha_beta_factors(s.op, s.ranks);
      const double t = cf * c.comm.alpha_s + ff * s.bytes / c.comm.bandwidth_bytes_per_s;
      sq += std::pow((t - s.seconds) / s.seconds, 2);
      ++n;
    }
    per_op[spec::to_string(op)] = n ? std::sqrt(sq / n) : 0.0;
  }
  return per_op;
}

Json fitted_curves_json(const LocalCalibration& c) {
  Json per_call = Json::object();
  for (const auto call : spec::kAllLinkCalls) {
    if (const auto& f = c.per_call[static_cast<std::size_t>(call)]) {
      per_call[spec::to_string(call)] = {{"alpha_s", f->alpha_s},
                                         {"bandwidth_bytes_per_s", f->bandwidth_bytes_per_s},
                                         {"rms_relative_error", f->rms_relative_error}};
    }
  }
  Json by_min_dim = Json::array();
  for (const auto& shaped : c.gemm_by_min_dim) {
    by_min_dim.push_back({{"min_dim", shaped.min_dim}, {"efficiency", curve_json(shaped.points)}});
  }
  Json ce_rates = Json::array();
  for (const auto& p : c.cross_entropy_rates) {
    ce_rates.push_back({{"logits", p.logits},
                        {"forward_logits_per_s", p.forward_logits_per_s},
                        {"backward_logits_per_s", p.backward_logits_per_s}});
  }
  return {{"per_call", per_call}, {"by_min_dim", by_min_dim}, {"cross_entropy_rates", ce_rates}};
}

// The fitted parameters, the fit's errors and the raw measurements, written beside the profile.
Json cpu_report(const fs::path& out, const CpuCalibration& calibration, const spec::HostMeasurements& host,
                const Json& comm) {
  const LocalCalibration& c = calibration.fitted;
  const Json fitted = fitted_curves_json(c);
  return {{"profile", out.string()},
          {"cores", c.cores},
          {"threads_per_rank", c.threads},
          {"ranks", c.devices},
          {"gemm_peak_flops_per_s", c.gemm.peak_flops_per_s},
          {"gemm_efficiency", curve_json(c.gemm.curve)},
          {"gemm_efficiency_by_min_dim", fitted["by_min_dim"]},
          {"attention_efficiency", curve_json(c.attention.curve)},
          {"cross_entropy_rates", fitted["cross_entropy_rates"]},
          {"kernel_overhead_s", c.seconds_per_dispatched_op},
          {"copy_bytes_per_s", c.copy_bytes_per_s},
          {"adamw_params_per_s", host.adamw_params_per_s},
          {"collective_alpha_s", c.comm.alpha_s},
          {"compute_jitter_sqrt_s", c.compute_jitter_sqrt_s},
          {"sync_waits", comm.value("sync_waits", Json::array())},
          {"overlap_compute_slowdown", c.overlap_slowdown},
          {"overlap", comm.value("overlap", Json())},
          {"compute_lost_resuming_from_call_s", c.resume_s},
          {"resume", comm.value("resume", Json())},
          {"collective_bandwidth_bytes_per_s", c.comm.bandwidth_bytes_per_s},
          {"collective_fit_on", calibration.collectives_fitted_on_all_reduce ? "all_reduce" : "all"},
          {"collective_fit_rms_relative_error", c.comm.rms_relative_error},
          {"collective_fit_rms_relative_error_per_op", collective_errors(calibration.collective_samples, c)},
          {"collective_fit_per_call", fitted["per_call"]},
          {"scalar_all_reduce_step_s", c.scalar_all_reduce_step_s},
          {"host", spec::to_json(host)},
          {"collectives", comm}};
}

void run(const CalibrateOptions& o) {
  if (!o.from_runs.empty()) {
    refit_from_runs(FromRunsOptions{o.from_runs, o.base, o.out, o.json});
    return;
  }
  if (o.device == "cuda") {
    calibrate_cuda(CudaCalibrationOptions{o.out, o.base_gpu, o.measurements, o.seconds, o.json});
    return;
  }
  if (!find_executor())
    throw core::RuntimeError("`cpt calibrate` needs the LibTorch executor (run scripts/setup and rebuild)");
  const int cores = std::max(1, static_cast<int>(std::thread::hardware_concurrency()));
  const int ranks = o.ranks > 0 ? o.ranks : std::max(2, cores);
  const int threads = std::max(1, cores / ranks);
  std::cerr << str_cat("calibrate: ", cores, " cores, ", ranks, " ranks of ", threads, " thread",
                       threads == 1 ? "" : "s", "; host measurements (", fixed(o.seconds * 0.7, 0),
                       " s), then collectives\n");
  const auto host = measure_hosts_together(ranks, o.seconds * 0.7, threads);
  const auto comm = run_executor_json({"calibrate-comm", "--nproc-per-node", std::to_string(ranks),
                                       "--seconds-per-point", fixed(std::max(0.02, o.seconds * 0.3 / 28), 3)});
  const CpuCalibration calibration = fit_cpu(host, comm, ranks, threads);
  const LocalCalibration& c = calibration.fitted;
  const fs::path out = o.out.empty() ? local_profile_path() : fs::path(o.out);
  core::prepare_output_file(out);
  core::write_file_atomic(out, spec::cluster_to_json(local_cluster(c)).dump(2) + "\n");
  const Json report = cpu_report(out, calibration, host, comm);
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
  std::cout << str_cat("calibrated ", out.string(), " (measurements and fit: ", report_path.string(), ")\n");
  print_calibration_summary(report, c);
  std::cout << str_cat("  use it: cpt plan --gpu local --gpus ", ranks, " ... (or --cluster ", out.string(), ")\n");
}

}  // namespace

void register_calibrate_command(CLI::App& app) {
  auto o = std::make_shared<CalibrateOptions>();
  auto* cmd = app.add_subcommand("calibrate", "Measure this machine and fit a hardware profile (--gpu local)");
  cmd->add_option("--device", o->device, "cpu (ranks of this machine's cores, Gloo) or cuda (its GPUs in bf16, NCCL)")
      ->check(CLI::IsMember({"cpu", "cuda"}))
      ->capture_default_str();
  cmd->add_option("--out", o->out,
                  "Profile to write (default: $CPT_LOCAL_PROFILE or hardware_profiles/calibration/local.json)");
  cmd->add_option("--ranks", o->ranks, "Executor ranks sharing this machine (default: its cores, at least 2)")
      ->check(cli::whole_number_in(2, 64));
  cmd->add_option("--seconds", o->seconds, "Time budget")->check(CLI::Range(2.0, 600.0))->capture_default_str();
  cmd->add_flag("--json", o->json, "Print the fitted parameters as JSON");
  cmd->add_option("--from-runs", o->from_runs,
                  "Instead of measuring: rescale a profile so that its predictions match these cpt train output "
                  "directories (their measured.json step parts)");
  cmd->add_option("--base", o->base, "with --from-runs: the profile to start from (default: the local profile)");
  cmd->add_option("--measurements", o->measurements,
                  "with --device cuda: fit a saved report (NAME.report.json of a GPU machine) instead of measuring");
  cmd->add_option(
      "--base-gpu", o->base_gpu,
      "with --device cuda: the catalog GPU whose datasheet and node to start from (default: by device name)");
  cmd->callback([o] { run(*o); });
}

}  // namespace cpt::cli
