#include "costmodel/step_estimator.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <optional>

#include "core/str_cat.h"
#include "costmodel/collective_model.h"
#include "costmodel/layer_costs.h"
#include "costmodel/pipeline_replay.h"
#include "costmodel/topology.h"
#include "spec/pipeline_schedule.h"
#include "spec/rank_layout.h"
#include "spec/stage_partition.h"

namespace cpt::cost {

using core::Bytes;
using core::Seconds;
using core::str_cat;

std::string to_string(InfeasibleReason r) {
  switch (r) {
    case InfeasibleReason::kInvalidConfig:
      return "invalid_config";
    case InfeasibleReason::kUnsupportedCombination:
      return "unsupported_combination";
    case InfeasibleReason::kOutOfMemory:
      return "out_of_memory";
  }
  return "?";
}

namespace {

std::string gib(Bytes b) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f", core::to_gibibytes(b));
  return buf;
}

// Time to move `bytes` over PCIe for CPU offload (Gen4 x16, per direction).
constexpr double kPcieBytesPerSecond = 25e9;
// Adam on the host: parameters updated per second by a vectorised CPU optimizer (DeepSpeed's
// CPU Adam reports ~1e9 parameters/s per socket).
constexpr double kCpuAdamParamsPerSecond = 1e9;

}  // namespace

Evaluation evaluate(const spec::ModelSpec& model, const spec::ClusterSpec& cluster, const spec::ParallelConfig& p,
                    int seq_len, const CostModelOptions& o) {
  // Invalid configurations need no graph.
  if (auto errors = spec::find_parallel_config_errors(p, model, seq_len, cluster.num_gpus); !errors.empty()) {
    return Infeasible{InfeasibleReason::kInvalidConfig, errors.front()};
  }
  return evaluate(model, cluster, p, seq_len, o, Topology(cluster));
}

