#pragma once
// FLOPs, bytes and compute time of one transformer block, and of the embedding and LM head, for
// one microbatch on one rank after tensor, sequence and context parallelism.
//
// Shapes (per rank; T = micro_batch · seq_len / cp tokens, d = head_dim):
//   qkv   [T, h] x [h, (a + 2g)·d / tp]        out   [T, a·d / tp] x [a·d / tp, h]
//   up    [T, h] x [h, f / tp] (x2 for SwiGLU) down  [T, f / tp] x [f / tp, h]
//   attention core per rank: a / tp heads, T queries against seq_len keys (causal)
// cpt's executor (KernelDispatch::kEager) runs q, k and v, and SwiGLU's gate and up, as separate
// GEMMs ([T, h] x [h, a·d / tp], [T, h] x [h, g·d / tp] twice, [T, h] x [h, f / tp] twice).
// Backward runs two GEMMs (input and weight gradient) per forward GEMM.
// Sources: Narayanan et al. 2021 §3.1 / Korthikanti et al. 2022 §3 for the GPT block; the SwiGLU
// and GQA widths follow the model (docs/costmodel.md, "FLOPs").

#include <optional>

#include "core/units.h"
#include "costmodel/cost_options.h"
#include "costmodel/layer_kind.h"
#include "spec/hardware_spec.h"
#include "spec/model_spec.h"
#include "spec/parallel_config.h"

namespace cpt::cost {

// The time of one pass split by kind, so that the step breakdown can name each.
struct PassTime {
  core::Seconds gemm;       // matrix-engine GEMMs
  core::Seconds attention;  // attention core (fused kernel, or batched GEMMs + softmax)
  core::Seconds memory;     // memory-bound element-wise kernels (norms, activations, residuals)
  core::Seconds overhead;   // kernel launches: `kernels` x CostModelOptions::kernel_overhead
  double kernels = 0;       // dispatched (costmodel/kernel_dispatch.h)
  // Compute lost resuming from the pass's blocking calls (spec::NodeSpec::
  // compute_lost_resuming_from_call x calls; set by the step estimator, 0 on a GPU).
  core::Seconds resume;
  [[nodiscard]] core::Seconds total() const { return gemm + attention + memory + overhead + resume; }
};

struct BlockCosts {
  PassTime forward;
  PassTime backward;
  PassTime recompute;  // extra forward work in backward: full block, attention core, or none
  PassTime teacher;    // KL distillation: the frozen teacher's forward (CostModelOptions::distill_teacher)
  // FLOPs of one block (per rank, per microbatch) in the published convention (non-causal
  // attention, backward = 2 x forward; Korthikanti et al. 2022 eq. 7): without recomputation
  // (model, for MFU) and with the recomputed forward work added (hardware, for HFU).
  core::Flops model_flops;
  core::Flops hardware_flops;
};

struct HeadCosts {  // embedding (first stage) and LM head + loss (last stage)
  PassTime embedding_forward;
  PassTime embedding_backward;
  PassTime head_forward;
  PassTime head_backward;
  // KL distillation: the teacher's embedding, and its final norm and LM head with the KL over
  // both logits (forward; the KL's gradient is in head_backward).
  PassTime teacher_embedding;
  PassTime teacher_head;
  // Each model chunk's forward entry on every stage, the student's and with distillation the
  // teacher's (kernel_dispatch.h chunk_entry_kernels): the rotary tables' rows.
  PassTime chunk_entry;
  PassTime teacher_chunk_entry;
  // Each microbatch's batch on every pipeline rank (kernel_dispatch.h batch_entry_kernels): its
  // kernels alone, the bytes are a few integers per token.
  PassTime batch_entry;
  // The loss's log-softmaxes: the cross-entropy's part of head_forward.memory and
  // head_backward.memory, and with distillation the KL's in teacher_head.memory and head_backward.memory.
  core::Seconds loss_forward;
  core::Seconds loss_backward;
  core::Flops model_flops;  // LM head GEMMs, forward + backward
};

// The cross-entropy's rates for `logits` fp32 elements per call on `gpu`: its measured curve,
// interpolated in log(logits) and held beyond the ends; none where it has none (the loss is then
// priced as memory traffic).
std::optional<spec::CrossEntropyPoint> cross_entropy_rates_at(const spec::GpuSpec& gpu, double logits);

// FLOPs of causal fused attention as the cost model counts them: `queries` tokens attending to
// `keys` keys, `heads` heads of `head_dim` — forward 2·queries·keys·d per head (half of QK^T and
// AV's 4·queries·keys·d), backward 2.5× the forward (FlashAttention-2 recomputes P).
double causal_attention_forward_flops(double queries, double keys, double head_dim, double heads);
double causal_attention_backward_flops(double forward_flops);

// Bytes per element of activations and of weights in the compute precision.
int activation_bytes(spec::Precision p);

// Whether a step of `model` under `options` applies dropout (CostModelOptions::dropout).
bool applies_dropout(const spec::ModelSpec& model, const CostModelOptions& options);

// One layer of `kind`. REQUIRES: the model has layers of that kind.
BlockCosts block_costs(const spec::ModelSpec& model, const spec::ParallelConfig& parallel, int seq_len,
                       const spec::GpuSpec& gpu, const CostModelOptions& options, LayerKind kind);
HeadCosts head_costs(const spec::ModelSpec& model, const spec::ParallelConfig& parallel, int seq_len,
                     const spec::GpuSpec& gpu, const CostModelOptions& options);

// Efficiency of a GEMM of `flops` whose smallest dimension is `min_dim` on `gpu` at the options'
// precision: the profile's curves by smallest dimension when it has them (interpolated in
// log(min_dim), held beyond the ends), else its curve by size, else
// CostModelOptions::gemm_efficiency.
double gemm_efficiency_at(double flops, double min_dim, const spec::GpuSpec& gpu, const CostModelOptions& options);
// Time of one GEMM of `flops` (2·m·n·k) whose smallest dimension is `min_dim`, at that efficiency.
core::Seconds gemm_time(double flops, double min_dim, const spec::GpuSpec& gpu, const CostModelOptions& options);

}  // namespace cpt::cost
