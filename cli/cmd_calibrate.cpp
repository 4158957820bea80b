// cpt calibrate [--device cpu] [--out FILE] [--ranks N] [--seconds S]: measure this machine through
// the executor (LibTorch GEMMs, memory bandwidth, AdamW, Gloo collectives among N local ranks), fit
// the cost model's parameters (costmodel/calibration_fit.h) and write the machine as a cluster
// profile that `--gpu local` and `--cluster FILE` accept (cli/local_profile.h).
#include <CLI/CLI.hpp>
#include <cmath>
#include <iostream>
#include <nlohmann/json.hpp>
#include <thread>

#include "cli/commands.h"
#include "cli/executor_process.h"
#include "cli/local_profile.h"
#include "cli/output.h"
#include "core/atomic_file.h"
#include "core/error.h"
#include "core/str_cat.h"
#include "spec/hardware_io.h"

namespace cpt::cli {

namespace {

using core::str_cat;
using Json = nlohmann::json;
namespace fs = std::filesystem;

struct CalibrateOptions {
  std::string device = "cpu";
  std::string out;
  int ranks = 0;
  double seconds = 20;
  bool json = false;
};

Json executor_json(const std::vector<std::string>& args) {
  auto r = run_executor(args);
  if (r.exit_code != 0) throw core::RuntimeError(str_cat("`cpt-exec ", args.front(), "` failed (exit ", r.exit_code, ")"));
  return Json::parse(r.out);
}

cost::MeasuredOp op_of(const std::string& s) {
  if (s == "all_reduce") return cost::MeasuredOp::kAllReduce;
  if (s == "all_gather") return cost::MeasuredOp::kAllGather;
  if (s == "reduce_scatter") return cost::MeasuredOp::kReduceScatter;
  return cost::MeasuredOp::kSendRecv;
}

std::string fixed(double v, int digits) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*f", digits, v);
  return buf;
}

void run(const CalibrateOptions& o) {
  if (o.device != "cpu") {
    throw core::ConfigError(str_cat("--device ", o.device, ": only cpu is calibrated so far (a CUDA calibration needs ",
                                    "the GPU build and a GPU; issue #9)"));
  }
  if (!find_executor()) throw core::RuntimeError("`cpt calibrate` needs the LibTorch executor (run scripts/setup and rebuild)");
  const int cores = std::max(1, static_cast<int>(std::thread::hardware_concurrency()));
  const int ranks = o.ranks > 0 ? o.ranks : std::max(2, cores);
  const int threads = std::max(1, cores / ranks);
  std::cerr << str_cat("calibrate: ", cores, " cores, ", ranks, " ranks of ", threads, " thread", threads == 1 ? "" : "s",
                       "; host measurements (", fixed(o.seconds * 0.7, 0), " s), then collectives\n");
  const auto host = executor_json({"calibrate-host", "--seconds", fixed(o.seconds * 0.7, 2), "--threads",
                                   std::to_string(threads)});
  const auto comm = executor_json({"calibrate-comm", "--nproc-per-node", std::to_string(ranks), "--seconds-per-point",
                                   fixed(std::max(0.02, o.seconds * 0.3 / 28), 3)});
  LocalCalibration c;
  c.cores = host["cores"].get<int>();
  c.threads = host["threads"].get<int>();
  c.devices = ranks;
  c.memory_bytes = host["memory_bytes"].get<double>();
  c.copy_bytes_per_s = host["copy_bytes_per_s"].get<double>();
  std::vector<cost::GemmSample> gemm;
  for (const auto& g : host["gemm"]) {
    const double flop = 2.0 * g["m"].get<double>() * g["n"].get<double>() * g["k"].get<double>();
    gemm.push_back({flop / 1e9, flop / g["seconds"].get<double>()});
  }
  c.gemm = cost::fit_gemm_curve(gemm);
  std::vector<cost::CollectiveSample> samples;
  for (const auto& s : comm["samples"]) {
    samples.push_back({op_of(s["op"].get<std::string>()), s["ranks"].get<int>(), s["bytes"].get<double>(),
                       s["seconds"].get<double>()});
  }
  // One α–β pair describes every collective in the cost model. Gloo's all-reduce carries a much
  // larger fixed cost than its all-gather or reduce-scatter, so a joint fit predicts none of them
  // well; the pair is fitted to the all-reduces (what data- and tensor-parallel steps spend most
  // calls on) and the error of every op against it is reported.
  std::vector<cost::CollectiveSample> all_reduce;
  for (const auto& s : samples) {
    if (s.op == cost::MeasuredOp::kAllReduce) all_reduce.push_back(s);
  }
  c.comm = cost::fit_alpha_beta(all_reduce.size() >= 2 ? all_reduce : samples);
  const auto cluster = local_cluster(c);
  const fs::path out = o.out.empty() ? local_profile_path() : fs::path(o.out);
  if (out.has_parent_path()) fs::create_directories(out.parent_path());
  core::write_file_atomic(out, spec::cluster_to_json(cluster).dump(2) + "\n");
  // The raw measurements and the fit's errors, beside the profile.
  Json per_op = Json::object();
  for (const auto op : {cost::MeasuredOp::kAllReduce, cost::MeasuredOp::kAllGather, cost::MeasuredOp::kReduceScatter,
                        cost::MeasuredOp::kSendRecv}) {
    double sq = 0;
    int n = 0;
    for (const auto& s : samples) {
      if (s.op != op) continue;
      const auto [cf, ff] = cost::alpha_beta_factors(s.op, s.ranks);
      const double t = cf * c.comm.alpha_s + ff * s.bytes / c.comm.bandwidth_bytes_per_s;
      sq += std::pow((t - s.seconds) / s.seconds, 2);
      ++n;
    }
    per_op[cost::to_string(op)] = n ? std::sqrt(sq / n) : 0.0;
  }
  Json curve = Json::array();
  for (const auto& p : c.gemm.curve) curve.push_back({{"gflop", p.gflops}, {"efficiency", p.efficiency}});
  const Json report{{"profile", out.string()},
                    {"cores", c.cores},
                    {"threads_per_rank", c.threads},
                    {"ranks", c.devices},
                    {"gemm_peak_flops_per_s", c.gemm.peak_flops_per_s},
                    {"gemm_efficiency", curve},
                    {"copy_bytes_per_s", c.copy_bytes_per_s},
                    {"adamw_params_per_s", host["adamw_params_per_s"]},
                    {"collective_alpha_s", c.comm.alpha_s},
                    {"collective_bandwidth_bytes_per_s", c.comm.bandwidth_bytes_per_s},
                    {"collective_fit_on", all_reduce.size() >= 2 ? "all_reduce" : "all"},
                    {"collective_fit_rms_relative_error", c.comm.rms_relative_error},
                    {"collective_fit_rms_relative_error_per_op", per_op},
                    {"host", host},
                    {"collectives", comm}};
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
  std::cout << str_cat("calibrated ", out.string(), " (measurements and fit: ", report_path.string(), ")\n",
                       "  GEMM fp32 peak ", fixed(c.gemm.peak_flops_per_s / 1e9, 1), " GFLOP/s per rank (", c.threads,
                       " thread", c.threads == 1 ? "" : "s", "); efficiency");
  for (const auto& p : c.gemm.curve) std::cout << str_cat(" ", fixed(p.efficiency, 2), "@", fixed(p.gflops, 3), "GF");
  std::cout << str_cat("\n  memory copy ", fixed(c.copy_bytes_per_s / 1e9, 1), " GB/s; AdamW ",
                       fixed(host["adamw_params_per_s"].get<double>() / 1e6, 0), " M parameters/s\n",
                       "  collectives (Gloo, ", ranks, " ranks): alpha ", fixed(c.comm.alpha_s * 1e6, 0),
                       " us per step, bandwidth ", fixed(c.comm.bandwidth_bytes_per_s / 1e9, 2),
                       " GB/s (fitted to the all-reduces); rms error all_reduce ",
                       fixed(100 * per_op["all_reduce"].get<double>(), 0), "%, all_gather ",
                       fixed(100 * per_op["all_gather"].get<double>(), 0), "%, reduce_scatter ",
                       fixed(100 * per_op["reduce_scatter"].get<double>(), 0), "%, send_recv ",
                       fixed(100 * per_op["send_recv"].get<double>(), 0), "%\n",
                       "  use it: cpt plan --gpu local --gpus ", ranks, " ... (or --cluster ", out.string(), ")\n");
}

}  // namespace

void register_calibrate_command(CLI::App& app) {
  auto o = std::make_shared<CalibrateOptions>();
  auto* cmd = app.add_subcommand("calibrate", "Measure this machine and fit a hardware profile (--gpu local)");
  cmd->add_option("--device", o->device, "cpu (cuda: not built yet)")->check(CLI::IsMember({"cpu", "cuda"}))
      ->capture_default_str();
  cmd->add_option("--out", o->out, "Profile to write (default: $CPT_LOCAL_PROFILE or hardware_profiles/calibration/local.json)");
  cmd->add_option("--ranks", o->ranks, "Executor ranks sharing this machine (default: its cores, at least 2)")
      ->check(CLI::Range(2, 64));
  cmd->add_option("--seconds", o->seconds, "Time budget")->check(CLI::Range(2.0, 600.0))->capture_default_str();
  cmd->add_flag("--json", o->json, "Print the fitted parameters as JSON");
  cmd->callback([o] { run(*o); });
}

}  // namespace cpt::cli