Evaluation evaluate(const spec::ModelSpec& model, const spec::ClusterSpec& cluster, const spec::ParallelConfig& p,
                    int seq_len, const CostModelOptions& options, const Topology& topo) {
  // A calibrated profile may carry its own fixed costs per kernel and per collective call
  // (`cpt calibrate --from-runs`); they replace the options' defaults. Copied only then: the
  // planner evaluates millions of configurations.
  const auto& gpu = cluster.node.gpu;
  CostModelOptions calibrated;
  if (gpu.kernel_overhead || gpu.collective_overhead) {
    calibrated = options;
    if (gpu.kernel_overhead) calibrated.kernel_overhead = *gpu.kernel_overhead;
    if (gpu.collective_overhead) calibrated.collective_overhead = *gpu.collective_overhead;
  }
  const CostModelOptions& o = gpu.kernel_overhead || gpu.collective_overhead ? calibrated : options;
  // 1. Validity: every rule of ParallelConfig, then combinations this model does not cover.
  if (auto errors = spec::find_parallel_config_errors(p, model, seq_len, cluster.num_gpus); !errors.empty()) {
    return Infeasible{InfeasibleReason::kInvalidConfig, errors.front()};
  }
  const spec::RankLayout layout(p, cluster.node.gpus_per_node);
  if (p.hybrid_shard) {
    if (auto e = topo.hybrid_shard_error(layout)) return Infeasible{InfeasibleReason::kInvalidConfig, *e};
  }
  if (p.cp > 1 && !o.flash_attention) {
    return Infeasible{InfeasibleReason::kUnsupportedCombination,
                      "context parallelism needs a fused (flash) attention kernel"};
  }
  const int m = p.grad_accum();
  const auto stages = spec::StagePartition::balanced(model.layers, p.pp, p.virtual_stages);
  std::optional<spec::PipelineSchedule> schedule;
  if (o.exact_pipeline) schedule = spec::make_schedule(p.schedule, p.pp, p.virtual_stages, m);

  // 2. Memory of every pipeline rank.
  Estimate est;
  est.memory_per_pp_rank = memory_per_pp_rank(model, p, seq_len, stages, schedule ? &*schedule : nullptr, layout, o);
  for (int r = 0; r < p.pp; ++r) {
    if (est.memory_per_pp_rank[static_cast<std::size_t>(r)].total() > est.peak_memory().total()) est.worst_pp_rank = r;
  }
  const MemoryBreakdown& peak = est.peak_memory();
  if (peak.total() > cluster.gpu().hbm_capacity) {
    return Infeasible{InfeasibleReason::kOutOfMemory,
                      str_cat(gib(peak.total()), " GiB > ", gib(cluster.gpu().hbm_capacity), " GiB on pp rank ",
                              est.worst_pp_rank, " (weights ", gib(peak.weights), ", grads ", gib(peak.grads),
                              ", optimizer ", gib(peak.optimizer), ", activations ", gib(peak.activations), ", other ",
                              gib(peak.other), ")")};
  }

  // 3. Where each group runs.
  const GroupPlacement tp_g = topo.place(layout, spec::Axis::kTp);
  const GroupPlacement cp_g = topo.place(layout, spec::Axis::kCp);
  GroupPlacement dp_g = topo.place(layout, spec::Axis::kDp);
  const double eff = o.network_efficiency;

  // 4. Per-layer costs and the communication inside a stage.
  const BlockCosts blk = block_costs(model, p, seq_len, cluster.gpu(), o);
  const HeadCosts head = head_costs(model, p, seq_len, cluster.gpu(), o);
  const Seconds call = o.collective_overhead;
  const Seconds tp_one = p.tp > 1 ? collective_time(Collective::kAllReduce, blk.tp_bytes, tp_g, eff) + call : Seconds(0);
  auto cp_exposed = [&](Bytes bytes, Seconds attention) {
    if (p.cp <= 1) return Seconds(0);
    // cp − 1 ring steps, each a transfer of one block to the next rank of the ring.
    const Bytes per_step = Bytes(bytes.value() / (p.cp - 1));
    const LinkCost link = cp_g.nodes > 1 ? cp_g.inter : cp_g.intra;
    const Seconds comm = (p2p_time(per_step, link, eff) + call) * static_cast<double>(p.cp - 1);
    return std::max(Seconds(0), comm - attention);
  };
  const Seconds cp_fwd = cp_exposed(blk.cp_bytes_forward, blk.forward.attention);
  const Seconds cp_bwd = cp_exposed(blk.cp_bytes_backward, blk.backward.attention);

  // ZeRO-3: every microbatch gathers each block's parameters forward and backward and
  // reduce-scatters its gradients over the shard group, prefetched behind compute.
  const int n_shard = shard_group_size(p, layout);
  GroupPlacement shard_g = dp_g;
  GroupPlacement replicate_g;
  if (p.hybrid_shard) {
    shard_g = GroupPlacement{dp_g.ranks_per_node, 1, dp_g.ranks_per_node, dp_g.intra, {}};
    replicate_g = GroupPlacement{dp_g.nodes, dp_g.nodes, 1, {}, dp_g.inter};
  }
  const double e = activation_bytes(o.precision);
  const double block_params =
      static_cast<double>(model.param_counts().attention_per_layer + model.param_counts().mlp_per_layer) / p.tp;
  Seconds z3_fwd_exposed, z3_bwd_exposed, z3_overlapped;
  if (p.zero_stage == 3 && n_shard > 1) {
    const Bytes gathered(static_cast<std::int64_t>(block_params * e));
    const Bytes grads(static_cast<std::int64_t>(block_params * (o.fp32_main_grads ? 4 : 2)));
    const Seconds ag = collective_time(Collective::kAllGather, gathered, shard_g, eff) + call;
    const Seconds rs = collective_time(Collective::kReduceScatter, grads, shard_g, eff) + call;
    z3_fwd_exposed = std::max(Seconds(0), ag - blk.forward.total());
    z3_bwd_exposed = std::max(Seconds(0), ag + rs - blk.backward.total() - blk.recompute.total());
    z3_overlapped = (ag - z3_fwd_exposed) + (ag + rs - z3_bwd_exposed);
  }
  const double slow_dp = dp_g.nodes > 1 ? o.overlap_slowdown_network : o.overlap_slowdown_nvlink;

  // 5. Per-stage durations of one microbatch, and the point-to-point transfer after each stage.
  const int S = stages.num_stages();
  std::vector<double> fwd(static_cast<std::size_t>(S)), bwd(static_cast<std::size_t>(S)), p2p(static_cast<std::size_t>(S)),
      wgrad(static_cast<std::size_t>(S));
  const Seconds layer_fwd = blk.forward.total() + tp_one * static_cast<double>(blk.tp_collectives_forward) + cp_fwd +
                            z3_fwd_exposed;
  const Seconds layer_bwd = blk.backward.total() + blk.recompute.total() +
                            tp_one * static_cast<double>(blk.tp_collectives_backward + blk.tp_collectives_recompute) +
                            cp_bwd + z3_bwd_exposed;
  const Bytes boundary(static_cast<std::int64_t>(static_cast<double>(p.micro_batch) * seq_len / p.cp * model.hidden * e /
                                                 (p.sequence_parallel ? p.tp : 1)));
  for (int s = 0; s < S; ++s) {
    const auto i = static_cast<std::size_t>(s);
    const double L = stages.layers_in(s);
    fwd[i] = L * layer_fwd.value();
    bwd[i] = L * layer_bwd.value();
    // Weight gradients: one GEMM per forward GEMM, of the same size (layer_costs.h).
    wgrad[i] = L * blk.forward.gemm.value();
    if (s == 0) {
      fwd[i] += head.embedding_forward.total().value();
      bwd[i] += head.embedding_backward.total().value();
    }
    if (s == S - 1) {
      fwd[i] += head.head_forward.total().value();
      bwd[i] += head.head_backward.total().value();
      wgrad[i] += head.head_forward.gemm.value();
    }
    // Stage s -> s+1 runs from pp rank s mod pp to (s+1) mod pp, same tp/cp/dp coordinates.
    if (s < S - 1 && p.pp > 1) {
      spec::RankCoord a{}, b{};
      a.pp = s % p.pp;
      b.pp = (s + 1) % p.pp;
      p2p[i] = (p2p_time(boundary, topo.p2p(layout.rank_of(a), layout.rank_of(b), cluster.node.gpus_per_node), eff) +
                call)
                   .value();
    }
  }
  const std::vector<double> no_p2p(static_cast<std::size_t>(S), 0.0);
  const std::span<const double> split =
      p.schedule == spec::ScheduleKind::kZeroBubbleH1 ? std::span<const double>(wgrad) : std::span<const double>();
  const ReplayResult with_p2p = schedule ? replay_schedule(*schedule, fwd, bwd, p2p, split)
                                         : closed_form_makespan(p.pp, p.virtual_stages, m, fwd, bwd, p2p, split);
  const ReplayResult without_p2p = schedule ? replay_schedule(*schedule, fwd, bwd, no_p2p, split)
                                            : closed_form_makespan(p.pp, p.virtual_stages, m, fwd, bwd, no_p2p, split);
  // The critical rank: the one that finishes last.
  int crit = 0;
  for (int r = 0; r < p.pp; ++r) {
    if (with_p2p.finish[static_cast<std::size_t>(r)] > with_p2p.finish[static_cast<std::size_t>(crit)]) crit = r;
  }
  const auto rank_stages = stages.stages_of_rank(crit);
  double rank_layers = 0;
  bool has_first = false, has_last = false;
  for (int s : rank_stages) {
    rank_layers += stages.layers_in(s);
    has_first = has_first || s == 0;
    has_last = has_last || s == S - 1;
  }
  const double mm = m;
  StepTimeBreakdown& t = est.time;
  t.compute = (blk.forward.total() + blk.backward.total()) * (rank_layers * mm);
  if (has_first) t.compute += (head.embedding_forward.total() + head.embedding_backward.total()) * mm;
  if (has_last) t.compute += (head.head_forward.total() + head.head_backward.total()) * mm;
  t.recompute = blk.recompute.total() * (rank_layers * mm);
  t.tp_comm = tp_one * static_cast<double>(blk.tp_collectives_forward + blk.tp_collectives_backward +
                                           blk.tp_collectives_recompute) *
              (rank_layers * mm);
  t.cp_comm = (cp_fwd + cp_bwd) * (rank_layers * mm);
  const Seconds zero3_exposed = (z3_fwd_exposed + z3_bwd_exposed) * (rank_layers * mm);
  t.pp_comm = with_p2p.makespan - without_p2p.makespan;
  t.pp_bubble = without_p2p.makespan - without_p2p.busy[static_cast<std::size_t>(crit)];
  if (t.pp_bubble < Seconds(0)) t.pp_bubble = Seconds(0);

  // 6. Data parallelism: gradient reduction overlapped with the (last) backward, the ZeRO-1/2
  // parameter all-gather after the optimizer, the HSDP cross-node all-reduce.
  const double psi = params_of_pp_rank(model, p, stages, crit);
  const double grad_b = o.fp32_main_grads || o.precision == spec::Precision::kFp32 ? 4 : 2;
  const Bytes grad_bytes(static_cast<std::int64_t>(psi * grad_b));
  const Bytes param_bytes(static_cast<std::int64_t>(psi * e));
  Seconds overlappable, exposed_after;
  if (n_shard > 1 || (p.hybrid_shard && replicate_g.size > 1)) {
    const double buckets = std::max(1.0, std::ceil(psi / static_cast<double>(o.bucket_elements)));
    if (p.zero_stage == 0) {
      overlappable = collective_time(Collective::kAllReduce, grad_bytes, dp_g, eff) + call * buckets;
    } else if (p.zero_stage <= 2) {
      overlappable = collective_time(Collective::kReduceScatter, grad_bytes, dp_g, eff) + call * buckets;
      exposed_after = collective_time(Collective::kAllGather, param_bytes, dp_g, eff) + call * buckets;
    } else if (p.hybrid_shard) {
      exposed_after = collective_time(Collective::kAllReduce, Bytes(grad_bytes.value() / std::max(1, shard_g.size)),
                                      replicate_g, eff) +
                      call * buckets;
    }
  }
  double last_bwd = 0;
  for (int s : rank_stages) last_bwd += bwd[static_cast<std::size_t>(s)];
  const Seconds bucket_time =
      overlappable.value() > 0
          ? overlappable * std::min(1.0, static_cast<double>(o.bucket_elements) * grad_b / static_cast<double>(grad_bytes.value()))
          : Seconds(0);
  const Seconds hidden =
      o.overlap_dp_with_backward ? std::min(overlappable - bucket_time, Seconds(last_bwd)) : Seconds(0);
  // ZeRO-2 keeps only its gradient shard, so it reduce-scatters after every microbatch's backward
  // (DeepSpeed's micro-step reduction), not once per step; ZeRO 0/1 accumulate full gradients.
  const double reductions = p.zero_stage == 2 ? mm : 1.0;
  t.dp_comm = (overlappable - std::max(Seconds(0), hidden)) * reductions + exposed_after + zero3_exposed;
  t.other = std::max(Seconds(0), hidden) * (reductions * slow_dp) + z3_overlapped * (rank_layers * mm) * slow_dp;
  est.stages.forward_s = fwd;
  est.stages.backward_s = bwd;
  est.stages.weight_grad_s = wgrad;
  est.stages.p2p_after_s = p2p;
  est.stages.dp_reduce = o.overlap_dp_with_backward ? overlappable : Seconds(0);
  est.stages.dp_buckets = static_cast<int>(std::max(1.0, std::ceil(psi / static_cast<double>(o.bucket_elements))));
  est.stages.dp_reductions = static_cast<int>(reductions);
  // Without overlap the reduction runs after backward: it joins the terms after the reductions.
  est.stages.dp_after = exposed_after + (o.overlap_dp_with_backward ? Seconds(0) : overlappable * reductions);
  est.stages.overlap_slowdown = slow_dp;

  // 7. Optimizer step over this rank's shard (CostModelOptions::optimizer_bytes_per_param).
  const double local = psi / (p.zero_stage >= 1 ? n_shard : 1);
  const double opt_bytes = o.optimizer_bytes_per_param + (o.precision == spec::Precision::kFp16 ? 8.0 : 0.0);
  if (p.offload == spec::Offload::kNone) {
    t.optimizer = Seconds(local * opt_bytes / (cluster.gpu().hbm_bandwidth.value() * o.hbm_efficiency)) +
                  o.kernel_overhead * 4.0;
  } else {
    t.optimizer = Seconds(local * (grad_b + e) / kPcieBytesPerSecond + local / kCpuAdamParamsPerSecond);
  }
  est.stages.optimizer = t.optimizer;

  // 8. Rates.
  const double step = t.total().value();
  const double gpus = cluster.num_gpus;
  const double microbatches_total = static_cast<double>(p.global_batch) / p.micro_batch;
  const double replicas_of_work = static_cast<double>(p.tp) * p.cp;  // per-rank FLOPs x tp x cp = one microbatch
  est.model_flops_per_step = core::Flops(microbatches_total * replicas_of_work *
                                         (model.layers * blk.model_flops.value() + head.model_flops.value()));
  est.hardware_flops_per_step = core::Flops(microbatches_total * replicas_of_work *
                                            (model.layers * blk.hardware_flops.value() + head.model_flops.value()));
  const double pk = (cluster.gpu().peak(o.precision) ? *cluster.gpu().peak(o.precision)
                                                       : *cluster.gpu().peak(spec::Precision::kBf16))
                        .value();
  est.tokens_per_s_per_gpu = static_cast<double>(p.global_batch) * seq_len / step / gpus;
  est.model_tflops_per_gpu = est.model_flops_per_step.value() / step / gpus / 1e12;
  est.mfu = est.model_flops_per_step.value() / (step * gpus * pk);
  est.hfu = est.hardware_flops_per_step.value() / (step * gpus * pk);
  return est;
}

}  // namespace cpt::cost
