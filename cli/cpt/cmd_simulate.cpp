// cpt simulate PLAN [--trace FILE] [--json]: a discrete-event replay of the plan's training step
// (costmodel/sim/), beside the analytical estimate, with an optional Chrome/Perfetto trace.
#include <CLI/CLI.hpp>
#include <iostream>
#include <memory>
#include <nlohmann/json.hpp>

#include "cli/cpt/commands.h"
#include "cli/cpt/finish_report.h"
#include "cli/output.h"
#include "core/atomic_file.h"
#include "core/output_directory.h"
#include "core/str_cat.h"
#include "core/text_table.h"
#include "costmodel/sim/chrome_trace.h"
#include "costmodel/estimate_json.h"
#include "costmodel/sim/failures.h"
#include "costmodel/sim/plan_simulation.h"
#include "planner/time_to_finish.h"
#include "spec/plan.h"

namespace cpt::cli {
namespace {

struct SimulateOptions {
  std::string plan;
  std::string trace;
  bool json = false;
  cost::sim::SimulationOptions what_if;
  std::int64_t tokens = 0;
  planner::FailureOptions failures;
};

// Expected time to train `tokens` with failures, at the optimal checkpoint interval.
core::Json failure_report(const SimulateOptions& o, const spec::Plan& plan, const cost::CostModelOptions& options,
                          double step_s) {
  const double tokens_per_step = static_cast<double>(plan.parallel.global_batch) * plan.workload.seq_len;
  const core::Seconds solve(static_cast<double>(o.tokens) / tokens_per_step * step_s);
  // A checkpoint holds the weights and the optimizer state as the plan was priced
  // (planner::checkpoint_bytes), written by all ranks at the aggregate storage bandwidth.
  const double ckpt_bytes = planner::checkpoint_bytes(plan.model, options);
  const auto& failures = o.failures;
  const cost::sim::FailureModel f{core::Seconds(failures.mtbf_gpu_hours * 3600 / plan.cluster.num_gpus),
                                  core::Seconds(ckpt_bytes / (failures.checkpoint_write_GBps * 1e9)),
                                  core::Seconds(failures.restart_minutes * 60)};
  const auto best = cost::sim::optimal_checkpoint_interval(solve, f);
  return {{"tokens", o.tokens},
          {"failure_free_hours", solve.value() / 3600},
          {"job_mtbf_hours", f.mtbf_job.value() / 3600},
          {"checkpoint_GB", ckpt_bytes / 1e9},
          {"checkpoint_write_s", f.checkpoint_write.value()},
          {"optimal_checkpoint_interval_minutes", best.interval.value() / 60},
          {"daly_first_order_interval_minutes", best.daly_first_order.value() / 60},
          {"expected_hours", best.wall_time.value() / 3600},
          {"failure_overhead", best.overhead}};
}

void run(const SimulateOptions& o) {
  const auto plan = spec::load_plan(o.plan);
  // In the regime the plan was priced in (a plan for this machine's executor: fp32, eager dispatch).
  const auto options = plan.predicted ? cost::options_of(*plan.predicted) : cost::CostModelOptions{};
  const auto sim = cost::sim::simulate_plan(plan, options, o.what_if);
  if (!o.trace.empty()) core::prepare_output_file(o.trace);
  if (!o.trace.empty()) core::write_file_atomic(o.trace, cost::sim::chrome_trace(sim.result).dump() + "\n");
  const bool failures = o.tokens > 0 && o.failures.mtbf_gpu_hours > 0;
  if (o.json) {
    auto j = cost::sim::simulation_to_json(sim, plan);
    if (failures) j["failures"] = failure_report(o, plan, options, sim.result.step_time.value());
    print_json(j);
    return;
  }
  const auto& r = sim.result;
  std::cout << core::str_cat(plan.model.name, " on ", plan.cluster.num_gpus, " x ", plan.cluster.gpu().name, ", ",
                             config_summary(plan.parallel), "\n\n");
  using core::Align;
  core::TextTable t({"", "simulated", "analytical"}, {Align::kLeft, Align::kRight, Align::kRight});
  t.add_row({"step time s", fixed(r.step_time.value(), 3), fixed(sim.estimate.time.total().value(), 3)});
  t.add_row({"pipeline bubble", fixed(100 * r.bubble_fraction, 1) + "%",
             fixed(100 * sim.estimate.time.pp_bubble.value() / sim.estimate.time.total().value(), 1) + "%"});
  t.add_row({"exposed comm after backward s", fixed(r.exposed_comm.value(), 3),
             fixed((sim.estimate.time.dp_comm).value(), 3)});
  std::cout << t.render() << "\n";
  core::TextTable m({"pp rank", "compute busy s", "simulated peak GiB", "memory model GiB"},
                    {Align::kRight, Align::kRight, Align::kRight, Align::kRight});
  for (std::size_t i = 0; i < r.peak_bytes.size(); ++i) {
    m.add_row({std::to_string(i), fixed(r.compute_busy_s[i], 3),
               fixed(r.peak_bytes[i] / static_cast<double>(core::kGiB), 2),
               fixed(core::to_gibibytes(sim.estimate.memory_per_pp_rank[i].total()), 2)});
  }
  std::cout << m.render()
            << core::str_cat("\n", r.events, " events, critical pp rank ", r.critical_rank,
                             o.what_if.per_rank() ? core::str_cat(" of replica ", r.critical_replica,
                                                                  " (every data-parallel replica simulated)")
                                                  : std::string(),
                             "\n");
  if (failures) {
    const auto f = failure_report(o, plan, options, r.step_time.value());
    std::cout << core::str_cat("\n", o.tokens, " tokens: ", fixed(f["failure_free_hours"].get<double>(), 1),
                               " h without failures; job MTBF ", fixed(f["job_mtbf_hours"].get<double>(), 2),
                               " h; checkpoint ", fixed(f["checkpoint_GB"].get<double>(), 0), " GB in ",
                               fixed(f["checkpoint_write_s"].get<double>(), 0), " s; best interval ",
                               fixed(f["optimal_checkpoint_interval_minutes"].get<double>(), 1),
                               " min (Daly: ", fixed(f["daly_first_order_interval_minutes"].get<double>(), 1),
                               " min); expected ", fixed(f["expected_hours"].get<double>(), 1), " h (+",
                               fixed(100 * f["failure_overhead"].get<double>(), 1), "%)\n");
  }
  if (!o.trace.empty()) std::cout << "wrote " << o.trace << " (open in https://ui.perfetto.dev)\n";
}

}  // namespace

void register_simulate_command(CLI::App& app) {
  auto o = std::make_shared<SimulateOptions>();
  auto* cmd = app.add_subcommand("simulate", "Discrete-event replay of a plan's training step");
  cmd->add_option("PLAN", o->plan, "plan.json (from cpt plan --out)")->required();
  cmd->add_option("--trace", o->trace, "Write a Chrome/Perfetto trace JSON");
  cmd->add_flag("--json", o->json, "Print JSON (the keys of cpt estimate --json, simulated)");
  cmd->add_option("--straggler-rank", o->what_if.straggler_pp_rank, "Pipeline rank holding a slow GPU")
      ->check(CLI::NonNegativeNumber);
  cmd->add_option("--straggler-slowdown", o->what_if.straggler_slowdown, "How much slower, e.g. 0.2 for 20%")
      ->check(CLI::Range(0.0, 100.0));
  cmd->add_option("--link-slowdown", o->what_if.link_slowdown,
                  "Every link (NVLink, NICs, fabric) this many times slower")
      ->check(CLI::Range(1.0, 1000.0));
  cmd->add_option("--straggler-gpu", o->what_if.straggler_gpu,
                  "Per-rank mode: the global rank of a slow GPU (every data-parallel replica is simulated)")
      ->check(CLI::NonNegativeNumber);
  cmd->add_option("--slow-nic-gpu", o->what_if.slow_nic_gpu,
                  "Per-rank mode: the global rank of a GPU whose network link is degraded")
      ->check(CLI::NonNegativeNumber);
  cmd->add_option("--nic-slowdown", o->what_if.nic_slowdown, "Its inter-node transfers take this many times longer")
      ->check(CLI::Range(1.0, 1000.0));
  cmd->add_option("--tokens", o->tokens, "Token budget: expected time to train with failures")
      ->check(CLI::NonNegativeNumber);
  add_failure_options(*cmd, o->failures);
  cmd->callback([o] { run(*o); });
}

}  // namespace cpt::cli
