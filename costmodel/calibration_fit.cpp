#include "costmodel/calibration_fit.h"

#include <Eigen/Dense>
#include <algorithm>
#include <cmath>
#include <map>

#include "core/check.h"
#include "core/error.h"
#include "core/order_statistics.h"
#include "core/str_cat.h"

namespace cpt::cost {

using core::median;
using core::str_cat;

std::pair<double, double> alpha_beta_factors(spec::LinkCall op, int ranks) {
  const double n = ranks;
  switch (op) {
    case spec::LinkCall::kAllReduce:
      return {2 * (n - 1), 2 * (n - 1) / n};
    case spec::LinkCall::kAllGather:
    case spec::LinkCall::kReduceScatter:
      return {n - 1, (n - 1) / n};
    case spec::LinkCall::kSendRecv:
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

GemmFit fit_gemm_curve(const std::vector<GemmSample>& samples, double peak_flops_per_s) {
  if (samples.empty()) throw core::ConfigError("GEMM fit: no samples");
  GemmFit fit;
  fit.peak_flops_per_s = peak_flops_per_s;
  if (peak_flops_per_s <= 0) {
    for (const auto& s : samples) fit.peak_flops_per_s = std::max(fit.peak_flops_per_s, s.flops_per_s);
  }
  // Half-decade bins of log10(GFLOP).
  std::map<int, std::vector<std::pair<double, double>>> bins;
  for (const auto& s : samples) {
    const int bin = static_cast<int>(std::floor(2 * std::log10(s.gflop)));
    bins[bin].push_back({s.gflop, std::min(1.0, s.flops_per_s / fit.peak_flops_per_s)});
  }
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

std::vector<spec::GemmShapeCurve> fit_gemm_shape_curves(const std::vector<GemmSample>& samples,
                                                        double peak_flops_per_s) {
  CPT_CHECK(peak_flops_per_s > 0, "fit_gemm_shape_curves needs the common peak, got ", peak_flops_per_s);
  std::map<double, std::vector<GemmSample>> by_min_dim;
  for (const auto& s : samples) {
    if (s.min_dim > 0) by_min_dim[s.min_dim].push_back(s);
  }
  std::vector<spec::GemmShapeCurve> out;
  for (const auto& [min_dim, group] : by_min_dim)
    out.push_back({min_dim, fit_gemm_curve(group, peak_flops_per_s).curve});
  return out;
}

ScaleAndFixed fit_scale_and_fixed(const std::vector<RunTerm>& runs) {
  std::vector<RunTerm> used;
  for (const auto& r : runs) {
    // A run whose known part is all it measured says nothing of the scale.
    if (r.measured > 0 && r.throughput + r.events > 0 && r.known < r.measured) used.push_back(r);
  }
  ScaleAndFixed fit;
  fit.runs = static_cast<int>(used.size());
  if (used.empty()) return fit;
  const auto n = static_cast<Eigen::Index>(used.size());
  Eigen::MatrixXd a(n, 2);
  Eigen::VectorXd rest(n);  // 1 − k/m: the share of each run the fit explains
  for (Eigen::Index i = 0; i < n; ++i) {
    const auto& r = used[static_cast<std::size_t>(i)];
    a(i, 0) = r.throughput / r.measured;
    a(i, 1) = r.events / r.measured;
    rest(i) = 1.0 - r.known / r.measured;
  }
  Eigen::Vector2d x(1.0, 0.0);
  if (used.size() >= 2) x = a.colPivHouseholderQr().solve(rest);
  if (used.size() < 2 || !(x(0) > 0) || x(1) < 0) {
    // The throughput term alone: scale = Σ (a/m)(1 − k/m) / Σ (a/m)².
    const double den = a.col(0).squaredNorm();
    x = Eigen::Vector2d(den > 0 ? a.col(0).dot(rest) / den : 1.0, 0.0);
  }
  if (!(x(0) > 0)) {  // nothing to fit: the profile stands
    fit.runs = 0;
    return fit;
  }
  fit.scale = x(0);
  fit.fixed_s = x(1);
  fit.rms_relative_error = std::sqrt((a * x - rest).squaredNorm() / static_cast<double>(n));
  return fit;
}

spec::ClusterSpec rescaled(const spec::ClusterSpec& cluster, double compute_scale, double comm_scale,
                           core::Seconds kernel_overhead, core::Seconds collective_overhead) {
  auto c = cluster;
  auto& g = c.node.gpu;
  for (auto& peak : g.dense_peak) {
    if (peak) peak = core::FlopsPerSecond(peak->value() / compute_scale);
  }
  g.hbm_bandwidth = core::BytesPerSecond(g.hbm_bandwidth.value() / compute_scale);
  for (auto& p : g.cross_entropy_rates) {
    p.forward_logits_per_s /= compute_scale;
    p.backward_logits_per_s /= compute_scale;
  }
  g.kernel_overhead = kernel_overhead;
  g.collective_overhead = collective_overhead;
  return spec::with_slower_links(c, comm_scale);
}

}  // namespace cpt::cost
