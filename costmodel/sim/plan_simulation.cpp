#include "costmodel/sim/plan_simulation.h"

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/str_cat.h"
#include "costmodel/compute_sharing.h"
#include "costmodel/estimate_json.h"
#include "costmodel/memory_model.h"
#include "spec/rank_layout.h"

namespace cpt::cost::sim {

namespace {

// Every stage in `stages` computes `slowdown` (0.2 = 20%) longer.
void slow_down(StageDurations& d, const std::vector<int>& stages, double slowdown) {
  for (int s : stages) {
    const auto i = static_cast<std::size_t>(s);
    d.forward_s[i] *= 1 + slowdown;
    d.backward_s[i] *= 1 + slowdown;
    if (!d.weight_grad_s.empty()) d.weight_grad_s[i] *= 1 + slowdown;
  }
}

}  // namespace

PlanSimulation simulate_plan(const spec::Plan& plan, const CostModelOptions& options, const SimulationOptions& w) {
  CostModelOptions o = options;
  o.exact_pipeline = true;
  const auto ev = evaluate(plan.model, plan.cluster, plan.parallel, plan.workload.seq_len, o);
  if (const auto* inf = std::get_if<Infeasible>(&ev)) {
    throw core::RuntimeError(core::str_cat("the plan does not run: ", to_string(inf->reason), ": ", inf->detail));
  }
  PlanSimulation out;
  out.estimate = std::get<Estimate>(ev);
  const auto& p = plan.parallel;
  const auto schedule = spec::make_schedule(p.schedule, p.pp, p.virtual_stages, p.grad_accum());
  const MemoryTerms terms = memory_terms(plan.model, p, plan.workload.seq_len, 1, o);
  std::vector<double> act;
  for (int s = 0; s < plan.stages.num_stages(); ++s) {
    const int first = plan.stages.first_layer(s), layers = plan.stages.layers_in(s);
    act.push_back(terms.activations_of(
        {static_cast<double>(layers), static_cast<double>(plan.model.moe_layers_in(first, layers)), first}));
  }
  std::vector<double> stat;
  for (const auto& m : out.estimate.memory_per_pp_rank) {
    stat.push_back(static_cast<double>((m.weights + m.grads + m.optimizer + m.other + m.teacher + m.ewc).value()));
  }
  StageDurations d = out.estimate.stages;
  if (w.straggler_pp_rank >= 0) {
    if (w.straggler_pp_rank >= p.pp) {
      throw core::ConfigError(
          core::str_cat("--straggler-rank: expected a pipeline rank below ", p.pp, ", got ", w.straggler_pp_rank));
    }
    slow_down(d, plan.stages.stages_of_rank(w.straggler_pp_rank), w.straggler_slowdown);
  }
  for (double& x : d.p2p_after_s) x *= w.link_slowdown;
  d.dp_reduce = d.dp_reduce * w.link_slowdown;
  d.dp_after = d.dp_after * w.link_slowdown;
  if (!w.per_rank()) {
    // Ranks sharing CPU cores compute faster while others wait, as in the estimate's replay.
    const ComputeSharing sharing(plan.cluster, p);
    RankSpeed speed;
    if (sharing.active()) speed = [&](std::span<const char> computing, int r) { return sharing.speed(computing, r); };
    out.result = simulate_step(schedule, d, act, stat, speed);
    return out;
  }
  // Per-rank mode: every data-parallel replica, each with its own durations.
  const spec::RankLayout layout(p, plan.cluster.node.gpus_per_node);
  auto coord = [&](int rank, const char* flag) {
    if (rank >= plan.cluster.num_gpus) {
      throw core::ConfigError(
          core::str_cat(flag, ": expected a GPU rank below ", plan.cluster.num_gpus, ", got ", rank));
    }
    return layout.coord_of(rank);
  };
  std::vector<StageDurations> replicas(static_cast<std::size_t>(p.dp), d);
  if (w.straggler_gpu >= 0) {
    const auto c = coord(w.straggler_gpu, "--straggler-gpu");
    slow_down(replicas[static_cast<std::size_t>(c.dp)], plan.stages.stages_of_rank(c.pp), w.straggler_slowdown);
  }
  if (w.slow_nic_gpu >= 0 && w.nic_slowdown != 1) {
    const int g = w.slow_nic_gpu;
    const auto c = coord(g, "--slow-nic-gpu");
    auto& rd = replicas[static_cast<std::size_t>(c.dp)];
    const int S = plan.stages.num_stages();
    // Pipeline transfers into and out of the GPU that cross nodes.
    for (int s = 0; s + 1 < S && p.pp > 1; ++s) {
      const int from = s % p.pp, to = (s + 1) % p.pp;
      if (from != c.pp && to != c.pp) continue;
      auto peer = c;
      peer.pp = from == c.pp ? to : from;
      if (layout.node_of(layout.rank_of(peer)) != layout.node_of(g))
        rd.p2p_after_s[static_cast<std::size_t>(s)] *= w.nic_slowdown;
    }
    // The GPU's replica group (dp × cp: its gradients' ring), when it crosses nodes: the ring runs
    // at the slow link.
    bool crosses = false;
    for (const int peer : layout.replica_group(g)) crosses = crosses || layout.node_of(peer) != layout.node_of(g);
    if (crosses) {
      rd.dp_slowdown.assign(static_cast<std::size_t>(p.pp), 1.0);
      rd.dp_slowdown[static_cast<std::size_t>(c.pp)] = w.nic_slowdown;
    }
  }
  out.result = simulate_replicas(schedule, replicas, act, stat);
  return out;
}

core::Json simulation_to_json(const PlanSimulation& sim, const spec::Plan& plan) {
  core::Json j = evaluation_to_json(sim.estimate);
  const double step = sim.result.step_time.value();
  const double gpus = plan.cluster.num_gpus;
  j["analytical_step_time_s"] = j["step_time_s"];
  j["step_time_s"] = step;
  j["tokens_per_s_per_gpu"] = static_cast<double>(plan.parallel.global_batch) * plan.workload.seq_len / step / gpus;
  j["mfu"] = sim.estimate.mfu * sim.estimate.time.total().value() / step;  // same FLOPs, simulated time
  j["model_tflops_per_gpu"] = sim.estimate.model_tflops_per_gpu * sim.estimate.time.total().value() / step;
  j["hfu"] = sim.estimate.hfu * sim.estimate.time.total().value() / step;
  // The breakdown is the estimate's critical rank's: its bubble is that rank's simulated wait (with
  // uneven stages more than bubble_fraction, the busiest rank's).
  const auto critical = static_cast<std::size_t>(sim.estimate.critical_pp_rank);
  if (critical < sim.result.idle_s.size()) j["time_s"]["pp_bubble"] = sim.result.idle_s[critical];
  j["breakdown_pp_rank"] = sim.estimate.critical_pp_rank;
  j["bubble_fraction"] = sim.result.bubble_fraction;
  j["exposed_comm_s"] = sim.result.exposed_comm.value();
  j["critical_pp_rank"] = sim.result.critical_rank;
  j["critical_replica"] = sim.result.critical_replica;
  j["events"] = sim.result.events;
  core::Json peaks = core::Json::array();
  for (double b : sim.result.peak_bytes) peaks.push_back(b / static_cast<double>(core::kGiB));
  j["simulated_peak_memory_GiB_per_pp_rank"] = peaks;
  return j;
}

}  // namespace cpt::cost::sim
