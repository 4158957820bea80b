#pragma once
// The cost model against measured runs (`cpt validate`): each published run predicted on its own
// GPUs and configuration, and the error of each group of runs, signed and absolute. Error is that
// of the step time, predicted / measured − 1 (from the throughputs, measured / predicted − 1, at
// the same batch): negative means cpt predicts the run faster than it ran (optimistic), as the
// project's other accuracy tables count it. A run the model calls out of memory although it ran
// is counted apart.

#include <optional>
#include <span>
#include <string>
#include <vector>

#include "costmodel/cost_options.h"
#include "costmodel/step_estimator.h"
#include "planner/published_run.h"

namespace cpt::planner {

enum class RunOutcome { kCompared, kPredictedOutOfMemory, kNotModelled };
std::string to_string(RunOutcome outcome);  // "compared", "predicted_out_of_memory", "not_modelled"

struct RunCheck {
  std::string id;
  std::string group;
  spec::Runtime runtime = spec::Runtime::kMegatron;  // it was priced for
  RunOutcome outcome = RunOutcome::kNotModelled;
  std::string metric;  // "tokens_per_s_per_gpu" or "model_tflops_per_gpu"
  double measured = 0;
  double predicted = 0;
  double error = 0;  // of the step time: measured / predicted throughput − 1 (kCompared only)
  double predicted_peak_memory_gib = 0;
  std::string detail;  // why not modelled, or the out-of-memory numbers
  std::vector<std::string> assumptions;
};

// The options `run` is priced with: `options` under the run's runtime (cost::for_runtime), or
// `runtime` where set, with the recipe's settings the run states (precision, dropout, fused
// cross-entropy, gradient precision) replacing theirs.
cost::CostModelOptions options_for_run(const PublishedRun& run, const cost::CostModelOptions& options,
                                       std::optional<spec::Runtime> runtime = std::nullopt);

// Records in `check` what `evaluation` says: kCompared with its peak memory (returns the estimate),
// or the infeasibility's outcome and detail (returns nullptr).
const cost::Estimate* record_evaluation(const cost::Evaluation& evaluation, RunCheck& check);

// `run` predicted under options_for_run(run, options, runtime).
RunCheck check_published_run(const PublishedRun& run, const cost::CostModelOptions& options,
                             std::optional<spec::Runtime> runtime = std::nullopt);

struct GroupSummary {
  std::string group;  // "all" for the summary of every row
  int rows = 0;
  int compared = 0;
  int predicted_out_of_memory = 0;
  int not_modelled = 0;
  double mean_signed_error = 0;  // over the compared rows
  double mean_absolute_error = 0;
  double worst_error = 0;  // the largest in magnitude, signed
};

// One summary per group in order of first appearance, then "all".
std::vector<GroupSummary> summarize(std::span<const RunCheck> checks);

}  // namespace cpt::planner
