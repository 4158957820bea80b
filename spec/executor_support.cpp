#include "spec/executor_support.h"

#include "core/str_cat.h"

namespace cpt::spec {

using core::str_cat;

std::optional<ExecutorGap> find_executor_gap(const ParallelConfig& p, const ModelSpec& m, int seq_len) {
  if (p.zero_stage == 3 && p.pp > 1) return ExecutorGap::kZero3WithPipeline;
  if (p.offload != Offload::kNone && (p.offload != Offload::kOptimizer || p.zero_stage < 1)) {
    return ExecutorGap::kParameterOffload;
  }
  if (m.tied_embeddings && p.num_stages() > 1) return ExecutorGap::kTiedOverStages;
  if (p.sequence_parallel && (seq_len / p.cp) % p.tp != 0) return ExecutorGap::kSequenceParallelTokens;
  return std::nullopt;
}

StepScalarAllReduces executor_step_scalar_all_reduces(const ParallelConfig& p, int shard_ranks, bool moe) {
  StepScalarAllReduces n;
  if (p.dp * p.cp > 1) n.replicas = 2;  // loss tokens, loss sums
  if (p.zero_stage >= 1 && shard_ranks > 1) n.shard = 1;
  if (p.tp > 1) n.tp = 1;
  if (p.pp > 1) n.pp = 2;  // the loss, the gradient norm
  // Routed experts apart (ep > 1, etp > 1, or tp > 1): their part of the norm, over etp, ep and
  // pp, and over expert-dp where ZeRO shards them there (train/optimizer_choice.cpp).
  if ((moe || p.ep > 1) && !p.experts_with_their_layer()) {
    if (p.etp > 1) n.etp = 1;
    if (p.ep > 1) n.ep = 1;
    if (p.pp > 1) ++n.pp;
    if (p.zero_stage >= 1 && p.expert_dp() > 1) n.expert_shard = 1;
  }
  return n;
}

StepScalarAllReduces executor_ewc_scalar_all_reduces(const ParallelConfig& p, int shard_ranks, bool moe) {
  StepScalarAllReduces n;
  if (p.zero_stage == 3 && shard_ranks > 1) n.shard = 1;
  if (p.zero_stage == 3 && (moe || p.ep > 1) && !p.experts_with_their_layer() && p.expert_dp() > 1) {
    n.expert_shard = 1;
  }
  if (p.tp > 1) n.tp = 1;
  // The experts' part (ep or etp > 1: a mixture of experts, its experts apart): over etp, then ep.
  if (p.etp > 1) n.etp = 1;
  if (p.ep > 1) n.ep = 1;
  if (p.pp > 1) n.pp = 1;
  return n;
}

std::string describe(ExecutorGap gap, const ParallelConfig& p, int seq_len) {
  switch (gap) {
    case ExecutorGap::kZero3WithPipeline:
      return str_cat("ZeRO-3 with pp ", p.pp,
                     ": the executor runs ZeRO-3 without pipeline parallelism (as Megatron-LM ", "and FSDP do)");
    case ExecutorGap::kParameterOffload:
      return str_cat("offload ", to_string(p.offload), " with ZeRO ", p.zero_stage,
                     ": the executor offloads the optimizer state of ZeRO-1, 2 and 3, not parameters");
    case ExecutorGap::kTiedOverStages:
      return str_cat("tied embeddings over ", p.num_stages(),
                     " pipeline stages: the executor needs the embedding and the LM head on one stage");
    case ExecutorGap::kSequenceParallelTokens:
      return str_cat("sequence parallelism needs the tokens per context-parallel rank (seq_len ", seq_len, " / cp ",
                     p.cp, ") divisible by tp (", p.tp, ")");
  }
  return "?";
}

}  // namespace cpt::spec
