#pragma once
// `cpt forecast`'s work: the loss law (loss_law.h) fitted per evaluation set to pilot runs
// (pilot_run.h), and its predictions at other token budgets, replay shares and peak learning
// rates, with intervals; and the same predictions at runs that were not fitted, for checking.
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "forecast/loss_law.h"
#include "forecast/pilot_run.h"

namespace cpt::forecast {

struct FittedPilots {
  std::vector<PilotRun> pilots;
  std::vector<double> replay_shares;         // of each pilot
  std::vector<std::string> new_data;         // the data sets counted as new data
  std::int64_t fit_until_step = -1;          // evaluations after it were left out (< 0: none)
  bool annealing_fitted = false;             // a pilot's fitted evaluations reach its schedule's end: C is fitted
  std::map<std::string, LawFit> fits;        // by evaluation set (the sets every pilot evaluates)
  std::map<std::string, double> start_loss;  // the first pilot's loss at step 0, where it has one
};

// A run to predict: its replay share and its learning rate at every step (the loss is read after
// the last one).
struct ForecastTarget {
  double replay_share = 0;
  std::vector<double> lr;
};

// A run like the first pilot but `steps` long at `peak` (schedule_for).
ForecastTarget target_like_pilots(const FittedPilots& fitted, double replay_share, double peak, std::int64_t steps);

// ConfigError when no evaluation set is common to the pilots, when too few evaluations fall inside
// the fitting window, or as read_pilot_run / replay_share say. `new_data` empty: the data sets
// every pilot trains on.
FittedPilots fit_pilots(std::vector<PilotRun> pilots, std::vector<std::string> new_data, std::int64_t fit_until_step);

// ConfigError when the target's replay share is not one the fit can speak for: with every pilot at
// one replay share, that share only.
LossForecast forecast_set(const FittedPilots& fitted, const std::string& set, const ForecastTarget& target);

// True when the target's replay share lies outside the pilots' (an extrapolation).
bool outside_pilots(const FittedPilots& fitted, const ForecastTarget& target);

// A run's own target: its replay share and the steps it ran up to its last evaluation.
ForecastTarget target_of(const FittedPilots& fitted, const PilotRun& run);

}  // namespace cpt::forecast
