#pragma once
// What cpt's own executor does not run yet, once: the trainer refuses these plans in one line and
// `cpt plan --for-executor` (planner/pruning.cpp) never proposes them.
#include <optional>
#include <string>

#include "spec/model_spec.h"
#include "spec/parallel_config.h"

namespace cpt::spec {

enum class ExecutorGap {
  kZero3WithPipeline,       // ZeRO-3 shards whole models, not pipeline stages (as Megatron-LM and FSDP)
  kParameterOffload,        // offload other than the optimizer state of ZeRO-1/2/3
  kTiedOverStages,          // tied embeddings need the embedding and the LM head on one stage
  kSequenceParallelTokens,  // SP splits the tokens of a cp rank (seq_len / cp) over tp
};

// The first gap the plan falls into, without allocating (the planner's prune calls it per
// candidate); nullopt when the executor runs it. The context-parallel split rule is
// find_sequence_split_error's (spec/sequence_split.h), checked with every configuration.
std::optional<ExecutorGap> find_executor_gap(const ParallelConfig& p, const ModelSpec& m, int seq_len);

// One sentence naming the gap and the configuration's values.
std::string describe(ExecutorGap gap, const ParallelConfig& p, int seq_len);

// How the executor runs what it runs, where the cost model must price it the same way.
// ZeRO-2 reduce-scatters each microbatch's gradients (keeping only the shard and the buckets in
// flight) unless a pipeline schedule interleaves the microbatches' backward passes; then it
// accumulates whole gradients and reduces once per step, like ZeRO-1.
inline bool executor_zero2_reduces_each_microbatch(const ParallelConfig& p) {
  return p.pp == 1;
}

// The scalar all-reduces (a few bytes each) cpt's executor runs once per step beside the model's
// traffic, by group: over the data-parallel replicas (dp × cp ranks) the step's loss-token count
// and its loss sums (executor/train/train_step.cpp); over pp the last stage's loss
// (parallel/pipeline_executor.cpp); the gradient norm's sum of squares over tp and over pp
// (train/step_optimizer.cpp) and, where ZeRO shards the gradients or the state over
// `shard_ranks` > 1, over the shard group (train/zero_optimizer.cpp, parallel/fully_sharded.cpp);
// with routed experts apart from their layer (`moe` and not ParallelConfig::experts_with_their_layer;
// ep > 1 implies a mixture of experts) their part of the norm over etp, ep, pp and (ZeRO) expert-dp.
// An objective's own terms add theirs (executor_ewc_scalar_all_reduces; the KL's sum rides with
// the loss's). Sizes (fp64 values):
// the loss-token count 8 bytes, the loss sums 16 (cross-entropy, KL), the last stage's loss 16
// (the same two), every norm's sum of squares 8.
inline constexpr int kScalarValueBytes = 8;
struct StepScalarAllReduces {
  int replicas = 0;  // over the dp × cp replicas
  int shard = 0;     // over the ZeRO shard group
  int tp = 0;
  int pp = 0;
  int ep = 0;            // over the ep group
  int etp = 0;           // over the expert-tp group, whose ranks hold the experts' shards
  int expert_shard = 0;  // over expert-dp, where ZeRO shards the experts
  [[nodiscard]] int total() const { return replicas + shard + tp + pp + ep + etp + expert_shard; }
};
StepScalarAllReduces executor_step_scalar_all_reduces(const ParallelConfig& p, int shard_ranks, bool moe = false);
// EWC's penalty, summed once a step (one fp64 value each): over the ZeRO-3 shard group where the
// penalty works on the shards (the routed experts apart from their layer over expert-dp), then
// over tp, the routed experts' part over expert-tp and ep where they are apart from their layer, and over pp
// (executor/train/regularizers.cpp Ewc::penalty_value, executor/parallel/fully_sharded.cpp).
StepScalarAllReduces executor_ewc_scalar_all_reduces(const ParallelConfig& p, int shard_ranks, bool moe = false);

}  // namespace cpt::spec
