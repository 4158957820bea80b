#pragma once
// simulate_plan(): the simulator applied to a plan file — the cost model's estimate for the plan's
// configuration (exact pipeline), its schedule, each stage's activations and each rank's static
// memory, fed to simulate_step.

#include "costmodel/sim/step_simulator.h"
#include "spec/plan.h"

namespace cpt::cost::sim {

struct PlanSimulation {
  Estimate estimate;        // the analytical answer for the same configuration (on the slower links)
  SimulationResult result;  // the simulated step
  // A straggler or a per-rank what-if changed the simulated step beyond what the estimate prices
  // (link_slowdown does not: the estimate is priced on the slower links).
  bool beyond_estimate = false;
};

// What-ifs of the simulated step.
//   Symmetric (one replica stands for all): straggler_pp_rank slows every stage of that pipeline
//   rank (the job runs at its slowest replica's pace); link_slowdown slows every link (NVLink,
//   NICs, fabric: spec::with_slower_links), the plan priced again on them.
//   Per rank (every data-parallel replica simulated, sim::simulate_replicas): straggler_gpu is one
//   GPU by global rank, whose tensor/context-parallel group runs at its pace (their collectives
//   synchronise every layer) while the other replicas wait for it only at the gradient
//   reductions; slow_nic_gpu is one GPU whose network link is degraded: its inter-node pipeline
//   transfers, the data-parallel collectives of its group (a ring runs at its slowest link) and
//   its pipeline rank's collectives inside the passes that cross nodes (ZeRO-3, expert
//   all-to-alls; every replica of that rank waits for them) take nic_slowdown times longer,
//   intra-node (NVLink) traffic is untouched.
struct SimulationOptions {
  int straggler_pp_rank = -1;     // -1: none
  double straggler_slowdown = 0;  // 0.2 = the straggler's compute takes 20% longer
  double link_slowdown = 1;       // every link this many times slower (latency ×, bandwidth ÷)
  int straggler_gpu = -1;         // -1: none; else a global rank (per-rank mode)
  int slow_nic_gpu = -1;          // -1: none; else a global rank (per-rank mode)
  double nic_slowdown = 1;        // its network transfers take this many times longer
  [[nodiscard]] bool per_rank() const { return straggler_gpu >= 0 || slow_nic_gpu >= 0; }
};

// RuntimeError when the plan's configuration does not fit (the cost model says why).
PlanSimulation simulate_plan(const spec::Plan& plan, const CostModelOptions& options = {},
                             const SimulationOptions& what_if = {});

// The keys of `cpt estimate --json` for the simulated step (step time, rates and pp_bubble from the
// simulation, the rest from the estimate) plus bubble_fraction, exposed_comm_s, events and the
// analytical step time.
core::Json simulation_to_json(const PlanSimulation& sim, const spec::Plan& plan);

}  // namespace cpt::cost::sim
