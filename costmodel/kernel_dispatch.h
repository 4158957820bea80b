#pragma once
// How many kernels each piece of a training step dispatches — what CostModelOptions::
// kernel_overhead is paid for — per runtime (CostModelOptions::dispatch). The counts here are the
// work's own; the kernels around each communication call are entries of the step inventory
// (step_inventory.h, `kernels_per_call` and its kin each), which Estimate::kernels_per_step folds.
//
// kFused (Megatron-LM / Transformer Engine): 12 kernels per layer forward with FlashAttention, 15
// without, twice that backward; 2 for the embedding and 6 for the LM head and loss each way; 4 for
// the optimizer step (multi-tensor kernels); none counted around communication calls.
// An MoE layer adds (moe_layer_kernels) the operations Megatron-Core's MoE layer dispatches from
// Python with its alltoall token dispatcher, fused permutation and TE's grouped GEMMs: router 5
// (GEMM, fused top-k and score, auxiliary loss), dispatch 6 (token counts, their copy to the host
// and the synchronisation dropless routing needs for the all-to-all's split sizes, permute, sort
// by expert), experts 3 (grouped fc1, activation, grouped fc2), combine 3 (sort back, unpermute,
// add), shared experts 3 — forward; twice that backward. Token dropping with a capacity pads to a
// known size and skips the host synchronisation (2 fewer).
//
// kEager (cpt's executor, LibTorch eager mode): the ATen operators its code calls and the autograd
// nodes backward runs, as executor/measure/op_counter.h counts them (measured.json's
// dispatch_per_step_per_rank; LibTorch 2.11, CPU). A SwiGLU / RMSNorm / RoPE / GQA layer with SDPA:
// 61 forward, 76 backward; selective recomputation 8 more backward; the embedding 1 + 2; the final
// norm, LM head and cross-entropy 17 + 16 (with the loss's item, scale and seed gradient); each
// microbatch's batch 7 on every rank; a pipeline send 2 and receive 1 forward, 0 and 1 backward (a
// teacher's 1 and 1); around each other communication call 5, around a
// sequence-parallel gather or scatter 9, around a context-parallel gather or its reduce-scatter
// 14, around a ZeRO-3 unit's gather or reduce-scatter 13 (its views into the flat buffer). An MoE
// layer (model/moe_mlp.h: every expert called in turn) adds to the dense layer 30 + 11 per routed
// expert forward and 4 + 12 per expert backward, 9 and 12 for shared experts, 12 and 1 for a
// capacity (counted with the op counter on the layer alone, 4 and 8 experts, with and without
// shared experts and capacity, in training with its auxiliary loss); with the experts over ep
// ranks, 9 and 12 per local expert, and 13 and 5 for the dispatch, its all-to-alls' and count
// gather's own operators included, plus 26 per step for the experts' own optimizer (counted on
// tiny-moe split over 2 ranks in two threads, and checked against DP2 runs: ep 2 vs dp 2 predicted
// -141 kernels, measured -141); on sequence shards (tp > 1 with sequence parallelism, or cp > 1)
// 40 forward and 4 per group gathered over for the routing over the shards, 3 more forward with a
// capacity, 2 backward under sequence parallelism (the layer on 2 ranks in two threads, sp 2 or cp
// 2, against the whole layer, with and without ep; kernel_dispatch.cpp holds the constants); the auxiliary loss per
// sequence 9 forward (3 on sequence shards) and 1 backward; q/k norms 18 forward
// and 14 backward (two RMSNorms; 2 + 4 fused). Per step 22 plus 2 per parameter tensor (gradient norm and clipping; one
// fused AdamW for all); ZeRO-3 3 more per tensor for its flat buffers; ZeRO-1/2 3 more per tensor (the all-gathered
// values copied back) and 12 per optimizer segment of the busiest shard (executor_buckets.h: its norm, moments, update
// and gather; fitted on tiny DP2 and DP4 with 1 and 6 buckets, 1-15 segments). Measured per layout:
// DistributedTrain.ModelStateBytesEqualTheCostModel checks single, DP2, ZeRO-1 and ZeRO-3 DP2, TP2, TP2 + SP, PP2, CP2
// x ZeRO-1 DP2 and DP2 with full and with selective recomputation within 6%; CP2 and the interleaved pipeline were
// compared by hand (docs/calibration.md).
#include "costmodel/cost_options.h"
#include "costmodel/layer_kind.h"
#include "spec/model_spec.h"
#include "spec/parallel_config.h"

