#include "forecast/loss_law.h"

#include <Eigen/Dense>
#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "core/error.h"
#include "core/str_cat.h"

namespace cpt::forecast {
namespace {

using Parameters = Eigen::Matrix<double, kLawParameters, 1>;
enum Index { kStart, kShift, kLogReplay, kLogArea, kLogExponent, kLogAnnealing, kRecoveryLogit, kLogRecoveryArea };

// The recovery share's logit when there is none (a share of 1e-13).
constexpr double kNoRecoveryLogit = -30;

// Bounds that keep the power law finite; none is reached by a sensible fit.
constexpr double kMinLog = -30, kMaxLog = 30;
constexpr double kMinLogExponent = -2.302585, kMaxLogExponent = 2.302585;

LossLaw law_of(const Parameters& theta, bool replay_fitted, bool annealing_fitted, bool recovery_fitted) {
  LossLaw law;
  law.start_loss = theta[kStart];
  law.shift = theta[kShift];
  law.replay_scale = replay_fitted ? std::exp(theta[kLogReplay]) : 0.0;
  law.area_scale = std::exp(theta[kLogArea]);
  law.exponent = std::exp(theta[kLogExponent]);
  law.annealing = annealing_fitted ? std::exp(theta[kLogAnnealing]) : 0.0;
  law.recovery = recovery_fitted ? 1 / (1 + std::exp(-theta[kRecoveryLogit])) : 0.0;
  law.recovery_area = recovery_fitted ? std::exp(theta[kLogRecoveryArea]) : 1.0;
  return law;
}

void clamp(Parameters& theta) {
  theta[kLogReplay] = std::clamp(theta[kLogReplay], kMinLog, kMaxLog);
  theta[kLogArea] = std::clamp(theta[kLogArea], kMinLog, kMaxLog);
  theta[kLogExponent] = std::clamp(theta[kLogExponent], kMinLogExponent, kMaxLogExponent);
  theta[kLogAnnealing] = std::clamp(theta[kLogAnnealing], kMinLog, kMaxLog);
  theta[kRecoveryLogit] = std::clamp(theta[kRecoveryLogit], kNoRecoveryLogit, -kNoRecoveryLogit);
  theta[kLogRecoveryArea] = std::clamp(theta[kLogRecoveryArea], kMinLog, kMaxLog);
}

struct Problem {
  std::span<const Observation> observations;
  std::vector<int> free;  // indices of the fitted parameters
  bool replay_fitted = false;
  bool annealing_fitted = false;
  bool recovery_fitted = false;

