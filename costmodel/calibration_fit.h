#pragma once
// Fitting the cost model's hardware parameters to measurements (`cpt calibrate`, issue #9).
//
// Collectives: every measured call is modelled as the cost model models it
// (costmodel/collective_model.h), t = c·α + f·S/B, with (c, f) the algorithm's step count and
// traffic factor for n ranks (ring all-reduce 2(n−1), 2(n−1)/n; all-gather and reduce-scatter
// (n−1), (n−1)/n; point-to-point 1, 1) and S the full buffer. α and 1/B are the least-squares
// solution over all samples (Eigen), each sample weighted by 1/t so that microsecond and
// millisecond calls count alike (relative errors).
//
// GEMMs: the peak is the fastest measured rate; the efficiency curve is the median achieved/peak
// of the samples in each half-decade of GEMM size, at the bin's median size.
#include <string>
#include <vector>

#include "spec/hardware_spec.h"

namespace cpt::cost {

enum class MeasuredOp { kAllReduce, kAllGather, kReduceScatter, kSendRecv };
std::string to_string(MeasuredOp op);

struct CollectiveSample {
  MeasuredOp op = MeasuredOp::kAllReduce;
  int ranks = 2;
  double bytes = 0;    // S: the full buffer
  double seconds = 0;  // one call
};

struct AlphaBetaFit {
  double alpha_s = 0;                  // per algorithm step
  double bandwidth_bytes_per_s = 0;    // per rank and direction
  double rms_relative_error = 0;       // of the fitted times against the samples
  int samples = 0;
};

// (c, f) of `op` on `ranks` ranks.
std::pair<double, double> alpha_beta_factors(MeasuredOp op, int ranks);

// REQUIRES: at least two samples with different sizes. ConfigError when the fit is degenerate
// (non-positive bandwidth or latency).
AlphaBetaFit fit_alpha_beta(const std::vector<CollectiveSample>& samples);

struct GemmSample {
  double gflop = 0;         // per call
  double flops_per_s = 0;
};

struct GemmFit {
  double peak_flops_per_s = 0;
  std::vector<spec::EfficiencyPoint> curve;  // increasing gflops
};

// REQUIRES: at least one sample.
GemmFit fit_gemm_curve(const std::vector<GemmSample>& samples);

}  // namespace cpt::cost
