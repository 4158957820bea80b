#pragma once
// report.md of `cpt plan --out`: the ranking, the best plan's step and memory by part (the
// continual recipe's teacher, KL and EWC terms among them), the best plan under each export's
// runtime, the rejections and the time to finish.
#include <string>

#include "costmodel/cost_options.h"
#include "planner/planner.h"
#include "spec/hardware_spec.h"
#include "spec/model_spec.h"

namespace cpt::cli {

struct PlanReportFacts {
  int global_batch = 0;
  int seq_len = 0;
  std::string objective;
  std::string margin;  // ", leaving 10% of the HBM free", or empty
};

// When the export for the runtime the plan is priced for writes the best plan as another
// configuration (planner::config_as_exported: Megatron-LM's ZeRO-3 beside a pipeline is ZeRO-1),
// one line: the file, what changes and why, that configuration priced the same way, and
// `--target`, which keeps only what the framework runs as planned. Empty otherwise.
std::string export_differs_note(const spec::ModelSpec& model, const spec::ClusterSpec& cluster, int seq_len,
                                const planner::Candidate& best, const cost::CostModelOptions& priced_with);

// `finish`: cli/cpt/finish_report.h's lines for the best plan with "- " after each newline; empty: no
// budget.
std::string report_md(const spec::ModelSpec& model, const spec::ClusterSpec& cluster, const PlanReportFacts& facts,
                      const planner::PlannerResult& r, const cost::CostModelOptions& priced_with,
                      const std::string& finish);

}  // namespace cpt::cli
