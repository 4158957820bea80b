// cpt simulate PLAN [--trace FILE] [--json]: a discrete-event replay of the plan's training step
// (costmodel/sim/), beside the analytical estimate, with an optional Chrome/Perfetto trace.
#include <CLI/CLI.hpp>
#include <iostream>
#include <memory>
#include <nlohmann/json.hpp>

#include "cli/commands.h"
#include "cli/output.h"
#include "core/atomic_file.h"
#include "core/str_cat.h"
#include "core/text_table.h"
#include "costmodel/sim/chrome_trace.h"
#include "costmodel/sim/plan_simulation.h"
#include "spec/plan.h"

namespace cpt::cli {
namespace {

struct SimulateOptions {
  std::string plan;
  std::string trace;
  bool json = false;
};

void run(const SimulateOptions& o) {
  const auto plan = spec::load_plan(o.plan);
  const auto sim = cost::sim::simulate_plan(plan);
  if (!o.trace.empty()) core::write_file_atomic(o.trace, cost::sim::chrome_trace(sim.result).dump() + "\n");
  if (o.json) {
    print_json(cost::sim::simulation_to_json(sim, plan));
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
    m.add_row({std::to_string(i), fixed(r.compute_busy_s[i], 3), fixed(r.peak_bytes[i] / static_cast<double>(core::kGiB), 2),
               fixed(core::to_gibibytes(sim.estimate.memory_per_pp_rank[i].total()), 2)});
  }
  std::cout << m.render() << core::str_cat("\n", r.events, " events, critical pp rank ", r.critical_rank, "\n");
  if (!o.trace.empty()) std::cout << "wrote " << o.trace << " (open in https://ui.perfetto.dev)\n";
}

}  // namespace

void register_simulate_command(CLI::App& app) {
  auto o = std::make_shared<SimulateOptions>();
  auto* cmd = app.add_subcommand("simulate", "Discrete-event replay of a plan's training step");
  cmd->add_option("PLAN", o->plan, "plan.json (from cpt plan --out)")->required();
  cmd->add_option("--trace", o->trace, "Write a Chrome/Perfetto trace JSON");
  cmd->add_flag("--json", o->json, "Print JSON (the keys of cpt estimate --json, simulated)");
  cmd->callback([o] { run(*o); });
}

}  // namespace cpt::cli
