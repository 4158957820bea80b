#pragma once
// Peak memory of each pipeline rank (ranks at the same pp coordinate are identical).
//
// Model state (cpt's table in docs/costmodel.md; Rajbhandari et al. 2020 §5 for the ZeRO stages):
//   Ψ = parameters this rank holds after tp (its stages' layers, plus the embedding on the first
//   stage and the final norm and LM head on the last), N = ZeRO shard-group size (dp·cp, or under
//   HSDP the part of it on one node).
//   weights     2Ψ (4Ψ fp32);          ZeRO-3: 2Ψ/N + prefetch_blocks gathered blocks + the root
//               unit (embedding, final norm, LM head) whole, as FSDP's root is for a microbatch
//   gradients   4Ψ fp32 main grads (2Ψ 16-bit); ZeRO-2/3: /N + one bucket (ZeRO-3: + the root
//               unit's whole gradient)
//   optimizer   12Ψ (fp32 master + two Adam moments; 8Ψ when training in fp32); ZeRO-1+: /N;
//               0 on the GPU with optimizer offload
// Routed experts (mixtures of experts) are a second Ψ_e = the layers' routed experts / (ep·etp),
// with the same state per parameter, sharded over expert-dp (N_e) in place of N.
// Continual recipe: teacher 2Ψ (ZeRO-3: 2Ψ/N + its gathered blocks and root unit, as the
// student's), EWC 8Ψ (ZeRO-3: 8Ψ/N), the KL's fp32 tensors on the last stage (kl_logits).
// Activations: bytes per layer per microbatch (Korthikanti et al. 2022 Table 2, generalised to GQA,
// SwiGLU, FlashAttention and context parallelism), times the live microbatches of this rank's
// schedule (spec::max_live_weight), plus the logits of one microbatch on the last stage and, with
// full recompute, one layer's rematerialised activations.

#include <algorithm>
#include <vector>

#include "core/units.h"
#include "costmodel/cost_options.h"
#include "costmodel/layer_kind.h"
#include "spec/model_spec.h"
#include "spec/parallel_config.h"
#include "spec/pipeline_schedule.h"
#include "spec/rank_layout.h"
#include "spec/stage_partition.h"

namespace cpt::cost {

struct MemoryBreakdown {
  core::Bytes weights;
  core::Bytes grads;
  core::Bytes optimizer;
  core::Bytes activations;
  core::Bytes other;  // CUDA context, communication buffers, allocator fragmentation
  // The continual recipe's (CostModelOptions::distill_teacher, ewc): the frozen teacher's weights,
  // split, staged and sharded like the student's (16-bit, or fp32 when training in fp32); EWC's
  // fp32 Fisher and anchor of every parameter the rank holds (shards under ZeRO-3).
  core::Bytes teacher;
  core::Bytes ewc;
  [[nodiscard]] core::Bytes total() const { return weights + grads + optimizer + activations + other + teacher + ewc; }
};

// Model-state bytes for `params` parameters (already divided by tp) under a ZeRO stage over a
// shard group of `shard_group` ranks, without buckets or gathered-block buffers. With
// fp32_main_grads = false this is the ZeRO paper's 16Ψ, 4Ψ + 12Ψ/N, 2Ψ + 14Ψ/N, 16Ψ/N.
MemoryBreakdown model_state_bytes(double params, int zero_stage, int shard_group, const CostModelOptions& options);

// Stored activation bytes of one layer of `kind` for one microbatch on one rank.
core::Bytes activation_bytes_per_layer(const spec::ModelSpec& model, const spec::ParallelConfig& parallel, int seq_len,
                                       const CostModelOptions& options, LayerKind kind);

// Parameters outside the decoder blocks held by one pipeline rank, per tp rank: the embedding on
// the first stage, the final norm and LM head on the last (an untied head, or with pp > 1 the last
// stage's copy of a tied embedding, as Megatron keeps).
double root_params_of_pp_rank(const spec::ModelSpec& model, const spec::ParallelConfig& parallel,
                              const spec::StagePartition& stages, int pp_rank);
// The same from what the rank holds: the first stage, the last stage, and whether the model has a
// single stage (then a tied head is the embedding itself).
double root_params(const spec::ModelSpec& model, const spec::ParamCounts& counts, int tp, bool holds_first,
                   bool holds_last, bool single_stage);

// Bytes of one parameter's gradient: fp32 when training in fp32 or keeping fp32 main gradients
// (Megatron), else the compute precision's 2.
double gradient_bytes_per_param(const CostModelOptions& options);

// Parameters of one transformer block per tp rank: attention and MLP matrices split over tp,
// norms (and row-parallel biases) and latent attention's down projections replicated. For a
// mixture of experts, the mean layer's without
// its routed experts (expert_params_per_layer): the dense MLP on the dense layers, the shared
// experts (split over tp) and the router (replicated) on the MoE layers.
double block_params_per_tp(const spec::ParamCounts& counts, int tp);
// The same for one layer of `kind`: a dense layer's, or an MoE layer's without its routed experts.
double layer_params_per_tp(const spec::ParamCounts& counts, int tp, LayerKind kind);
// Parameters per tp rank of `held`'s blocks, their routed experts per ep·etp included.
double params_of_layers(const spec::ParamCounts& counts, const spec::ParallelConfig& parallel, const HeldLayers& held);
// The routed experts of the mean layer one rank holds: the MoE layers' routed experts over
// ep·etp, averaged over all layers; 0 for a dense model.
double expert_params_per_layer(const spec::ParamCounts& counts, const spec::ParallelConfig& parallel);
// The routed experts of one MoE layer one rank holds: its routed experts over ep·etp.
double expert_params_per_moe_layer(const spec::ParamCounts& counts, const spec::ParallelConfig& parallel);
// The ranks ZeRO shards expert state over: expert-dp (ParallelConfig::expert_dp) from ZeRO-1 on.
int expert_shard_group(const spec::ParallelConfig& parallel);
// Bytes per element of a GEMM input kept for the backward: the compute precision's, 1 in FP8
// (Transformer Engine keeps the FP8 copy it multiplied).
double gemm_input_bytes(const CostModelOptions& options);
// Tokens the busiest expert rank computes per MoE layer, as a multiple of the balanced T·k/E: the
// capacity factor where tokens are dropped (padded to capacity), else the options' imbalance.
double routed_token_load(const spec::ExpertSpec& experts, const CostModelOptions& options);

// The layers pipeline rank `pp_rank` holds over its stages.
HeldLayers held_layers(const spec::ModelSpec& model, const spec::StagePartition& stages, int pp_rank);
// The same under the balanced partition (spec::StagePartition::balanced) without building it:
// O(virtual_stages).
HeldLayers balanced_held_layers(const spec::ModelSpec& model, int pp, int virtual_stages, int pp_rank);
// Parameters held by one pipeline rank, per tp rank (its routed experts per ep·etp).
double params_of_pp_rank(const spec::ModelSpec& model, const spec::ParallelConfig& parallel,
                         const spec::StagePartition& stages, int pp_rank);

// What the memory of every pipeline rank of one configuration shares (bytes), computed once.
struct MemoryTerms {
  const spec::ModelSpec* model = nullptr;  // the model the terms are of (outlives them)
  int shard_group = 1;                     // ZeRO shard group (spec::RankLayout::zero_shard_group_size)
  // Stored activations of one layer of each kind, one microbatch (0 for a kind the model lacks).
  double activation_per_dense_layer = 0, activation_per_moe_layer = 0;
  // The last stage's logits of one microbatch: 16-bit and the loss's fp32 copy, or 16-bit and their
  // 16-bit gradient under a fused cross-entropy (CostModelOptions::fused_cross_entropy).
  double logits = 0;
  // KL distillation, the last stage: the teacher's logits and the KL's three fp32 tensors kept for
  // its backward (executor/train/regularizers.cpp kl_sum: log-softmax, its exp, the difference).
  double kl_logits = 0;
  double recompute_buffer = 0;  // full recompute: one layer's rematerialised activations (the larger kind's)
  // One block's parameters per tp rank of each kind (layer_params_per_tp; a ZeRO-3 unit), an MoE
  // layer's with its routed experts when they live with it (experts_with_their_layer).
  double dense_block_params = 0, moe_block_params = 0;
  double expert_params = 0;    // an MoE layer's routed experts on one rank apart from it (expert_params_per_moe_layer)
  int expert_shard_group = 1;  // expert_shard_group
  double comm_buffers = 0;     // communication buffers of the groups this rank talks in

