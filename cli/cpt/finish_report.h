#pragma once
// The time to finish a run's token budget (planner/time_to_finish.h) as `cpt plan` reports it:
// the failure flags shared with `cpt simulate`, the lines of its text and report.md, its JSON.
#include <string>

#include "core/json_reader.h"
#include "planner/time_to_finish.h"

namespace CLI {
class App;
}  // namespace CLI

namespace cpt::cli {

// --mtbf-gpu-hours, --checkpoint-write-GBps, --restart-minutes.
void add_failure_options(CLI::App& command, planner::FailureOptions& failures);

struct FinishFacts {
  std::int64_t tokens = 0;
  int gpus = 0;
  double price_per_gpu_hour = 0;  // 0: no cost
  bool with_recipe = false;       // a TRAIN.json was priced (its evaluations, Fisher, interval)
  planner::FailureOptions failures;
};

// "time to finish N tokens with #1 (S steps): H h expected, G GPU-hours[, C USD]" and its parts,
// one per line, each line starting with `indent` after the first.
std::string describe_finish(const planner::TimeToFinish& t, const FinishFacts& facts, const std::string& indent);

core::Json finish_json(const planner::TimeToFinish& t, const FinishFacts& facts);

}  // namespace cpt::cli
