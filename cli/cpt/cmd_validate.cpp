// cpt validate [--runs FILE.jsonl] [--vtrain DIR] [--korthikanti] [--runtime NAME] [--rows] [--json]:
// the cost model against measured runs: published runs (planner/validation.h), vTrain's
// measurements and Korthikanti et al.'s Table 5 (planner/paper_runs.h), each priced for the
// runtime that ran it unless --runtime names one for all: the step-time error of each group of
// runs, signed and absolute, and the runs it predicts out of memory although they ran.
#include <CLI/CLI.hpp>
#include <cstdio>
#include <iostream>
#include <iterator>
#include <memory>
#include <nlohmann/json.hpp>

#include "cli/cpt/commands.h"
#include "cli/output.h"
#include "cli/cpt/runtime_flag.h"
#include "core/error.h"
#include "core/str_cat.h"
#include "core/text_table.h"
#include "costmodel/runtime_profile.h"
#include "planner/paper_runs.h"
#include "planner/validation.h"

namespace cpt::cli {
namespace {

using core::str_cat;

struct ValidateOptions {
  std::string runs;
  std::string vtrain;
  bool korthikanti = false;
  std::string runtime;  // empty: each row's own
  bool rows = false;
  bool json = false;
};

std::string percent(double fraction) {
  char text[32];
  std::snprintf(text, sizeof text, "%+.1f%%", 100 * fraction);
  return text;
}

std::string number(double value) {
  char text[32];
  std::snprintf(text, sizeof text, value >= 100 ? "%.0f" : "%.3g", value);
  return text;
}

void print_groups(const std::vector<planner::GroupSummary>& groups) {
  core::TextTable table(
      {"runs", "rows", "compared", "mean error", "mean |error|", "worst", "predicted OOM, ran", "not modelled"},
      {core::Align::kLeft, core::Align::kRight, core::Align::kRight, core::Align::kRight, core::Align::kRight,
       core::Align::kRight, core::Align::kRight, core::Align::kRight});
  for (const auto& g : groups) {
    const bool any = g.compared > 0;
    table.add_row({g.group, str_cat(g.rows), str_cat(g.compared), any ? percent(g.mean_signed_error) : "-",
                   any ? percent(g.mean_absolute_error).substr(1) : "-", any ? percent(g.worst_error) : "-",
                   str_cat(g.predicted_out_of_memory), str_cat(g.not_modelled)});
  }
  std::cout << table.render();
}

void print_rows(const std::vector<planner::RunCheck>& checks) {
  core::TextTable table({"id", "runtime", "measured", "predicted", "error", "outcome", "assumed"},
                        {core::Align::kLeft, core::Align::kLeft, core::Align::kRight, core::Align::kRight,
                         core::Align::kRight, core::Align::kLeft, core::Align::kLeft});
  for (const auto& c : checks) {
    const bool compared = c.outcome == planner::RunOutcome::kCompared;
    table.add_row({c.id, spec::to_string(c.runtime), c.measured > 0 ? number(c.measured) : "-",
                   compared ? number(c.predicted) : "-", compared ? percent(c.error) : "-",
                   compared ? c.metric : str_cat(to_string(c.outcome), ": ", c.detail),
                   c.assumptions.empty() ? "-" : core::join(c.assumptions, "; ")});
  }
  std::cout << table.render() << "\n";
}

core::Json to_json(const std::vector<planner::RunCheck>& checks, const std::vector<planner::GroupSummary>& groups,
                   const std::string& runtime) {
  core::Json out;
  out["runtime"] = runtime.empty() ? "each run's own" : runtime;
  for (const auto& g : groups) {
    out["groups"].push_back({{"group", g.group},
                             {"rows", g.rows},
                             {"compared", g.compared},
                             {"mean_signed_error", g.mean_signed_error},
                             {"mean_absolute_error", g.mean_absolute_error},
                             {"worst_error", g.worst_error},
                             {"predicted_out_of_memory", g.predicted_out_of_memory},
                             {"not_modelled", g.not_modelled}});
  }
  for (const auto& c : checks) {
    core::Json row{
        {"id", c.id}, {"group", c.group}, {"runtime", spec::to_string(c.runtime)}, {"outcome", to_string(c.outcome)}};
    if (c.outcome == planner::RunOutcome::kCompared) {
      row["metric"] = c.metric;
      row["measured"] = c.measured;
      row["predicted"] = c.predicted;
      row["error"] = c.error;
      row["predicted_peak_memory_gib"] = c.predicted_peak_memory_gib;
    } else {
      row["detail"] = c.detail;
    }
    row["assumptions"] = c.assumptions;
    out["rows"].push_back(std::move(row));
  }
  return out;
}

std::vector<planner::RunCheck> checks_of(const ValidateOptions& o) {
  if (o.runs.empty() && o.vtrain.empty() && !o.korthikanti) {
    throw core::ConfigError("--runs, --vtrain or --korthikanti: expected at least one set of runs to check, got none");
  }
  const auto runtime = runtime_named(o.runtime);
  const cost::CostModelOptions options;
  std::vector<planner::RunCheck> checks;
  if (!o.runs.empty()) {
    for (const auto& run : planner::read_published_runs(o.runs)) {
      checks.push_back(planner::check_published_run(run, options, runtime));
    }
  }
  if (!o.vtrain.empty()) {
    auto vtrain = planner::check_vtrain_runs(o.vtrain, options, runtime);
    checks.insert(checks.end(), std::make_move_iterator(vtrain.begin()), std::make_move_iterator(vtrain.end()));
  }
  if (o.korthikanti) {
    auto table = planner::check_korthikanti_runs(options, runtime);
    checks.insert(checks.end(), std::make_move_iterator(table.begin()), std::make_move_iterator(table.end()));
  }
  return checks;
}

void run(const ValidateOptions& o) {
  const auto checks = checks_of(o);
  const auto groups = planner::summarize(checks);
  if (o.json) {
    print_json(to_json(checks, groups, o.runtime));
    return;
  }
  if (o.rows) print_rows(checks);
  const auto runtime = runtime_named(o.runtime);
  std::cout << "Cost model (runtime: " << (runtime ? cost::describe(*runtime) : "each run's own") << ") against "
            << checks.size() << " measured runs"
            << "\nerror: of the step time, predicted / measured - 1 (from tokens/s per GPU, or model TFLOP/s where a "
               "published row has no tokens/s); negative: predicted faster than it ran\n\n";
  print_groups(groups);
}

}  // namespace

void register_validate_command(CLI::App& app) {
  auto o = std::make_shared<ValidateOptions>();
  auto* cmd = app.add_subcommand("validate", "The cost model against published, measured runs (error per source)");
  cmd->add_option("--runs", o->runs,
                  "Measured runs, one JSON object per line (the format of shared/validation/published_runs)");
  cmd->add_option("--vtrain", o->vtrain,
                  "vTrain's measurements: the directory with ground_truth_multi.csv and ground_truth_single.csv");
  cmd->add_flag("--korthikanti", o->korthikanti,
                "Korthikanti et al. 2022 Table 5 (eight A100 runs, kept in cpt; planner/paper_runs.h)");
  add_runtime_option(*cmd, o->runtime,
                     "default: the one each run names (llm-foundry's rows fsdp, NeMo's megatron; vTrain's "
                     "Megatron-DeepSpeed and Korthikanti's runs megatron)");
  cmd->add_flag("--rows", o->rows,
                "Also print every run: measured, predicted, error or why it was not compared, what was assumed");
  cmd->add_flag("--json", o->json, "Print {runtime, groups: [...], rows: [...]}");
  cmd->callback([o] { run(*o); });
}

}  // namespace cpt::cli
