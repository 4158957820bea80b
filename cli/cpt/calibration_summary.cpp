#include "cli/cpt/calibration_summary.h"

#include <iostream>
#include <string>
#include <vector>

#include "cli/output.h"
#include "core/str_cat.h"
#include "spec/hardware_spec.h"

namespace cpt::cli {

namespace {

using core::str_cat;
using Json = nlohmann::ordered_json;

std::string efficiencies_text(const std::vector<spec::EfficiencyPoint>& points) {
  std::string text;
  for (const auto& p : points) text += str_cat(" ", fixed(p.efficiency, 2), "@", fixed(p.gflops, 3), "GF");
  return text;
}

// The compute lines of the summary: GEMMs, attention, cross-entropy, memory and AdamW.
void print_compute_summary(const Json& report, const LocalCalibration& c) {
  std::cout << str_cat("  GEMM fp32 peak ", fixed(c.gemm.peak_flops_per_s / 1e9, 1), " GFLOP/s per rank (", c.threads,
                       " thread", c.threads == 1 ? "" : "s", "); efficiency", efficiencies_text(c.gemm.curve));
  for (const auto& shaped : c.gemm_by_min_dim) {
    std::cout << str_cat("\n    smallest dimension ", fixed(shaped.min_dim, 0), ":", efficiencies_text(shaped.points));
  }
  std::cout << "\n  attention efficiency" << efficiencies_text(c.attention.curve);
  std::cout << "\n  cross-entropy M logits/s forward/backward";
  for (const auto& p : c.cross_entropy_rates) {
    std::cout << str_cat(" ", fixed(p.forward_logits_per_s / 1e6, 0), "/", fixed(p.backward_logits_per_s / 1e6, 0), "@",
                         fixed(p.logits / 1e6, 1), "M");
  }
  std::cout << str_cat("; ", fixed(c.seconds_per_dispatched_op * 1e6, 1), " us per dispatched operator\n");
  std::cout << str_cat("  memory copy ", fixed(c.copy_bytes_per_s / 1e9, 1), " GB/s; AdamW ",
                       fixed(report["adamw_params_per_s"].get<double>() / 1e6, 0), " M parameters/s\n");
}

// The collective lines of the summary: the α–β pair and its errors, each call apart, the scalar
// all-reduce.
void print_collective_summary(const Json& report, const LocalCalibration& c) {
  const int ranks = c.devices;
  const Json& per_op = report["collective_fit_rms_relative_error_per_op"];
  std::cout << str_cat("  collectives (Gloo, ", ranks, " ranks): alpha ", fixed(c.comm.alpha_s * 1e6, 0),
                       " us per step, bandwidth ", fixed(c.comm.bandwidth_bytes_per_s / 1e9, 2),
                       " GB/s (fitted to the all-reduces); rms error all_reduce ",
                       fixed(100 * per_op["all_reduce"].get<double>(), 0), "%, all_gather ",
                       fixed(100 * per_op["all_gather"].get<double>(), 0), "%, reduce_scatter ",
                       fixed(100 * per_op["reduce_scatter"].get<double>(), 0), "%, send_recv ",
                       fixed(100 * per_op["send_recv"].get<double>(), 0), "%\n");
  std::cout << "    each call apart (alpha us, GB/s, rms):";
  for (const auto call : spec::kAllLinkCalls) {
    if (const auto& f = c.per_call[static_cast<std::size_t>(call)]) {
      std::cout << str_cat(" ", spec::to_string(call), " ", fixed(f->alpha_s * 1e6, 0), ", ",
                           fixed(f->bandwidth_bytes_per_s / 1e9, 2), ", ", fixed(100 * f->rms_relative_error, 0), "%;");
    }
  }
  if (c.scalar_all_reduce_step_s > 0) {
    std::cout << str_cat("\n    scalar all-reduce (16 bytes): ", fixed(c.scalar_all_reduce_step_s * 1e6, 0),
                         " us per step (", fixed(2.0 * (ranks - 1) * c.scalar_all_reduce_step_s * 1e3, 2), " ms on ",
                         ranks, " ranks; the ring fit says ", fixed(2.0 * (ranks - 1) * c.comm.alpha_s * 1e3, 2), ")");
  }
  std::cout << "\n";
}

// The lines of what the ranks lose to one another: jitter, overlap, resuming from a call.
void print_interference_summary(const Json& report, const LocalCalibration& c) {
  const Json& overlap = report["overlap"];
  const Json& resume = report["resume"];
  std::cout << str_cat(
      report["sync_waits"].empty() ? std::string("  compute jitter not measured\n")
                                   : str_cat("  compute jitter ", fixed(c.compute_jitter_sqrt_s * 1e3, 2),
                                             " ms per sqrt(s): a blocking call waits for the slowest rank (",
                                             report["sync_waits"].size(), " compute lengths)\n"),
      c.overlap_slowdown < 0
          ? std::string("  overlap not measured\n")
          : str_cat("  overlap: computing beside an all-gather loses ", fixed(c.overlap_slowdown, 2),
                    " s per s of it (", fixed(overlap.at("gemm_s").get<double>() * 1e3, 0), " ms of GEMMs and ",
                    fixed(overlap.at("comm_s").get<double>() * 1e3, 0), " ms of calls took ",
                    fixed(overlap.at("overlapped_s").get<double>() * 1e3, 0), " ms overlapped)\n"),
      c.resume_s < 0
          ? str_cat("  resuming from a call not measured", resume.is_object() ? " (ranks share cores)" : "", "\n")
          : str_cat("  resuming from a blocking call loses ", fixed(c.resume_s * 1e6, 0), " us of compute per call (",
                    fixed(resume.at("segment_s").get<double>() * 1e3, 2), " ms of training-like work took ",
                    fixed(resume.at("after_call_s").get<double>() * 1e3, 2), " ms right after one)\n"));
}

}  // namespace

void print_calibration_summary(const Json& report, const LocalCalibration& fitted) {
  print_compute_summary(report, fitted);
  print_collective_summary(report, fitted);
  print_interference_summary(report, fitted);
}

}  // namespace cpt::cli
