#pragma once
// What `cpt plan` reports about a search, apart from report.md (cli/cpt/plan_report.h): the --json
// contract of docs/planner.md, candidates.csv, and the console's tables.
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "core/json_reader.h"
#include "planner/planner.h"
#include "planner/time_to_finish.h"
#include "spec/runtime.h"

namespace cpt::cli {

// {enumerated, evaluated, feasible, [seconds], rejected, threads, top, pareto, [sizes]}: each plan
// as {config, estimate}.
core::Json planner_result_json(const planner::PlannerResult& result, bool with_seconds);

// One line per feasible plan, best first, with a header: the configuration and its estimate.
std::string candidates_csv(const planner::PlannerResult& result);

// "Best plan at each size": the best plan of every GPU count searched, the job's rate, and with a
// token budget the expected time and (with a price) cost to finish it; failures grow with the GPUs.
void print_sizes(const planner::PlannerResult& result, std::int64_t tokens, double price_per_gpu_hour,
                 const planner::FinishInputs& finish);

// The top plans (with their simulated step times where given), the error band of #1's step time,
// `export_note` (plan_report.h's export_differs_note) and `finish` (the time to finish) when not
// empty, and the rejections.
void print_top(const planner::PlannerResult& result, const std::vector<double>& simulated,
               const spec::ClusterSpec& cluster, spec::Runtime runtime, const std::string& finish,
               const std::string& export_note);

}  // namespace cpt::cli
