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

// A run to predict: its replay share, its length and its learning-rate areas after its last step.
struct ForecastTarget {
  double replay_share = 0;
  std::int64_t steps = 0;
  double forward_area = 0;
  double annealing_area = 0;
};

// The longest run forecast (steps): far beyond any continual run, and areas over it fit in memory.
inline constexpr std::int64_t kMaxForecastSteps = 100'000'000;

// A run like the first pilot but `steps` long at `peak` (schedule_for). ConfigError beyond
// kMaxForecastSteps.
ForecastTarget target_like_pilots(const FittedPilots& fitted, double replay_share, double peak, std::int64_t steps);

// ConfigError when no evaluation set is common to the pilots, when too few evaluations fall inside
// the fitting window, or as read_pilot_run / replay_share say. `new_data` empty: the one data set
// every pilot trains on (several shared sets must be named).
FittedPilots fit_pilots(std::vector<PilotRun> pilots, std::vector<std::string> new_data, std::int64_t fit_until_step);

// ConfigError when the target's replay share is not one the set's fit can speak for: with its
// evaluations at one replay share, that share only.
LossForecast forecast_set(const FittedPilots& fitted, const std::string& set, const ForecastTarget& target);

// True when the target's replay share lies outside the pilots' (an extrapolation).
bool outside_pilots(const FittedPilots& fitted, const ForecastTarget& target);

// A run's own target: its replay share and the steps it ran up to its last evaluation.
ForecastTarget target_of(const FittedPilots& fitted, const PilotRun& run);

}  // namespace cpt::forecast
