#pragma once
// Fitting the cost model's hardware parameters to measurements (`cpt calibrate`).
//
// Collectives: every measured call is modelled as the cost model models it
// (costmodel/collective_model.h), t = c·α + f·S/B, with (c, f) the algorithm's step count and
// traffic factor for n ranks (ring all-reduce 2(n−1), 2(n−1)/n; all-gather and reduce-scatter
// (n−1), (n−1)/n; point-to-point 1, 1) and S the full buffer. α and 1/B are the least-squares
// solution over all samples (Eigen), each sample weighted by 1/t so that microsecond and
// millisecond calls count alike (relative errors).
//
// GEMMs: the peak is the fastest measured rate; the efficiency curve is the median achieved/peak
// of the samples in each half-decade of GEMM size, at the bin's median size; and the same again
// for the samples of each smallest dimension apart.
#include <utility>
#include <vector>

#include "spec/hardware_spec.h"

namespace cpt::cost {

struct CollectiveSample {
  spec::LinkCall op = spec::LinkCall::kAllReduce;
  int ranks = 2;
  double bytes = 0;    // S: the full buffer
  double seconds = 0;  // one call
};

struct AlphaBetaFit {
  double alpha_s = 0;                // per algorithm step
  double bandwidth_bytes_per_s = 0;  // per rank and direction
  double rms_relative_error = 0;     // of the fitted times against the samples
  int samples = 0;
};

// (c, f) of `op` on `ranks` ranks.
std::pair<double, double> alpha_beta_factors(spec::LinkCall op, int ranks);

// REQUIRES: at least two samples with different sizes. ConfigError when the fit is degenerate
// (non-positive bandwidth or latency).
AlphaBetaFit fit_alpha_beta(const std::vector<CollectiveSample>& samples);

struct GemmSample {
  double gflop = 0;  // per call
  double flops_per_s = 0;
  double min_dim = 0;  // the smallest of m, n, k (0: unknown; fit_gemm_shape_curves skips it)
};

struct GemmFit {
  double peak_flops_per_s = 0;
  std::vector<spec::EfficiencyPoint> curve;  // increasing gflops
};

// REQUIRES: at least one sample. Efficiencies are against `peak_flops_per_s` when given (> 0; the
// attention kernel's curve against the GEMM peak, capped at 1), else against the fastest sample.
GemmFit fit_gemm_curve(const std::vector<GemmSample>& samples, double peak_flops_per_s = 0);

// One curve per smallest dimension (spec::GpuSpec::gemm_efficiency_by_min_dim): the samples grouped
// by their exact min_dim, each group's curve fitted as fit_gemm_curve does, against
// `peak_flops_per_s` (> 0, the peak of all samples). Ascending min_dim; samples without one skipped.
std::vector<spec::GemmShapeCurve> fit_gemm_shape_curves(const std::vector<GemmSample>& samples,
                                                        double peak_flops_per_s);

// Recalibration from training runs (`cpt calibrate --from-runs`). For each run and each part
// (computation; exposed tensor- and data-parallel communication) the cost model's time splits into
// a throughput term a (FLOPs and bytes over peak rates, α–β) and a count b of fixed-cost events
// (kernel launches; collective calls), and the executor measured m. The fit finds the slowdown of
// the throughput term and the fixed cost per event:
//     m ≈ k + scale·a + fixed·b,
// with k a known part that neither scales nor counts events (the computation's slowdown beside
// overlapped communication, priced from the communication's fit); least squares in relative error
// (rows (a/m, b/m) against 1 − k/m, Eigen), scale > 0, fixed >= 0 (when the joint solution has
// fixed < 0, scale is fitted alone with fixed = 0). Runs with m <= 0, a + b <= 0 or k >= m are
// skipped; no positive scale: runs = 0 and the identity (scale 1, fixed 0).
struct RunTerm {
  double throughput = 0;  // a, seconds at the profile's rates
  double events = 0;      // b, fixed-cost events on the critical path
  double measured = 0;    // m, seconds
  double known = 0;       // k, seconds
};
struct ScaleAndFixed {
  double scale = 1;
  double fixed_s = 0;
  int runs = 0;
  double rms_relative_error = 0;
};
ScaleAndFixed fit_scale_and_fixed(const std::vector<RunTerm>& runs);

// The profile with its computation `compute_scale` times slower (dense peaks, memory bandwidth and
// measured cross-entropy rates divided by it), its communication `comm_scale` times slower (latencies multiplied,
// bandwidths divided), and the given fixed costs per kernel and per collective call.
spec::ClusterSpec rescaled(const spec::ClusterSpec& cluster, double compute_scale, double comm_scale,
                           core::Seconds kernel_overhead, core::Seconds collective_overhead);

}  // namespace cpt::cost
