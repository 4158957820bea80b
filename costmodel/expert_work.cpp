#include "costmodel/expert_work.h"

#include "costmodel/kernel_dispatch.h"
#include "costmodel/memory_model.h"
#include "costmodel/work_item_builders.h"
#include "spec/sequence_split.h"
#include "spec/token_dispatcher.h"

namespace cpt::cost {

using core::Bytes;

// Expert parallelism on the MoE layers, each pass: the rank's T/tp tokens (the sequence-parallel
// shard), k copies each, sent to their experts' ranks by an all-to-all over ep and back after the
// experts (dispatch and combine, Megatron's alltoall token dispatcher; its flex dispatcher sends
// each token once per rank and node instead, with no counts gathered apart,
// CostModelOptions::moe_dispatcher), blocking; with etp > 1 the
// received tokens all-gathered over etp before the experts and reduce-scattered after. Each
// forward first all-gathers every rank's pairs per expert over the etp × ep ranks (E int64 counts:
// what each rank and its etp peers receive; Megatron-Core's alltoall dispatcher gathers them over
// its tp_ep group too, priced on the ep group's links, or etp's without ep) — backward reuses
// them. Each MoE layer runs them (WorkScope::kMoeLayer).
void add_expert_parallel(StepInventory& inv, const spec::ModelSpec& model, const spec::ParallelConfig& p, double tokens,
                         double element_bytes, const CostModelOptions& o) {
  if (!model.moe.present() || (p.ep == 1 && p.etp == 1)) return;
  const double routed = tokens / p.tp * model.moe.experts_per_token * routed_token_load(model.moe, o);
  const Bytes sent(static_cast<std::int64_t>(routed * model.hidden * element_bytes));
  const Bytes gathered(static_cast<std::int64_t>(routed * p.etp * model.hidden * element_bytes));
  const Bytes counts(std::int64_t{model.moe.experts} * 8 * p.ep * p.etp);  // gathered: int64 [ep · etp, E]
  // The flex dispatcher sends each token once per rank and node that needs it: its item's bytes
  // are the tokens once, at the busiest rank's load (token_dispatch.h; spec::dispatcher_runs).
  const bool flex =
      o.moe_dispatcher == spec::TokenDispatcher::kFlex && spec::dispatcher_runs(spec::TokenDispatcher::kFlex, model, p);
  const WorkKind dispatch = flex ? WorkKind::kFlexDispatch : WorkKind::kAllToAll;
  const Bytes dispatched(
      static_cast<std::int64_t>(flex ? tokens / p.tp * routed_token_load(model.moe, o) * model.hidden * element_bytes
                                     : routed * model.hidden * element_bytes));
  // The operators around the ep calls are the MoE layer's (kernel_dispatch.h, moe_layer_kernels).
  auto pass_work = [&](WorkPass pass) {
    if (p.ep > 1) {
      inv.add(waiting(calls_of(pass, WorkScope::kMoeLayer, CommGroup::kExpert, dispatch, dispatched, 2, 0)));
    }
    // DeepEP's and HybridEP's dispatch exchanges its layout itself (Megatron-Core's flex
    // dispatcher gathers no counts).
    if (pass != WorkPass::kBackward && !flex) {
      const CommGroup counts_group = p.ep > 1 ? CommGroup::kExpert : CommGroup::kExpertTp;
      inv.add(waiting(calls_of(pass, WorkScope::kMoeLayer, counts_group, WorkKind::kAllGather, counts, 1, 0)));
    }
    if (p.etp > 1) {
      inv.add(waiting(calls_of(pass, WorkScope::kMoeLayer, CommGroup::kExpertTp, WorkKind::kAllGather, gathered, 1,
                               kernels_per_call(o))));
      inv.add(waiting(calls_of(pass, WorkScope::kMoeLayer, CommGroup::kExpertTp, WorkKind::kReduceScatter, gathered, 1,
                               kernels_per_call(o))));
    }
  };
  pass_work(WorkPass::kForward);
  pass_work(WorkPass::kBackward);
  if (p.recompute == spec::Recompute::kFull) pass_work(WorkPass::kRecompute);
  if (o.distill_teacher) pass_work(WorkPass::kTeacher);
}

// cpt's executor on sequence shards (tp > 1 with sequence parallelism, or cp > 1), on the MoE
// layers (model/moe_routing.h): each forward gathers every shard's pairs per (sequence, run,
// expert) and router-probability sums, fp64 [B·R + 1, E] with R runs per shard
// (spec::max_runs_per_sequence_shard), over tp and then, those gathered, over cp, so that the
// auxiliary loss and the capacities are the microbatch's; under sequence parallelism each backward
// sums the replicated router's weight gradient (fp32 [E, H]) over tp (under context parallelism it
// is summed with every replicated weight). (Megatron-Core all-reduces the pair counts for its
// auxiliary loss over tp × cp and sums the router's gradient once a step: not counted.)
void add_sequence_shard_routing(StepInventory& inv, const spec::ModelSpec& model, const spec::ParallelConfig& p,
                                const CostModelOptions& o) {
  const int sp = p.tp > 1 && p.sequence_parallel ? p.tp : 1;
  if (o.dispatch != KernelDispatch::kEager || !model.moe.present() || sp * p.cp == 1) return;
  // Per (sequence, run) pair counts, then the probability sums (per sequence for a per-sequence loss).
  const std::int64_t sums_rows = o.aux_loss_per_sequence ? p.micro_batch : 1;
  const std::int64_t row_bytes =
      (std::int64_t{p.micro_batch} * spec::max_runs_per_sequence_shard(p.cp, sp) + sums_rows) * model.moe.experts * 8;
  for (const WorkPass pass : {WorkPass::kForward, WorkPass::kRecompute, WorkPass::kTeacher}) {
    if (pass == WorkPass::kRecompute && p.recompute != spec::Recompute::kFull) continue;
    if (pass == WorkPass::kTeacher && !o.distill_teacher) continue;
    if (sp > 1) {
      inv.add(waiting(
          calls_of(pass, WorkScope::kMoeLayer, CommGroup::kTp, WorkKind::kAllGather, Bytes(row_bytes * sp), 1, 0)));
    }
    if (p.cp > 1) {
      inv.add(waiting(calls_of(pass, WorkScope::kMoeLayer, CommGroup::kCp, WorkKind::kAllGather,
                               Bytes(row_bytes * sp * p.cp), 1, 0)));
    }
  }
  // The operators around these calls are the MoE layer's (kernel_dispatch.h, moe_layer_kernels).
  if (sp == 1) return;
  const Bytes router_grads(std::int64_t{model.moe.experts} * model.hidden * 4);
  inv.add(
      calls_of(WorkPass::kBackward, WorkScope::kMoeLayer, CommGroup::kTp, WorkKind::kAllReduce, router_grads, 1, 0));
}

}  // namespace cpt::cost
