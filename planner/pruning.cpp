#include "planner/pruning.h"

#include "planner/export_gaps.h"

#include "costmodel/memory_model.h"
#include "spec/executor_support.h"
#include "spec/rank_layout.h"
#include "spec/stage_partition.h"

namespace cpt::planner {

std::string to_string(RejectReason r) {
  switch (r) {
    case RejectReason::kHeadsNotDivisible:
      return "heads_not_divisible_by_tp";
    case RejectReason::kKvHeadsNotDivisible:
      return "kv_heads_not_divisible_by_tp";
    case RejectReason::kFfnNotDivisible:
      return "ffn_not_divisible_by_tp";
    case RejectReason::kStagesExceedLayers:
      return "stages_exceed_layers";
    case RejectReason::kInterleaveShape:
      return "interleave_needs_pp2_and_microbatches_multiple_of_pp";
    case RejectReason::kBatchNotDivisible:
      return "global_batch_not_divisible";
    case RejectReason::kTpCpAcrossNodes:
      return "tp_cp_across_nodes";
    case RejectReason::kSeqNotDivisible:
      return "seq_len_not_divisible_by_2cp";
    case RejectReason::kRedundant:
      return "redundant";
    case RejectReason::kHybridShardSplit:
      return "hybrid_shard_uneven";
    case RejectReason::kModelStateMemory:
      return "model_state_exceeds_memory";
    case RejectReason::kOutOfMemory:
      return "out_of_memory";
    case RejectReason::kUnsupported:
      return "unsupported_combination";
    case RejectReason::kNotRunByExecutor:
      return "not_run_by_cpt_executor";
    case RejectReason::kExpertsDoNotFold:
      return "ep_etp_not_dividing_tp_cp_dp";
    case RejectReason::kNotRunByTarget:
      return "not_run_by_target";
  }
  return "?";
}

LayoutKey layout_key(const spec::ParallelConfig& p) {
  return {p.tp,
          p.cp,
          p.dp,
          p.pp,
          static_cast<int>(p.axis_order[0]),
          static_cast<int>(p.axis_order[1]),
          static_cast<int>(p.axis_order[2]),
          static_cast<int>(p.axis_order[3])};
}

LayoutFacts layout_facts(const spec::ParallelConfig& config, int gpus_per_node) {
  spec::ParallelConfig plain = config;
  plain.hybrid_shard = false;
  const spec::RankLayout layout(plain, gpus_per_node);
  const auto runs = layout.dp_node_runs();
  LayoutFacts f;
  // Hybrid sharding also needs each cp group inside a node (RankLayout::find_hybrid_shard_error).
  f.hybrid_shard_uneven = runs.uneven || (config.cp > 1 && layout.max_nodes_spanned(spec::Axis::kCp) > 1);
  f.dp_spans_nodes = runs.spans_nodes;
  f.shard_group = config.dp * config.cp;
  f.hybrid_shard_group = runs.rank0_run * config.cp;
  return f;
}

std::optional<RejectReason> prune_shape(const spec::ParallelConfig& p, const PruneContext& ctx) {
  const auto& m = ctx.model;
  using R = RejectReason;
  if (m.heads % p.tp != 0) return R::kHeadsNotDivisible;
  if (m.kv_heads % p.tp != 0) return R::kKvHeadsNotDivisible;
  if (m.ffn_hidden % p.tp != 0) return R::kFfnNotDivisible;
  if (p.tp * p.cp > ctx.cluster.node.gpus_per_node) return R::kTpCpAcrossNodes;
  if (p.cp > 1 && ctx.seq_len % (2 * p.cp) != 0) return R::kSeqNotDivisible;
  if (p.pp * p.virtual_stages > m.layers) return R::kStagesExceedLayers;
  if (p.global_batch % p.sequences_per_microbatch() != 0) return R::kBatchNotDivisible;
  if (p.virtual_stages > 1 && (p.pp < 2 || p.grad_accum() % p.pp != 0)) return R::kInterleaveShape;
  // Before any memory bound divides by expert-dp (0 when the experts do not fold into a stage).
  if ((p.tp * p.cp * p.dp) % (p.ep * p.etp) != 0) return R::kExpertsDoNotFold;
  // spec's other rules for experts (find_parallel_config_errors): MoE layers on the
  // sequence-parallel shard under tp; no hybrid sharding.
  if (m.moe.present() && ((p.tp > 1 && !p.sequence_parallel) || p.hybrid_shard)) return R::kUnsupported;
  // Redundant: these run exactly like another candidate that stays in the space.
  if (p.sequence_parallel && p.tp == 1) return R::kRedundant;
  if (p.zero_stage > 0 && p.dp * p.cp == 1) return R::kRedundant;
  if (p.offload != spec::Offload::kNone && p.zero_stage == 0) return R::kRedundant;  // offload shards with ZeRO
  // Without a pipeline (or one microbatch) ZB-H1 runs exactly 1F1B's work with nothing to fill.
  if (p.schedule == spec::ScheduleKind::kZeroBubbleH1 && (p.pp == 1 || p.grad_accum() == 1)) return R::kRedundant;
  // The two axis orders differ only in whether dp or pp varies faster: the same layout when either is 1.
  if (p.axis_order[2] == spec::Axis::kPp && (p.dp == 1 || p.pp == 1)) return R::kRedundant;
  // What cpt's executor refuses (spec/executor_support.h).
  if (ctx.executor_only && spec::find_executor_gap(p, m, ctx.seq_len)) return R::kNotRunByExecutor;
  if (ctx.target && find_export_gap(m, p, ctx.seq_len, *ctx.target) != ExportGap::kNone) return R::kNotRunByTarget;
  return std::nullopt;
}

std::optional<RejectReason> prune_layout(const spec::ParallelConfig& p, const PruneContext& ctx,
                                         const LayoutFacts& facts) {
  using R = RejectReason;
  const auto& m = ctx.model;
  if (p.hybrid_shard) {
    if (facts.hybrid_shard_uneven) return R::kHybridShardSplit;
    if (!facts.dp_spans_nodes) return R::kRedundant;  // the same as plain ZeRO-3
  }
  // Lower bound: the model state of the first and the last pipeline rank, before activations.
  const int n = p.hybrid_shard ? facts.hybrid_shard_group : facts.shard_group;
  const auto counts = m.param_counts();
  for (int r : {0, p.pp - 1}) {
    const cost::HeldLayers held = cost::balanced_held_layers(m, p.pp, p.virtual_stages, r);
    const double expert_params = m.moe.present() ? held.moe_layers * cost::expert_params_per_moe_layer(counts, p) : 0;
    const double params = cost::params_of_layers(counts, p, held) - expert_params +
                          cost::root_params(m, counts, p.tp, r == 0, r == p.pp - 1, p.pp * p.virtual_stages == 1);
    auto ms = cost::model_state_bytes(params, p.zero_stage, n, ctx.options);
    if (m.moe.present()) {  // the routed experts' state over expert-dp
      const auto experts =
          cost::model_state_bytes(expert_params, p.zero_stage, cost::expert_shard_group(p), ctx.options);
      ms.weights += experts.weights;
      ms.grads += experts.grads;
      ms.optimizer += experts.optimizer;
    }
    if (p.offload != spec::Offload::kNone) ms.optimizer = core::Bytes(0);
    if ((ms.weights + ms.grads + ms.optimizer) > ctx.cluster.gpu().hbm_capacity) return R::kModelStateMemory;
  }
  return std::nullopt;
}

}  // namespace cpt::planner
