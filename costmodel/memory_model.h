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
// Activations: bytes per layer per microbatch (Korthikanti et al. 2022 Table 2, generalised to GQA,
// SwiGLU, FlashAttention and context parallelism), times the live microbatches of this rank's
// schedule (spec::max_live_weight), plus the logits of one microbatch on the last stage and, with
// full recompute, one layer's rematerialised activations.

#include <vector>

#include "core/units.h"
#include "costmodel/cost_options.h"
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
  [[nodiscard]] core::Bytes total() const { return weights + grads + optimizer + activations + other; }
};

// Model-state bytes for `params` parameters (already divided by tp) under a ZeRO stage over a
// shard group of `shard_group` ranks, without buckets or gathered-block buffers. With
// fp32_main_grads = false this is the ZeRO paper's 16Ψ, 4Ψ + 12Ψ/N, 2Ψ + 14Ψ/N, 16Ψ/N.
MemoryBreakdown model_state_bytes(double params, int zero_stage, int shard_group, const CostModelOptions& options);

// Stored activation bytes of one layer for one microbatch on one rank.
core::Bytes activation_bytes_per_layer(const spec::ModelSpec& model, const spec::ParallelConfig& parallel, int seq_len,
                                       const CostModelOptions& options);

// Parameters outside the decoder blocks held by one pipeline rank, per tp rank: the embedding on
// the first stage, the final norm and LM head on the last (an untied head, or with pp > 1 the last
// stage's copy of a tied embedding, as Megatron keeps).
double root_params_of_pp_rank(const spec::ModelSpec& model, const spec::ParallelConfig& parallel,
                              const spec::StagePartition& stages, int pp_rank);

// Parameters held by one pipeline rank, per tp rank.
double params_of_pp_rank(const spec::ModelSpec& model, const spec::ParallelConfig& parallel,
                         const spec::StagePartition& stages, int pp_rank);

// ZeRO shard-group size of the ranks at pipeline coordinate 0 (every pp rank has the same).
int shard_group_size(const spec::ParallelConfig& parallel, const spec::RankLayout& layout);

// The peak memory of every pipeline rank, index = pp rank. With a schedule the live microbatches are
// replayed from it; with `schedule == nullptr` they come from spec::in_flight_closed_form times the
// rank's heaviest chunk (exact for uniform chunks, an upper bound otherwise).
std::vector<MemoryBreakdown> memory_per_pp_rank(const spec::ModelSpec& model, const spec::ParallelConfig& parallel,
                                                int seq_len, const spec::StagePartition& stages,
                                                const spec::PipelineSchedule* schedule, const spec::RankLayout& layout,
                                                const CostModelOptions& options);

}  // namespace cpt::cost
