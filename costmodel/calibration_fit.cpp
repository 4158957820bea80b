#include "costmodel/calibration_fit.h"

#include <Eigen/Dense>
#include <algorithm>
#include <cmath>
#include <map>

#include "core/error.h"
#include "core/str_cat.h"

namespace cpt::cost {

using core::str_cat;

std::string to_string(MeasuredOp op) {
  switch (op) {
    case MeasuredOp::kAllReduce:
      return "all_reduce";
    case MeasuredOp::kAllGather:
      return "all_gather";
    case MeasuredOp::kReduceScatter:
      return "reduce_scatter";
    case MeasuredOp::kSendRecv:
      return "send_recv";
  }
  return "?";
}

std::pair<double, double> alpha_beta_factors(MeasuredOp op, int ranks) {
  const double n = ranks;
  switch (op) {
    case MeasuredOp::kAllReduce:
      return {2 * (n - 1), 2 * (n - 1) / n};
    case MeasuredOp::kAllGather:
    case MeasuredOp::kReduceScatter:
      return {n - 1, (n - 1) / n};
    case MeasuredOp::kSendRecv:
      return {1, 1};
  }
  return {1, 1};
}

AlphaBetaFit fit_alpha_beta(const std::vector<CollectiveSample>& samples) {
  if (samples.size() < 2) throw core::ConfigError(str_cat("α–β fit: ", samples.size(), " samples; need at least 2"));
  // Rows: [c/t, f·S/t] · [α, 1/B] = 1 (each equation t = c·α + f·S·x divided by t).
  Eigen::MatrixXd a(static_cast<Eigen::Index>(samples.size()), 2);
  Eigen::VectorXd b = Eigen::VectorXd::Ones(static_cast<Eigen::Index>(samples.size()));
  for (std::size_t i = 0; i < samples.size(); ++i) {
    const auto& s = samples[i];
    const auto [c, f] = alpha_beta_factors(s.op, s.ranks);
    a(static_cast<Eigen::Index>(i), 0) = c / s.seconds;
    a(static_cast<Eigen::Index>(i), 1) = f * s.bytes / s.seconds;
  }
  const Eigen::Vector2d x = a.colPivHouseholderQr().solve(b);
  if (!(x(0) > 0) || !(x(1) > 0)) {
    throw core::ConfigError(str_cat("α–β fit: degenerate solution (α = ", x(0), " s, 1/B = ", x(1),
                                    " s/byte): measure more message sizes"));
  }
  AlphaBetaFit fit;
  fit.alpha_s = x(0);
  fit.bandwidth_bytes_per_s = 1.0 / x(1);
  fit.samples = static_cast<int>(samples.size());
  double sq = 0;
  for (const auto& s : samples) {
    const auto [c, f] = alpha_beta_factors(s.op, s.ranks);
    const double t = c * fit.alpha_s + f * s.bytes / fit.bandwidth_bytes_per_s;
    sq += std::pow((t - s.seconds) / s.seconds, 2);
  }
  fit.rms_relative_error = std::sqrt(sq / static_cast<double>(samples.size()));
  return fit;
}

GemmFit fit_gemm_curve(const std::vector<GemmSample>& samples) {
  if (samples.empty()) throw core::ConfigError("GEMM fit: no samples");
  GemmFit fit;
  for (const auto& s : samples) fit.peak_flops_per_s = std::max(fit.peak_flops_per_s, s.flops_per_s);
  // Half-decade bins of log10(GFLOP).
  std::map<int, std::vector<std::pair<double, double>>> bins;
  for (const auto& s : samples) {
    const int bin = static_cast<int>(std::floor(2 * std::log10(s.gflop)));
    bins[bin].push_back({s.gflop, s.flops_per_s / fit.peak_flops_per_s});
  }
  auto median = [](std::vector<double> v) {
    std::sort(v.begin(), v.end());
    const auto n = v.size();
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
  };
  for (const auto& [bin, points] : bins) {
    std::vector<double> sizes, effs;
    for (const auto& [g, e] : points) {
      sizes.push_back(g);
      effs.push_back(e);
    }
    fit.curve.push_back({median(sizes), median(effs)});
  }
  return fit;
}

}  // namespace cpt::cost
