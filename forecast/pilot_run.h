#pragma once
// A pilot run, a `cpt train` output directory (docs/train_config.md, "What a run writes"), as the
// loss law reads it: the learning rate each step used (metrics.jsonl), the evaluations
// (eval.jsonl), the data mixture and schedule (train_config.json), the schedule's length
// (run.json) and the tokens per step (plan.json).
#include <cstdint>
#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include "spec/lr_schedule.h"

namespace cpt::forecast {

struct EvalPoint {
  std::int64_t step = 0;  // steps done when evaluated
  double loss = 0;
};

struct PilotRun {
  std::filesystem::path dir;
  std::vector<double> lr;                                     // index = step (0-based), as trained
  std::map<std::string, std::vector<EvalPoint>> evaluations;  // by set, in step order
  std::map<std::string, double> data_weights;                 // training sets' shares, summing to 1
  // As configured, with the peak the steps ran at and total_steps the run's length (run.json). Its
  // warm-up fraction, when the run gave one, stays apart: a schedule of another length warms up
  // over the same share of its steps.
  spec::LrSchedule schedule;
  double warmup_fraction = -1;  // < 0: the run gave lr.warmup_steps
  std::int64_t tokens_per_step = 0;
};

// ConfigError naming the file and line when a file is missing or malformed, or when an evaluation
// comes after steps that metrics.jsonl does not have.
PilotRun read_pilot_run(const std::filesystem::path& dir);

// The share of the run's training mixture outside `new_data` (names of its data sets): the replay.
// ConfigError when a name is not one of the run's data sets or none is.
double replay_share(const PilotRun& run, const std::vector<std::string>& new_data);

// The keys of `field` (a map of each run's) that every run has, in order.
template <typename Map>
std::vector<std::string> keys_in_every(const std::vector<PilotRun>& runs, Map PilotRun::*field) {
  std::vector<std::string> common;
  if (runs.empty()) return common;
  for (const auto& entry : runs.front().*field) {
    bool everywhere = true;
    for (const auto& run : runs) everywhere = everywhere && (run.*field).count(entry.first) > 0;
    if (everywhere) common.push_back(entry.first);
  }
  return common;
}

// The data sets every run trains on: the new data when the caller does not name it.
std::vector<std::string> common_data_sets(const std::vector<PilotRun>& runs);

// The run's schedule stretched or shrunk to `total_steps` at `peak` (same kind, floor and decay
// share; the warm-up in steps, or as the same fraction when the run gave a fraction).
spec::LrSchedule schedule_for(const PilotRun& run, std::int64_t total_steps, double peak);

}  // namespace cpt::forecast
