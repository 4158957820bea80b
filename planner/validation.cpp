#include "planner/validation.h"

#include <algorithm>
#include <cmath>
#include <variant>

#include "core/units.h"
#include "costmodel/runtime_profile.h"
#include "costmodel/step_estimator.h"
#include "spec/hardware_catalog.h"

namespace cpt::planner {

std::string to_string(RunOutcome outcome) {
  switch (outcome) {
    case RunOutcome::kCompared:
      return "compared";
    case RunOutcome::kPredictedOutOfMemory:
      return "predicted_out_of_memory";
    case RunOutcome::kNotModelled:
      return "not_modelled";
  }
  return "?";
}

cost::CostModelOptions options_for_run(const PublishedRun& run, const cost::CostModelOptions& options,
                                       std::optional<spec::Runtime> runtime) {
  cost::CostModelOptions o = cost::for_runtime(options, runtime.value_or(run.runtime));
  o.precision = run.precision;
  o.dropout = run.dropout;
  o.fused_cross_entropy = run.fused_cross_entropy;
  o.moe_dispatcher = run.moe_dispatcher;
  if (run.fp32_main_grads) o.fp32_main_grads = *run.fp32_main_grads;
  return o;
}

const cost::Estimate* record_evaluation(const cost::Evaluation& evaluation, RunCheck& check) {
  if (const auto* infeasible = std::get_if<cost::Infeasible>(&evaluation)) {
    check.outcome = infeasible->reason == cost::InfeasibleReason::kOutOfMemory ? RunOutcome::kPredictedOutOfMemory
                                                                               : RunOutcome::kNotModelled;
    check.detail = infeasible->detail;
    return nullptr;
  }
  const auto& estimate = std::get<cost::Estimate>(evaluation);
  check.outcome = RunOutcome::kCompared;
  check.predicted_peak_memory_gib = core::to_gibibytes(estimate.peak_memory().total());
  return &estimate;
}

RunCheck check_published_run(const PublishedRun& run, const cost::CostModelOptions& options,
                             std::optional<spec::Runtime> runtime) {
  RunCheck check;
  check.id = run.id;
  check.group = run.group;
  check.runtime = runtime.value_or(run.runtime);
  check.assumptions = run.assumptions;
  if (run.not_modelled) {
    check.detail = *run.not_modelled;
    return check;
  }
  const cost::CostModelOptions o = options_for_run(run, options, check.runtime);
  const auto cluster = spec::HardwareCatalog::builtin().cluster_for_gpu(run.gpu, run.gpus, "gpu_class");
  const cost::Evaluation evaluation = cost::evaluate(run.model, cluster, run.parallel, run.seq_len, o);
  const cost::Estimate* compared = record_evaluation(evaluation, check);
  if (compared == nullptr) return check;
  const cost::Estimate& estimate = *compared;
  if (run.tokens_per_s_per_gpu) {
    check.metric = "tokens_per_s_per_gpu";
    check.measured = *run.tokens_per_s_per_gpu;
    check.predicted = estimate.tokens_per_s_per_gpu;
  } else {
    check.metric = "model_tflops_per_gpu";
    check.measured = *run.model_tflops_per_gpu;
    check.predicted = estimate.model_tflops_per_gpu;
  }
  check.error = check.measured / check.predicted - 1.0;
  return check;
}

namespace {

void add(GroupSummary& summary, const RunCheck& check) {
  ++summary.rows;
  switch (check.outcome) {
    case RunOutcome::kCompared:
      // Running means first; finish() divides.
      ++summary.compared;
      summary.mean_signed_error += check.error;
      summary.mean_absolute_error += std::abs(check.error);
      if (std::abs(check.error) > std::abs(summary.worst_error)) summary.worst_error = check.error;
      break;
    case RunOutcome::kPredictedOutOfMemory:
      ++summary.predicted_out_of_memory;
      break;
    case RunOutcome::kNotModelled:
      ++summary.not_modelled;
      break;
  }
}

void finish(GroupSummary& summary) {
  if (summary.compared == 0) return;
  summary.mean_signed_error /= summary.compared;
  summary.mean_absolute_error /= summary.compared;
}

}  // namespace

std::vector<GroupSummary> summarize(std::span<const RunCheck> checks) {
  std::vector<GroupSummary> groups;
  GroupSummary all{.group = "all"};
  for (const RunCheck& check : checks) {
    auto it = std::find_if(groups.begin(), groups.end(), [&](const GroupSummary& g) { return g.group == check.group; });
    if (it == groups.end()) it = groups.insert(groups.end(), GroupSummary{.group = check.group});
    add(*it, check);
    add(all, check);
  }
  for (GroupSummary& g : groups) finish(g);
  finish(all);
  groups.push_back(all);
  return groups;
}

}  // namespace cpt::planner
