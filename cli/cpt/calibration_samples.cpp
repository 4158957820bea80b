#include "cli/cpt/calibration_samples.h"

#include <algorithm>
#include <cmath>
#include <iostream>

#include "core/error.h"
#include "core/str_cat.h"
#include "costmodel/layer_costs.h"

namespace cpt::cli {

using core::str_cat;
using Json = CalibrationJson;

// An efficiency curve in the report: [{gflop, efficiency}, ...].
Json curve_json(const std::vector<spec::EfficiencyPoint>& points) {
  Json out = Json::array();
  for (const auto& p : points) out.push_back({{"gflop", p.gflops}, {"efficiency", p.efficiency}});
  return out;
}

// A collective sample's op, as cpt-exec calibrate-comm names it.
spec::LinkCall op_of(const std::string& s) {
  if (auto call = spec::link_call_from_string(s)) return *call;
  throw core::RuntimeError(str_cat("calibrate: the executor reported an unknown collective \"", s, "\""));
}

// The GEMM samples of the measurements, as calibration_fit.h takes them.
std::vector<cost::GemmSample> gemm_samples(const spec::HostMeasurements& host) {
  std::vector<cost::GemmSample> gemm;
  for (const auto& g : host.gemm) {
    const auto m = static_cast<double>(g.m), n = static_cast<double>(g.n), k = static_cast<double>(g.k);
    const double flop = 2.0 * m * n * k;
    gemm.push_back({flop / 1e9, flop / g.seconds, std::min({m, n, k})});
  }
  return gemm;
}

// The attention samples (forward and backward in one curve; FLOPs in the cost model's causal
// convention, costmodel/layer_costs.h).
std::vector<cost::GemmSample> attention_samples(const spec::HostMeasurements& host) {
  std::vector<cost::GemmSample> attention;
  for (const auto& a : host.attention) {
    const auto seq = static_cast<double>(a.seq);
    const double fwd = cost::causal_attention_forward_flops(
        static_cast<double>(a.batch) * seq, seq, static_cast<double>(a.head_dim), static_cast<double>(a.heads));
    const double bwd = cost::causal_attention_backward_flops(fwd);
    attention.push_back({fwd / 1e9, fwd / a.forward_seconds});
    attention.push_back({bwd / 1e9, bwd / a.backward_seconds});
  }
  return attention;
}

std::vector<spec::CrossEntropyPoint> cross_entropy_points(const spec::HostMeasurements& host) {
  std::vector<spec::CrossEntropyPoint> out;
  for (const auto& ce : host.cross_entropy) {
    const double logits = static_cast<double>(ce.tokens) * static_cast<double>(ce.vocab);
    out.push_back({logits, logits / ce.forward_seconds, logits / ce.backward_seconds});
  }
  return out;
}

LocalCalibration fit_host(const spec::HostMeasurements& host, int devices, double peak_flops_per_s) {
  LocalCalibration c;
  c.cores = host.cores;
  c.threads = host.threads;
  c.devices = devices;
  c.memory_bytes = host.memory_bytes;
  c.copy_bytes_per_s = host.copy_bytes_per_s;
  const auto gemm = gemm_samples(host);
  c.gemm = cost::fit_gemm_curve(gemm, peak_flops_per_s);
  c.gemm_by_min_dim = cost::fit_gemm_shape_curves(gemm, c.gemm.peak_flops_per_s);
  // The attention kernel against the same peak.
  if (const auto attention = attention_samples(host); !attention.empty()) {
    c.attention = cost::fit_gemm_curve(attention, c.gemm.peak_flops_per_s);
  }
  c.cross_entropy_rates = cross_entropy_points(host);
  c.seconds_per_dispatched_op = host.seconds_per_dispatched_op;
  return c;
}

// The collective samples of calibrate-comm's JSON.
std::vector<cost::CollectiveSample> collective_samples(const Json& comm) {
  std::vector<cost::CollectiveSample> samples;
  for (const auto& s : comm["samples"]) {
    samples.push_back({op_of(s["op"].get<std::string>()), s["ranks"].get<int>(), s["bytes"].get<double>(),
                       s["seconds"].get<double>()});
  }
  return samples;
}

// The per-ring-step latency of calibrate-comm's scalar all-reduce (spec::NodeSpec::
// scalar_all_reduce_step_latency): its seconds over 2(n − 1) steps; 0 where it was not measured.
double scalar_all_reduce_step_s(const Json& comm) {
  if (!comm.is_object() || !comm.contains("scalar_all_reduce")) return 0;
  const auto& s = comm["scalar_all_reduce"];
  const int n = s.value("ranks", 0);
  const double seconds = s.value("seconds", 0.0);
  return n >= 2 && seconds > 0 ? seconds / (2.0 * (n - 1)) : 0.0;
}

// The node's α–β pair and each call's own (spec::NodeSpec::intra_measured). One pair describes
// every collective in the cost model; Gloo's all-reduce carries a much larger fixed cost than its
// all-gather or reduce-scatter, so the pair is fitted to the all-reduces (what data- and
// tensor-parallel steps spend most calls on), and each call is also fitted apart in its own form
// (on Gloo the reduce-scatter costs 2-3x what the all-reduce's pair says, a send/recv a tenth).
// Returns whether the pair was fitted to the all-reduces alone.
bool fit_collectives(const std::vector<cost::CollectiveSample>& samples, LocalCalibration& c) {
  std::vector<cost::CollectiveSample> all_reduce;
  for (const auto& s : samples) {
    if (s.op == spec::LinkCall::kAllReduce) all_reduce.push_back(s);
  }
  c.comm = cost::fit_alpha_beta(all_reduce.size() >= 2 ? all_reduce : samples);
  for (const auto call : spec::kAllLinkCalls) {
    std::vector<cost::CollectiveSample> own;
    for (const auto& s : samples) {
      if (s.op == call) own.push_back(s);
    }
    if (own.size() < 2) continue;
    try {
      c.per_call[static_cast<std::size_t>(call)] = cost::fit_alpha_beta(own);
    } catch (const core::ConfigError& e) {  // degenerate (e.g. no size dependence): the shared pair
      std::cerr << str_cat("calibrate: ", spec::to_string(call), " not fitted apart (", e.what(), ")\n");
    }
  }
  return all_reduce.size() >= 2;
}

}  // namespace cpt::cli
