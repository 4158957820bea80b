#pragma once
// What differs between the runtimes (spec/runtime.h) that run the same plan, as cost-model options:
// for_runtime(o, runtime) returns `o` with every runtime-dependent field set for `runtime`, the
// rest (precision, curves, overheads, memory constants) kept.
//
//                  kernels  attention  memory    FP8     gradients      DP buckets  CP exchange
//                           kernel     traffic   GEMMs   (model state)
//   megatron       fused    1          1         1       fp32 main      40 M elts   ring
//   deepspeed      fused    1          1         1       16-bit (ZeRO)  500 M elts  ring
//   fsdp           fused*   0.52 (f)   1.92 (f)  0.76 (f) 16-bit / N    6.5 M elts  all-gather
//   torchtitan     fused*   1          1.92      0.76    16-bit / N     6.5 M elts  all-gather
//   cpt            eager    1          1 (counted) 1     fp32 main      6.5 M elts  all-gather
//
// (f): fitted, with the Hopper curves of hardware_profiles/gpus/h100_sxm5_80gb.json, to the
// 216 llm-foundry rows of ../shared/validation/published_runs (Composer + PyTorch FSDP, MPT
// models, A100 and H100, BF16 and FP8) by bench/published_fit.cpp; docs/costmodel.md, "Runtimes",
// gives the fit and its residuals. What each means:
//   attention kernel: its efficiency against the attention curve (Megatron's fused kernel); the
//     llm-foundry rows' kernel (FlashAttention with ALiBi through MPT's own attention code) runs at
//     about half of it on both A100 and H100.
//   memory traffic: bytes its memory-bound kernels move against the fused count
//     (elementwise_traffic.h): PyTorch eager modules, unfused norms, activations, residuals, the
//     loss over upcast logits.
//   FP8 GEMMs: Transformer Engine's FP8 linear layers inside FSDP, with their casts and amax
//     updates unfused, against the GEMM curve at the FP8 peak (Megatron-LM's, with fused casts, 1:
//     fitted on the NeMo and Megatron-Bridge FP8 rows at 0.98-1.0).
//   fused*: kernel launches counted as Megatron's fused ones (not measured for PyTorch eager).
// torchtitan is not fitted (no torchtitan run is in the fitting set): FSDP2 runs the same eager
// modules (fsdp's memory traffic and FP8) with PyTorch SDPA's FlashAttention kernel (the
// reference attention kernel, 1).
// Gradients: Megatron keeps fp32 main gradients of every parameter it holds (4 B/param); DeepSpeed
// and FSDP keep 16-bit gradients beside fp32 master weights and moments (the ZeRO paper's 16 B per
// parameter, Rajbhandari et al. 2020 Table 1). Buckets: Megatron's DDP 40 M elements; DeepSpeed's
// reduce_bucket_size default 5e8; torch DDP's 25 MiB (what FSDP's NO_SHARD and cpt use). CP:
// Megatron's ring attention (Transformer Engine); PyTorch's context_parallel and cpt gather K and V.

#include "costmodel/cost_options.h"
#include "spec/runtime.h"

namespace cpt::cost {

[[nodiscard]] CostModelOptions for_runtime(CostModelOptions options, spec::Runtime runtime);

// One line for reports: "fsdp (PyTorch FSDP, eager modules)".
[[nodiscard]] std::string describe(spec::Runtime runtime);

}  // namespace cpt::cost
