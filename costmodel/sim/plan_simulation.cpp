#include "costmodel/sim/plan_simulation.h"

#include <nlohmann/json.hpp>

#include "core/check.h"
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

// The collectives inside the passes of pipeline rank `pp_rank` that cross nodes (ZeRO-3's gathers
// and reduce-scatters, expert all-to-alls; TP and CP stay inside a node) run at a link `factor`
// times slower, and every replica's stages of that rank wait for them (their groups span the
// replicas; a ring runs at its slowest link): those stages priced again on the slower network.
void slow_network_inside_passes(const spec::Plan& plan, const spec::ClusterSpec& cluster, const CostModelOptions& o,
                                double factor, int pp_rank, std::vector<StageDurations>& replicas) {
  const auto ev =
      evaluate(plan.model, spec::with_slower_network(cluster, factor), plan.parallel, plan.workload.seq_len, o);
  const auto* slowed = std::get_if<Estimate>(&ev);
  CPT_CHECK(slowed != nullptr, "a plan that fits does not fit on a slower network");
  const StageDurations& from = slowed->stages;
  for (StageDurations& d : replicas) {
    for (const int s : plan.stages.stages_of_rank(pp_rank)) {
      const auto i = static_cast<std::size_t>(s);
      d.forward_s[i] = from.forward_s[i];
      d.backward_s[i] = from.backward_s[i];
      if (!d.weight_grad_s.empty()) d.weight_grad_s[i] = from.weight_grad_s[i];
      if (!d.zero3_overlapped_forward_s.empty()) {
        d.zero3_overlapped_forward_s[i] = from.zero3_overlapped_forward_s[i];
        d.zero3_overlapped_backward_s[i] = from.zero3_overlapped_backward_s[i];
      }
    }
  }
}

}  // namespace

PlanSimulation simulate_plan(const spec::Plan& plan, const CostModelOptions& options, const SimulationOptions& w) {
  CostModelOptions o = options;
  o.exact_pipeline = true;
  // Slower links are priced as the cost model prices any links: every call on them (tensor and
  // context parallelism, ZeRO-3's gathers, expert all-to-alls, transfers, reductions), exposed or
  // hidden as their new length leaves them.
  const spec::ClusterSpec cluster =
      w.link_slowdown != 1 ? spec::with_slower_links(plan.cluster, w.link_slowdown) : plan.cluster;
  const auto ev = evaluate(plan.model, cluster, plan.parallel, plan.workload.seq_len, o);
  if (const auto* inf = std::get_if<Infeasible>(&ev)) {
    throw core::RuntimeError(core::str_cat("the plan does not run: ", to_string(inf->reason), ": ", inf->detail));
  }
  PlanSimulation out;
  out.estimate = std::get<Estimate>(ev);
  out.beyond_estimate = w.straggler_pp_rank >= 0 || w.per_rank();
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
  if (w.slow_nic_gpu >= 0 && w.nic_slowdown != 1) {
    slow_network_inside_passes(plan, cluster, o, w.nic_slowdown, coord(w.slow_nic_gpu, "--slow-nic-gpu").pp, replicas);
  }
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
  if (sim.beyond_estimate) {
    // What the what-if adds that the estimate's parts do not hold (a straggler's slower compute, a
    // slow link's longer calls), so that the parts still add up to the simulated step.
    double parts = 0;
    for (const auto& [name, seconds] : j["time_s"].items()) parts += seconds.get<double>();
    j["time_s"]["what_if"] = step - parts;
  }
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
