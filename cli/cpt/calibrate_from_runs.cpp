#include "cli/cpt/calibrate_from_runs.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <iostream>
#include <nlohmann/json.hpp>

#include "cli/cpt/local_profile.h"
#include "cli/output.h"
#include "cli/cpt/recipe_flag.h"
#include "core/atomic_file.h"
#include "core/error.h"
#include "core/json_reader.h"
#include "core/output_directory.h"
#include "core/str_cat.h"
#include "costmodel/calibration_fit.h"
#include "costmodel/step_estimator.h"
#include "spec/hardware_catalog.h"
#include "spec/hardware_io.h"
#include "spec/measured_run.h"
#include "spec/plan.h"

namespace cpt::cli {

using core::str_cat;
using Json = nlohmann::ordered_json;
namespace fs = std::filesystem;

namespace {

// One cpt train output directory: its plan and the parts of its step the executor measured.
struct Run {
  std::string dir;
  spec::Plan plan;
  double step = 0, compute = 0, comm = 0;
  bool cpu = true;
  std::optional<spec::TrainConfig> recipe;  // the continual recipe it trained with
};

std::vector<Run> read_runs(const std::vector<std::string>& dirs, const spec::ClusterSpec& base,
                           const fs::path& base_path) {
  std::vector<Run> runs;
  for (const auto& d : dirs) {
    Run r;
    r.dir = d;
    r.plan = spec::load_plan(fs::path(d) / "plan.json");
    const auto m = spec::load_measured_run(fs::path(d) / "measured.json");
    if (m.padded) {
      throw core::ConfigError(
          str_cat("--from-runs: ", (fs::path(d) / "measured.json").string(),
                  ": $.packing: expected \"packed\" (steps of the plan's seq_len), got \"padded\""));
    }
    const auto& b = m.ranks.front().step_time_breakdown_s;
    r.step = m.step_time_s;
    r.compute = b.compute_and_other;
    r.comm = b.tp_comm + b.cp_comm + b.dp_comm + b.ep_comm;
    r.cpu = m.on_cpu();
    r.recipe = run_recipe(d);
    if (r.plan.parallel.world_size() > base.node.gpus_per_node) {
      throw core::ConfigError(str_cat("--from-runs: ", d, " ran ", r.plan.parallel.world_size(), " ranks; the profile ",
                                      base_path.string(), " has ", base.node.gpus_per_node, " per node"));
    }
    runs.push_back(std::move(r));
  }
  return runs;
}

// A run's step as the cost model prices it on a profile, in the parts measured.json has.
struct Parts {
  double step, compute, comm;
  // In compute, priced from the communication and the node's measurements, not from its rates:
  // the computation lost beside overlapped communication (`other`) and resuming from blocking
  // calls (NodeSpec::compute_lost_resuming_from_call).
  double known;
};

Parts predict(const spec::ClusterSpec& cluster, const Run& r) {
  auto c = cluster;
  c.num_nodes = 1;
  c.num_gpus = r.plan.parallel.world_size();
  cost::CostModelOptions options;
  options.precision = r.cpu ? spec::Precision::kFp32 : spec::Precision::kBf16;
  options = cost::as_run_by_cpt_executor(options);
  // The continual recipe the run trained with, as `cpt compare` prices it.
  options = with_recipe(options, r.recipe);
  auto time_on = [&](const spec::ClusterSpec& on) {
    const auto ev = cost::evaluate(r.plan.model, on, r.plan.parallel, r.plan.workload.seq_len, options);
    const auto* e = std::get_if<cost::Estimate>(&ev);
    if (e == nullptr)
      throw core::ConfigError(str_cat("--from-runs: ", r.dir, ": the plan is infeasible on the profile"));
    return e->time;
  };
  const auto t = time_on(c);
  const double comm = (t.tp_comm + t.cp_comm + t.dp_comm + t.ep_comm).value();
  const double compute = t.total().value() - comm - (t.pp_comm + t.pp_bubble).value();
  double resume = 0;
  if (c.node.compute_lost_resuming_from_call) {
    auto without = c;
    without.node.compute_lost_resuming_from_call.reset();
    const auto u = time_on(without);
    resume = compute - (u.total() - u.tp_comm - u.cp_comm - u.dp_comm - u.ep_comm - u.pp_comm - u.pp_bubble).value();
  }
  return Parts{t.total().value(), compute, comm, t.other.value() + resume};
}

struct Refit {
  spec::ClusterSpec cluster;
  cost::ScaleAndFixed comm, compute;
};

// Each part split into its throughput term and its count of fixed-cost events, by evaluating with
// fixed costs of 0 and of 1 ms (the cost model is linear in them). The communication first; then
// the computation on a profile with the communication's fit, whose overlap charge (priced from
// the communication) and resume cost (measured per call) are a known part of the measured
// computation, not a scaled one.
Refit refit(const spec::ClusterSpec& base, const std::vector<Run>& runs) {
  auto with_fixed = [&](double comm_scale, double kernel_s, double call_s) {
    return cost::rescaled(base, 1.0, comm_scale, core::Seconds(kernel_s), core::Seconds(call_s));
  };
  std::vector<cost::RunTerm> comm_terms;
  const auto comm_zero = with_fixed(1.0, 0, 0), comm_one = with_fixed(1.0, 1e-3, 1e-3);
  for (const auto& r : runs) {
    const auto p0 = predict(comm_zero, r), p1 = predict(comm_one, r);
    comm_terms.push_back({p0.comm, (p1.comm - p0.comm) / 1e-3, r.comm});
  }
  const auto comm_fit = cost::fit_scale_and_fixed(comm_terms);
  const double comm_scale = comm_fit.runs > 0 ? comm_fit.scale : 1.0;
  const double call_s =
      comm_fit.runs > 0 ? comm_fit.fixed_s
                        : base.gpu().collective_overhead.value_or(cost::CostModelOptions{}.collective_overhead).value();
  std::vector<cost::RunTerm> compute_terms;
  const auto zero = with_fixed(comm_scale, 0, call_s), one = with_fixed(comm_scale, 1e-3, call_s);
  for (const auto& r : runs) {
    const auto p0 = predict(zero, r), p1 = predict(one, r);
    const double a0 = p0.compute - p0.known, a1 = p1.compute - p1.known;
    compute_terms.push_back({a0, (a1 - a0) / 1e-3, r.compute, p0.known});
  }
  const auto compute_fit = cost::fit_scale_and_fixed(compute_terms);
  // No run to fit the computation to: the profile's own rates and dispatch cost stand.
  const core::Seconds kernel_s = compute_fit.runs > 0
                                     ? core::Seconds(compute_fit.fixed_s)
                                     : base.gpu().kernel_overhead.value_or(cost::CostModelOptions{}.kernel_overhead);
  return {
      cost::rescaled(base, compute_fit.runs > 0 ? compute_fit.scale : 1.0, comm_scale, kernel_s, core::Seconds(call_s)),
      comm_fit, compute_fit};
}

Json report_json(const fs::path& out, const fs::path& base_path, const spec::ClusterSpec& base, const Refit& fit,
                 const std::vector<Run>& runs) {
  Json rows = Json::array();
  for (const auto& r : runs) {
    const auto before = predict(base, r), after = predict(fit.cluster, r);
    rows.push_back({{"run", r.dir},
                    {"measured_step_s", r.step},
                    {"predicted_step_s_before", before.step},
                    {"predicted_step_s_after", after.step},
                    {"rel_err_before", (before.step - r.step) / r.step},
                    {"rel_err_after", (after.step - r.step) / r.step}});
  }
  return {{"profile", out.string()},
          {"base", base_path.string()},
          {"compute_scale", fit.compute.scale},
          {"kernel_overhead_us", fit.compute.fixed_s * 1e6},
          {"compute_runs", fit.compute.runs},
          {"compute_fit_rms_relative_error", fit.compute.rms_relative_error},
          {"comm_scale", fit.comm.scale},
          {"collective_overhead_us", fit.comm.fixed_s * 1e6},
          {"comm_runs", fit.comm.runs},
          {"comm_fit_rms_relative_error", fit.comm.rms_relative_error},
          {"runs", rows}};
}

void print_report(const fs::path& out, const Refit& fit, const Json& report) {
  const auto& rows = report["runs"];
  std::cout << str_cat("recalibrated ", out.string(), " from ", rows.size(), " runs: computation x",
                       fixed(fit.compute.scale, 3), " + ", fixed(fit.compute.fixed_s * 1e6, 1), " us per kernel (",
                       fit.compute.runs, " runs, ", fixed(100 * fit.compute.rms_relative_error, 0),
                       "% rms), communication x", fixed(fit.comm.scale, 3), " + ", fixed(fit.comm.fixed_s * 1e6, 0),
                       " us per call (", fit.comm.runs, " runs, ", fixed(100 * fit.comm.rms_relative_error, 0),
                       "% rms)\n  run                                   step s   before    after\n");
  for (const auto& row : rows) {
    auto name = row["run"].get<std::string>();
    if (name.size() > 36) name = "..." + name.substr(name.size() - 33);
    std::cout << str_cat("  ", name, std::string(name.size() < 36 ? 36 - name.size() : 1, ' '), "  ",
                         fixed(row["measured_step_s"].get<double>(), 4), "  ",
                         fixed(100 * row["rel_err_before"].get<double>(), 1), "%  ",
                         fixed(100 * row["rel_err_after"].get<double>(), 1), "%\n");
  }
}

}  // namespace

void refit_from_runs(const FromRunsOptions& o) {
  const fs::path base_path = o.base.empty() ? local_profile_path() : fs::path(o.base);
  if (!fs::exists(base_path)) {
    throw core::ConfigError(
        str_cat("--base: ", base_path.string(), " does not exist (calibrate first, or name a profile)"));
  }
  const auto base = spec::HardwareCatalog::builtin().load_cluster_file(base_path);
  const std::vector<Run> runs = read_runs(o.from_runs, base, base_path);
  const Refit fit = refit(base, runs);
  const fs::path out = o.out.empty() ? base_path : fs::path(o.out);
  core::prepare_output_file(out);
  core::write_file_atomic(out, spec::cluster_to_json(fit.cluster).dump(2) + "\n");
  const Json report = report_json(out, base_path, base, fit, runs);
  auto report_path = out;
  report_path.replace_extension(".runs-report.json");
  core::write_file_atomic(report_path, report.dump(2) + "\n");
  if (o.json) {
    print_json(report);
    return;
  }
  print_report(out, fit, report);
}

}  // namespace cpt::cli