  // Of `held`'s layers: their stored activations for one microbatch, their blocks' parameters, and
  // the largest block among them.
  [[nodiscard]] double activations_of(const HeldLayers& held) const {
    return held.dense_layers() * activation_per_dense_layer + held.moe_layers * activation_per_moe_layer;
  }
  [[nodiscard]] double blocks_of(const HeldLayers& held) const {
    return held.dense_layers() * dense_block_params + held.moe_layers * moe_block_params;
  }
  [[nodiscard]] double heaviest_block(const HeldLayers& held) const {
    return std::max(held.dense_layers() > 0 ? dense_block_params : 0.0, held.moe_layers > 0 ? moe_block_params : 0.0);
  }
};
MemoryTerms memory_terms(const spec::ModelSpec& model, const spec::ParallelConfig& parallel, int seq_len,
                         int shard_group, const CostModelOptions& options);

// The memory of one pipeline rank from what it holds: `held`'s blocks (of the terms' block
// parameters by kind) and `root_params` outside them (per tp rank), the bytes of the activations stored for its live
// microbatches, and whether it holds the first stage (the embedding) and the last (the logits).
// ZeRO-2 adds the buckets being reduced (two; cpt's executor's own under eager dispatch,
// executor_buckets.h); ZeRO-3 adds FSDP's whole buffers
// beside the shards: the root unit's weights and gradients for a whole microbatch, the running and
// the prefetched block, and one reduction in flight (units assumed divisible by the shard group).
MemoryBreakdown rank_memory(const MemoryTerms& terms, const spec::ParallelConfig& parallel, const HeldLayers& held,
                            double root_params, double live_activations, bool holds_first, bool holds_last,
                            const CostModelOptions& options);

// The peak memory of every pipeline rank, index = pp rank. With a schedule the live microbatches are
// replayed from it; with `schedule == nullptr` they come from spec::in_flight_closed_form times the
// rank's heaviest chunk (exact for uniform chunks, an upper bound otherwise).
std::vector<MemoryBreakdown> memory_per_pp_rank(const spec::ModelSpec& model, const spec::ParallelConfig& parallel,
                                                int seq_len, const spec::StagePartition& stages,
                                                const spec::PipelineSchedule* schedule, const spec::RankLayout& layout,
                                                const CostModelOptions& options);

}  // namespace cpt::cost