namespace cpt::cost {

struct PassKernels {
  double forward = 0;
  double backward = 0;
};

// One decoder layer, one microbatch, without its communication.
PassKernels layer_kernels(const CostModelOptions& o);
// What one MoE layer adds to layer_kernels (none for dense models), counted on every MoE layer:
// the experts split over p.ep ranks; on sequence shards (tp with sequence parallelism, or cp) the
// executor's routing over them (executor/model/moe_routing.h).
PassKernels moe_layer_kernels(const spec::ModelSpec& m, const spec::ParallelConfig& p, const CostModelOptions& o);
// What q/k norms (spec::ModelSpec::qk_norm) add to a layer: two RMSNorms over the heads.
PassKernels qk_norm_kernels(const spec::ModelSpec& m, const CostModelOptions& o);
// What DeepSeek's latent attention (spec::ModelSpec::mla) adds to a layer over grouped-query
// attention: its down projections, latent norms and the rotary channels' split and concatenation.
PassKernels latent_attention_kernels(const spec::ModelSpec& m, const CostModelOptions& o);
// Kernels selective recomputation (the attention core) adds to a layer's backward.
double selective_recompute_kernels(const CostModelOptions& o);
// The embedding (first stage) and the final norm, LM head and loss (last stage), one microbatch,
// without their communication.
PassKernels embedding_kernels(const CostModelOptions& o);
PassKernels head_kernels(const CostModelOptions& o);
// Each model chunk's forward entry, once per microbatch on every stage (the teacher's chunks too):
// the rotary tables' rows for the microbatch's positions.
double chunk_entry_kernels(const CostModelOptions& o);
// Each microbatch on every pipeline rank, whether or not it reads the tokens or the targets: the
// batch built (executor/data/data_loader.cpp: tokens, targets, positions, documents) and moved to
// the device.
double batch_entry_kernels(const CostModelOptions& o);
// Around one pipeline send and one receive (executor/parallel/pipeline_executor.cpp): an
// activation's (forward: the output cast to fp32 and detached; the receiving buffer), a gradient's
// (sent as autograd left it; the receiving buffer) and, with distillation, the teacher's hidden
// states' (cast to fp32; the receiving buffer). Their communication call itself is the step
// inventory's (WorkScope::kTransfer), which counts no kernels of its own.
struct TransferKernels {
  double send = 0;
  double receive = 0;
};
TransferKernels activation_transfer_kernels(const CostModelOptions& o);
TransferKernels gradient_transfer_kernels(const CostModelOptions& o);
TransferKernels teacher_transfer_kernels(const CostModelOptions& o);
// KL distillation on the last stage, one microbatch: the teacher's final norm and LM head forward
// (its logits, no loss), and what the KL over both logits adds to the student's head (forward:
// two log-softmaxes, the product and sums, its weight; backward: their autograd nodes).
struct DistillationKernels {
  double teacher_head = 0;
  PassKernels kl;
};
DistillationKernels distillation_kernels(const CostModelOptions& o);
// Once per step on a rank that holds `layers` layers (and the embedding / head when `first` /
// `last`), besides its communication: gradient norm, clipping, the optimizer (a second one for
// the routed experts on a rank that holds some apart from their layers) and, when the
// optimizer state is sharded (`sharded_zero_stage` 1..3; 0 when not sharded), ZeRO's buffers
// (`busiest_segments`: BucketStats::busiest_segments, for ZeRO-1/2).
double step_kernels(const spec::ModelSpec& m, const spec::ParallelConfig& p, const HeldLayers& held, bool first,
                    bool last, int sharded_zero_stage, double busiest_segments, const CostModelOptions& o);
// Kernels around one communication call: a plain one (all-reduce, bucket, send / receive), a
// sequence-parallel gather or scatter, a context-parallel gather or reduce-scatter.
double kernels_per_call(const CostModelOptions& o);
double kernels_per_sequence_parallel_call(const CostModelOptions& o);
double kernels_per_context_parallel_call(const CostModelOptions& o);
double kernels_per_zero3_call(const CostModelOptions& o);
// Around a ZeRO-3 block unit's gather or reduce-scatter: kernels_per_zero3_call for a dense
// block's 9 tensors, and 1.4 more per tensor the mean layer holds beyond them (an MoE layer's
// router and experts, latent attention's, q/k norms and biases; the views into the flat buffer are
// per tensor: measured on the tiny MoE's 22-tensor layers, ZeRO-3 DP2).
double kernels_per_zero3_block_call(const spec::ModelSpec& m, const CostModelOptions& o);
// Around a frozen teacher's ZeRO-3 unit of `tensors` parameter tensors (KL distillation,
// executor/parallel/fully_sharded.h): gathered and released within its forward, its views set and
// then emptied: 5 + 5 per tensor (the op counter on tiny's and tiny-moe's teachers, ZeRO-3 over 2
// ranks: 120 and 250 operators more than unsharded for their 21 and 47 tensors in 3 units).
double kernels_per_zero3_teacher_unit(double tensors, const CostModelOptions& o);
// A dense decoder block's parameter tensors: q, k, v, o (latent attention's five or seven in their
// place), the MLP's, two norms, and q/k norms and q/k/v biases where the model has them.
double dense_block_tensors(const spec::ModelSpec& m);
// The routed experts' matrices one MoE layer holds on this rank (E / ep experts).
double routed_expert_tensors_per_moe_layer(const spec::ModelSpec& m, int ep);
// The same for the mean layer (weighted by the MoE layers' share).
double routed_expert_tensors_per_layer(const spec::ModelSpec& m, int ep);
// The parameter tensors the mean layer holds beyond a dense block's (an MoE layer's router, its
// routed and shared experts' matrices instead of the dense MLP's), weighted by the MoE layers' share;
// this rank's E / ep routed experts.
double moe_extra_tensors_per_layer(const spec::ModelSpec& m, int ep);
// The same for one MoE layer.
double moe_layer_extra_tensors(const spec::ModelSpec& m, int ep);

}  // namespace cpt::cost