  [[nodiscard]] Eigen::VectorXd residuals(const Parameters& theta) const {
    const LossLaw law = law_of(theta, replay_fitted, annealing_fitted, recovery_fitted);
    Eigen::VectorXd r(static_cast<Eigen::Index>(observations.size()));
    for (std::size_t i = 0; i < observations.size(); ++i) {
      r[static_cast<Eigen::Index>(i)] = law.at(observations[i].where) - observations[i].loss;
    }
    return r;
  }
  // Central differences over the free parameters.
  [[nodiscard]] Eigen::MatrixXd jacobian(const Parameters& theta) const {
    Eigen::MatrixXd j(static_cast<Eigen::Index>(observations.size()), static_cast<Eigen::Index>(free.size()));
    for (std::size_t c = 0; c < free.size(); ++c) {
      const double h = 1e-6 * std::max(1.0, std::abs(theta[free[c]]));
      Parameters up = theta, down = theta;
      up[free[c]] += h;
      down[free[c]] -= h;
      j.col(static_cast<Eigen::Index>(c)) = (residuals(up) - residuals(down)) / (2 * h);
    }
    return j;
  }
};

// Levenberg–Marquardt (Marquardt's diagonal scaling) from `theta`; returns the final sum of squares.
double minimise(const Problem& problem, Parameters& theta) {
  double damping = 1e-3;
  Eigen::VectorXd r = problem.residuals(theta);
  double cost = r.squaredNorm();
  for (int iteration = 0; iteration < 300 && damping < 1e12; ++iteration) {
    const Eigen::MatrixXd j = problem.jacobian(theta);
    const Eigen::MatrixXd normal = j.transpose() * j;
    const Eigen::VectorXd gradient = j.transpose() * r;
    Eigen::MatrixXd damped = normal;
    damped.diagonal() += damping * (normal.diagonal().array() + 1e-12).matrix();
    const Eigen::VectorXd step = damped.ldlt().solve(-gradient);
    Parameters trial = theta;
    for (std::size_t c = 0; c < problem.free.size(); ++c) trial[problem.free[c]] += step[static_cast<Eigen::Index>(c)];
    clamp(trial);
    const Eigen::VectorXd trial_r = problem.residuals(trial);
    const double trial_cost = trial_r.squaredNorm();
    if (std::isfinite(trial_cost) && trial_cost < cost) {
      const bool converged = cost - trial_cost <= 1e-12 * (1 + cost);
      theta = trial;
      r = trial_r;
      cost = trial_cost;
      damping = std::max(damping / 3, 1e-12);
      if (converged) break;
    } else {
      damping *= 4;
    }
  }
  return cost;
}

// Observations at distinct (replay share, forward area): what a fit can tell apart.
std::size_t distinct_points(std::span<const Observation> observations) {
  std::vector<std::pair<double, double>> distinct;
  for (const auto& o : observations) distinct.emplace_back(o.where.replay_share, o.where.forward_area);
  std::sort(distinct.begin(), distinct.end());
  return static_cast<std::size_t>(std::unique(distinct.begin(), distinct.end()) - distinct.begin());
}

void check_observations(std::span<const Observation> observations, int parameters, const std::string& what) {
  for (const auto& o : observations) {
    const auto& w = o.where;
    if (!(w.replay_share >= 0 && w.replay_share < 1) || !std::isfinite(o.loss) || !std::isfinite(w.forward_area) ||
        !std::isfinite(w.annealing_area)) {
      throw core::ConfigError(
          core::str_cat(what, ": a replay share must be in [0, 1), a loss and the areas finite; got ", w.replay_share,
                        ", ", o.loss, ", ", w.forward_area, ", ", w.annealing_area));
    }
  }
  const std::size_t distinct = distinct_points(observations);
  if (static_cast<int>(distinct) < parameters + 1) {
    throw core::ConfigError(core::str_cat(what, ": ", distinct, " distinct evaluations are too few to fit ", parameters,
                                          " parameters; evaluate the pilot more often (eval_interval_steps, "
                                          "eval_at_start), run it longer, or fit up to a later --fit-until-step"));
  }
}

}  // namespace

double LossLaw::at(const LawInput& where) const {
  const double mixture = replay_scale > 0 ? std::exp(-where.replay_share / replay_scale) : 1.0;
  const double new_data_area = (1 - where.replay_share) * where.forward_area;
  const double saturation = 1 - std::pow(1 + new_data_area / area_scale, -exponent);
  const double won_back = recovery * (1 - std::exp(-where.replay_share * where.forward_area / recovery_area));
  return start_loss + shift * mixture * (saturation - won_back) - annealing * where.annealing_area;
}

namespace {

// Schwarz's Bayesian information criterion of a least-squares fit (Gaussian residuals): the
// recovery term is kept only when it explains more than its two parameters cost.
double bic(double sum_of_squares, std::size_t observations, std::size_t parameters) {
  const auto n = static_cast<double>(observations);
  return n * std::log(std::max(sum_of_squares, 1e-300) / n) + static_cast<double>(parameters) * std::log(n);
}

struct Minimum {
  Parameters theta = Parameters::Zero();
  double cost = std::numeric_limits<double>::infinity();
};

// Levenberg–Marquardt from a grid of shapes: the power law's scale and exponent are not separately
// convex, and a few restarts find the basin reliably. `base` gives the other parameters' starts.
Minimum search_shapes(const Problem& problem, const Parameters& base, double largest_area) {
  Minimum best;
  for (const double area_fraction : {0.01, 0.1, 1.0}) {
    for (const double exponent : {0.3, 1.0, 3.0}) {
      for (const double annealing : {1e-3, 1.0}) {
        for (const double replay_scale : {0.03, 0.3}) {
          Parameters theta = base;
          theta[kLogReplay] = std::log(replay_scale);
          theta[kLogArea] = std::log(area_fraction * largest_area);
          theta[kLogExponent] = std::log(exponent);
          theta[kLogAnnealing] = std::log(annealing);
          const double cost = minimise(problem, theta);
          if (cost < best.cost) best = {theta, cost};
          if (!problem.replay_fitted) break;
        }
        if (!problem.annealing_fitted) break;
      }
    }
  }
  return best;
}

}  // namespace

LawFit fit_loss_law(std::span<const Observation> observations, bool fit_annealing, const std::string& what) {
  const auto [lowest, highest] = std::minmax_element(
      observations.begin(), observations.end(),
      [](const Observation& a, const Observation& b) { return a.where.replay_share < b.where.replay_share; });
  const bool annealed = std::any_of(observations.begin(), observations.end(),
                                    [](const Observation& o) { return o.where.annealing_area > 0; });
  Problem problem{observations, {kStart, kShift, kLogArea, kLogExponent}, false, fit_annealing && annealed};
  if (problem.annealing_fitted) problem.free.push_back(kLogAnnealing);
  if (!observations.empty() && highest->where.replay_share - lowest->where.replay_share > kSameReplayShare) {
    problem.replay_fitted = true;
    problem.free.push_back(kLogReplay);
  }
  check_observations(observations, static_cast<int>(problem.free.size()), what);

  const auto by_area = [](const Observation& a, const Observation& b) {
    return a.where.forward_area < b.where.forward_area;
  };
  const auto first = std::min_element(observations.begin(), observations.end(), by_area);
  const auto last = std::max_element(observations.begin(), observations.end(), by_area);
  const double largest_area = std::max(last->where.forward_area, 1e-12);
  Parameters base = Parameters::Zero();
  base[kStart] = first->loss;
  base[kShift] = last->loss - first->loss;
  base[kRecoveryLogit] = kNoRecoveryLogit;
  Minimum best = search_shapes(problem, base, largest_area);
  // A forgotten set trained with replay: the replayed data wins part of the forgetting back.
  const bool replayed = std::any_of(observations.begin(), observations.end(),
                                    [](const Observation& o) { return o.where.replay_share > kSameReplayShare; });
  if (replayed && best.theta[kShift] > 0 && distinct_points(observations) > problem.free.size() + 3) {
    Problem recovering = problem;
    recovering.recovery_fitted = true;
    recovering.free.push_back(kRecoveryLogit);
    recovering.free.push_back(kLogRecoveryArea);
    base[kRecoveryLogit] = 0;
    base[kLogRecoveryArea] = std::log(0.25 * std::max(highest->where.replay_share, kSameReplayShare) * largest_area);
    const Minimum recovered = search_shapes(recovering, base, largest_area);
    if (bic(recovered.cost, observations.size(), recovering.free.size()) <
        bic(best.cost, observations.size(), problem.free.size())) {
      best = recovered;
      problem = recovering;
    }
  }
  const int parameters = static_cast<int>(problem.free.size());
  const Parameters& theta = best.theta;
  const double best_cost = best.cost;

  if (!std::isfinite(best_cost)) {
    throw core::ConfigError(core::str_cat(what, ": no finite fit of the law to these evaluations"));
  }
  LawFit fit;
  fit.replay_share = lowest->where.replay_share;
  fit.law = law_of(theta, problem.replay_fitted, problem.annealing_fitted, problem.recovery_fitted);
  fit.replay_fitted = problem.replay_fitted;
  fit.annealing_fitted = problem.annealing_fitted;
  fit.recovery_fitted = problem.recovery_fitted;
  fit.observations = static_cast<int>(observations.size());
  fit.parameters = parameters;
  const double variance = best_cost / std::max(1, fit.observations - parameters);
  fit.residual_sd = std::sqrt(variance);
  const Eigen::MatrixXd j = problem.jacobian(theta);
  const Eigen::MatrixXd covariance = variance * (j.transpose() * j).completeOrthogonalDecomposition().pseudoInverse();
  for (std::size_t a = 0; a < problem.free.size(); ++a) {
    for (std::size_t b = 0; b < problem.free.size(); ++b) {
      fit.covariance[static_cast<std::size_t>(problem.free[a] * kLawParameters + problem.free[b])] =
          covariance(static_cast<Eigen::Index>(a), static_cast<Eigen::Index>(b));
    }
  }
  return fit;
}

bool speaks_for(const LawFit& fit, double replay_share) {
  return fit.replay_fitted || std::abs(replay_share - fit.replay_share) <= kSameReplayShare;
}

LossForecast forecast_loss(const LawFit& fit, const LawInput& where) {
  Parameters theta;
  const auto& law = fit.law;
  theta << law.start_loss, law.shift, fit.replay_fitted ? std::log(law.replay_scale) : 0.0, std::log(law.area_scale),
      std::log(law.exponent), std::log(std::max(law.annealing, 1e-300)),
      std::log(std::max(law.recovery, 1e-300)) - std::log(std::max(1 - law.recovery, 1e-300)),
      std::log(law.recovery_area);
  Parameters gradient = Parameters::Zero();
  for (int i = 0; i < kLawParameters; ++i) {
    const double h = 1e-6 * std::max(1.0, std::abs(theta[i]));
    Parameters up = theta, down = theta;
    up[i] += h;
    down[i] -= h;
    gradient[i] = (law_of(up, fit.replay_fitted, fit.annealing_fitted, fit.recovery_fitted).at(where) -
                   law_of(down, fit.replay_fitted, fit.annealing_fitted, fit.recovery_fitted).at(where)) /
                  (2 * h);
  }
  const Eigen::Map<const Eigen::Matrix<double, kLawParameters, kLawParameters, Eigen::RowMajor>> covariance(
      fit.covariance.data());
  const double variance = gradient.dot(covariance * gradient) + fit.residual_sd * fit.residual_sd;
  const double half_width = 2 * std::sqrt(std::max(0.0, variance));
  const double loss = law.at(where);
  return {loss, loss - half_width, loss + half_width};
}

}  // namespace cpt::forecast
