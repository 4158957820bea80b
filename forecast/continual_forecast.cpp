#include "forecast/continual_forecast.h"

#include <algorithm>
#include <cmath>

#include "core/error.h"
#include "core/str_cat.h"
#include "forecast/lr_areas.h"

namespace cpt::forecast {
namespace {

using core::str_cat;

std::vector<Observation> observations_of(const FittedPilots& fitted, const std::string& set) {
  std::vector<Observation> observations;
  for (std::size_t i = 0; i < fitted.pilots.size(); ++i) {
    const auto& pilot = fitted.pilots[i];
    const LrAreas areas = lr_areas(pilot.lr);
    for (const auto& point : pilot.evaluations.at(set)) {
      if (fitted.fit_until_step >= 0 && point.step > fitted.fit_until_step) continue;
      const auto k = static_cast<std::size_t>(point.step);
      observations.push_back({{fitted.replay_shares[i], areas.forward[k], areas.annealing[k]}, point.loss});
    }
  }
  return observations;
}

}  // namespace

FittedPilots fit_pilots(std::vector<PilotRun> pilots, std::vector<std::string> new_data, std::int64_t fit_until_step) {
  if (pilots.empty()) throw core::ConfigError("cpt forecast: give at least one pilot run directory");
  FittedPilots fitted;
  fitted.fit_until_step = fit_until_step;
  const bool named = !new_data.empty();
  fitted.new_data = named ? std::move(new_data) : common_data_sets(pilots);
  if (fitted.new_data.empty()) {
    throw core::ConfigError("--new-data: the pilots share no training data set; name the new domain's data sets");
  }
  if (!named && fitted.new_data.size() > 1) {
    throw core::ConfigError(core::str_cat("--new-data: every pilot trains on ", core::join(fitted.new_data, ", "),
                                          "; name the new domain's data sets (the rest is replay)"));
  }
  for (const auto& pilot : pilots) fitted.replay_shares.push_back(replay_share(pilot, fitted.new_data));
  fitted.pilots = std::move(pilots);
  const auto sets = keys_in_every(fitted.pilots, &PilotRun::evaluations);
  if (sets.empty()) {
    throw core::ConfigError(str_cat(fitted.pilots.front().dir.string(),
                                    ": no evaluation set common to every pilot (eval.jsonl; TRAIN.json's `eval`)"));
  }
  // The annealing term is fitted only from a pilot whose fitted evaluations reach its schedule's end.
  fitted.annealing_fitted = std::any_of(fitted.pilots.begin(), fitted.pilots.end(), [&](const PilotRun& run) {
    const auto end = run.schedule.total_steps;
    return std::any_of(run.evaluations.begin(), run.evaluations.end(), [&](const auto& set) {
      return set.second.back().step >= end && (fit_until_step < 0 || fit_until_step >= end);
    });
  });
  for (const auto& set : sets) {
    const auto observations = observations_of(fitted, set);
    fitted.fits.emplace(set,
                        fit_loss_law(observations, fitted.annealing_fitted, str_cat("evaluation set \"", set, "\"")));
    const auto& first = fitted.pilots.front().evaluations.at(set).front();
    if (first.step == 0) fitted.start_loss[set] = first.loss;
  }
  return fitted;
}

bool outside_pilots(const FittedPilots& fitted, const ForecastTarget& target) {
  const auto [lowest, highest] = std::minmax_element(fitted.replay_shares.begin(), fitted.replay_shares.end());
  return target.replay_share < *lowest - kSameReplayShare || target.replay_share > *highest + kSameReplayShare;
}

LossForecast forecast_set(const FittedPilots& fitted, const std::string& set, const ForecastTarget& target) {
  const LawFit& fit = fitted.fits.at(set);
  if (!speaks_for(fit, target.replay_share)) {
    throw core::ConfigError(str_cat("replay share ", target.replay_share, ": the evaluations of \"", set,
                                    "\" fitted are all at replay share ", fit.replay_share,
                                    ", which says nothing of how replay moves the losses; add a pilot at another "
                                    "replay share (0 and 0.25, say)"));
  }
  return forecast_loss(fit, {target.replay_share, target.forward_area, target.annealing_area});
}

namespace {

ForecastTarget target_with(double replay_share, std::span<const double> lr) {
  const LrAreas areas = lr_areas(lr);
  return {replay_share, static_cast<std::int64_t>(lr.size()), areas.forward.back(), areas.annealing.back()};
}

}  // namespace

ForecastTarget target_like_pilots(const FittedPilots& fitted, double replay_share, double peak, std::int64_t steps) {
  if (steps < 0 || steps > kMaxForecastSteps) {
    throw core::ConfigError(str_cat("--steps/--tokens: ", steps, " steps; expected at most ", kMaxForecastSteps));
  }
  return target_with(replay_share, lr_per_step(schedule_for(fitted.pilots.front(), steps, peak)));
}

ForecastTarget target_of(const FittedPilots& fitted, const PilotRun& run) {
  std::int64_t last_step = 0;
  for (const auto& [set, points] : run.evaluations) last_step = std::max(last_step, points.back().step);
  return target_with(replay_share(run, fitted.new_data),
                     std::span<const double>(run.lr.data(), static_cast<std::size_t>(last_step)));
}

}  // namespace cpt::forecast
