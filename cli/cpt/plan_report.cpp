#include "cli/cpt/plan_report.h"

#include <nlohmann/json.hpp>
#include <sstream>
#include <utility>

#include "cli/output.h"
#include "cli/cpt/recipe_flag.h"
#include "core/str_cat.h"
#include "costmodel/error_band.h"
#include "costmodel/estimate_json.h"
#include "costmodel/runtime_profile.h"
#include "planner/export_gaps.h"
#include "planner/handoff.h"

namespace cpt::cli {
namespace {

using core::fixed;

// The best plan's step time and peak memory by part, as `cpt estimate` splits them (zero parts
// left out): the continual recipe's `continual` time and `teacher` and `ewc` memory among them.
std::string breakdown_md(const cost::Estimate& best) {
  std::ostringstream md;
  md << "\n## The best plan's step and memory\n\n| step part | s |\n|---|---|\n";
  const core::Json time = cost::time_to_json(best.time), memory = cost::memory_to_json(best.peak_memory());
  for (const auto& [part, seconds] : time.items()) {
    if (seconds.get<double>() > 0) md << "| " << part << " | " << fixed(seconds.get<double>(), 3) << " |\n";
  }
  md << "\n| memory part (peak rank) | GiB |\n|---|---|\n";
  for (const auto& [part, gib] : memory.items()) {
    if (gib.get<double>() > 0) md << "| " << part << " | " << fixed(gib.get<double>(), 2) << " |\n";
  }
  return md.str();
}

constexpr std::pair<const char*, spec::Runtime> kExports[] = {
    {"megatron_args.sh", spec::Runtime::kMegatron},
    {"ds_config.json", spec::Runtime::kDeepSpeed},
    {"torchtitan.toml, torchtitan_config.py", spec::Runtime::kTorchtitan},
    {"torchrun.sh, slurm.sbatch", spec::Runtime::kCpt}};

// `config` priced for `runtime`: its step, throughput and peak, or why it is infeasible.
std::string priced(const spec::ModelSpec& model, const spec::ClusterSpec& cluster, int seq_len,
                   const spec::ParallelConfig& config, const cost::CostModelOptions& priced_with,
                   spec::Runtime runtime) {
  const auto evaluation = cost::evaluate(model, cluster, config, seq_len, cost::for_runtime(priced_with, runtime));
  if (const auto* e = std::get_if<cost::Estimate>(&evaluation)) {
    return core::str_cat(fixed(e->time.total().value(), 3), " s a step, ", fixed(e->tokens_per_s_per_gpu, 0),
                         " tokens/s/GPU, ", fixed(core::to_gibibytes(e->peak_memory().total()), 1), " GiB at peak");
  }
  return "infeasible: " + std::get<cost::Infeasible>(evaluation).detail;
}

// The best plan as each hand-off file runs it (planner/handoff.h): the configuration the file
// writes, priced for the framework that reads it (report.md's "Each export under its runtime").
std::string exports_md(const spec::ModelSpec& model, const spec::ClusterSpec& cluster, int seq_len,
                       const planner::Candidate& best, const cost::CostModelOptions& priced_with) {
  std::ostringstream md;
  md << "\n## Each export under its runtime\n\nThe best plan's configuration as the framework reading each file "
        "runs it (docs/costmodel.md, \"Runtimes\"): where a file cannot state it, the configuration it writes "
        "instead (its own notes say why).\n\n| file | runtime | step s | tokens/s/GPU | peak GiB | where the step "
        "should "
        "land |\n|---|---|---|---|---|---|\n";
  for (const auto& [file, runtime] : kExports) {
    if (const auto why = planner::export_cannot_run(model, best.config, seq_len, runtime)) {
      md << "| " << file << " | " << spec::to_string(runtime) << " | - | - | - | cannot run it: " << *why << " |\n";
      continue;
    }
    const auto written = planner::config_as_exported(model, best.config, seq_len, runtime);
    const auto changes = planner::describe_changes(best.config, written);
    md << "| " << file << " | " << spec::to_string(runtime) << (changes.empty() ? "" : " as " + changes) << " | ";
    const auto evaluation = cost::evaluate(model, cluster, written, seq_len, cost::for_runtime(priced_with, runtime));
    if (const auto* e = std::get_if<cost::Estimate>(&evaluation)) {
      md << fixed(e->time.total().value(), 3) << " | " << fixed(e->tokens_per_s_per_gpu, 0) << " | "
         << fixed(core::to_gibibytes(e->peak_memory().total()), 1) << " | "
         << cost::describe_band(e->time.total(), runtime, cluster.gpu()) << " |\n";
    } else {
      md << "- | - | - | " << std::get<cost::Infeasible>(evaluation).detail << " |\n";
    }
  }
  return md.str();
}

}  // namespace

std::string export_differs_note(const spec::ModelSpec& model, const spec::ClusterSpec& cluster, int seq_len,
                                const planner::Candidate& best, const cost::CostModelOptions& priced_with) {
  const spec::Runtime runtime = priced_with.runtime;
  const auto written = planner::config_as_exported(model, best.config, seq_len, runtime);
  if (written == best.config) return "";
  std::string file;
  for (const auto& [names, exported_for] : kExports) {
    if (exported_for == runtime) file = std::string(names).substr(0, std::string(names).find(','));  // the first
  }
  const auto gap = planner::find_export_gap(model, best.config, seq_len, runtime);
  return core::str_cat("note: ", file, " writes #1 with ", planner::describe_changes(best.config, written), " (",
                       planner::describe(gap, best.config, model, seq_len),
                       "); as written: ", priced(model, cluster, seq_len, written, priced_with, runtime),
                       ". `--target ", spec::to_string(runtime), "` plans only what its export runs as planned");
}

std::string report_md(const spec::ModelSpec& model, const spec::ClusterSpec& cluster, const PlanReportFacts& o,
                      const planner::PlannerResult& r, const cost::CostModelOptions& priced_with,
                      const std::string& finish) {
  const spec::Runtime runtime = priced_with.runtime;
  const std::string recipe = describe_recipe(priced_with);
  std::ostringstream md;
  md << "# cpt plan: " << model.name << " on " << cluster.num_gpus << " x " << cluster.gpu().display_name << "\n\n"
     << "Global batch " << o.global_batch << " sequences of " << o.seq_len << " tokens; objective " << o.objective
     << o.margin << ". " << r.enumerated << " candidates, " << r.evaluated << " evaluated, " << r.feasible
     << " feasible.\n\n"
     << "| # | configuration | step s | tokens/s/GPU | MFU | peak GiB |\n|---|---|---|---|---|---|\n";
  for (std::size_t i = 0; i < r.top.size(); ++i) {
    const auto& c = r.top[i];
    md << "| " << i + 1 << " | " << config_summary(c.config) << " | " << fixed(c.estimate.time.total().value(), 3)
       << " | " << fixed(c.estimate.tokens_per_s_per_gpu, 0) << " | " << fixed(100 * c.estimate.mfu, 1) << "% | "
       << fixed(core::to_gibibytes(c.estimate.peak_memory().total()), 1) << " |\n";
  }
  md << "\nPriced for " << cost::describe(runtime) << ", continual recipe: " << recipe << ".";
  if (!r.top.empty()) {
    md << " Step time of the best plan: "
       << cost::describe_band(r.top.front().estimate.time.total(), runtime, cluster.gpu()) << ".";
  }
  md << "\n";
  if (!r.top.empty()) md << breakdown_md(r.top.front().estimate);
  if (!r.top.empty()) md << exports_md(model, cluster, o.seq_len, r.top.front(), priced_with);
  md << "\n## Rejected\n\n| reason | candidates |\n|---|---|\n";
  for (int i = 0; i < planner::kNumRejectReasons; ++i) {
    if (r.rejected[static_cast<std::size_t>(i)] > 0) {
      md << "| " << planner::to_string(static_cast<planner::RejectReason>(i)) << " | "
         << r.rejected[static_cast<std::size_t>(i)] << " |\n";
    }
  }
  if (!finish.empty()) md << "\n## Time to finish\n\n- " << finish << "\n";
  return md.str();
}

}  // namespace cpt::cli
