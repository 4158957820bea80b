#pragma once
// simulate_plan(): the simulator applied to a plan file — the cost model's estimate for the plan's
// configuration (exact pipeline), its schedule, each stage's activations and each rank's static
// memory, fed to simulate_step.

#include "costmodel/sim/step_simulator.h"
#include "spec/plan.h"

namespace cpt::cost::sim {

struct PlanSimulation {
  Estimate estimate;         // the analytical answer for the same configuration
  SimulationResult result;   // the simulated step
};

// What-ifs of the simulated step. The job runs at the pace of its slowest replica, so a slow GPU
// is simulated in the replica that holds it: every stage of its pipeline rank slows down.
struct SimulationOptions {
  int straggler_pp_rank = -1;       // -1: none
  double straggler_slowdown = 0;    // 0.2 = that rank's compute takes 20% longer
  double link_slowdown = 1;         // transfers and data-parallel collectives take this many times longer
};

// RuntimeError when the plan's configuration does not fit (the cost model says why).
PlanSimulation simulate_plan(const spec::Plan& plan, const CostModelOptions& options = {},
                             const SimulationOptions& what_if = {});

// The keys of `cpt estimate --json` for the simulated step (step time, rates and pp_bubble from the
// simulation, the rest from the estimate) plus bubble_fraction, exposed_comm_s, events and the
// analytical step time.
core::Json simulation_to_json(const PlanSimulation& sim, const spec::Plan& plan);

}  // namespace cpt::cost::sim
