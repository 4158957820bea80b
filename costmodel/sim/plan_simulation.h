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

// RuntimeError when the plan's configuration does not fit (the cost model says why).
PlanSimulation simulate_plan(const spec::Plan& plan, const CostModelOptions& options = {});

// The keys of `cpt estimate --json` for the simulated step (step time, rates and pp_bubble from the
// simulation, the rest from the estimate) plus bubble_fraction, exposed_comm_s, events and the
// analytical step time.
core::Json simulation_to_json(const PlanSimulation& sim, const spec::Plan& plan);

}  // namespace cpt::cost::sim
