#pragma once
// How many kernels each piece of a training step dispatches — what CostModelOptions::
// kernel_overhead is paid for — per runtime (CostModelOptions::dispatch).
//
// kFused (Megatron-LM / Transformer Engine): 12 kernels per layer forward with FlashAttention, 15
// without, twice that backward; 2 for the embedding and 6 for the LM head and loss each way; 4 for
// the optimizer step (multi-tensor kernels).
//
// kEager (cpt's executor, LibTorch eager mode): the ATen operators its code calls and the autograd
// nodes backward runs, as executor/measure/op_counter.h counts them (measured.json's
// dispatch_per_step_per_rank). A SwiGLU / RMSNorm / RoPE / GQA layer with SDPA: 57 forward and 76
// backward; the embedding 2 + 2 and the final norm, LM head and cross-entropy 29 + 16; every
// collective or point-to-point call 5 around it (views, copies and its autograd function); the
// all-gather form of context parallelism 6 more per call (reordering the gathered chunks, the
// mask's rows); per step 22 plus 2 per parameter tensor (gradient norm, clipping; one fused AdamW
// for all), and with ZeRO-1/2 9 (ZeRO-3 8) more per tensor for its flat buffers.
// DistributedTrain.DispatchCountsMatchTheCostModel checks these counts against the executor.
#include "costmodel/cost_options.h"
#include "spec/model_spec.h"
#include "spec/parallel_config.h"

namespace cpt::cost {

struct PassKernels {
  double forward = 0;
  double backward = 0;
};

// One decoder layer, one microbatch, with its tensor- and context-parallel calls.
PassKernels layer_kernels(const spec::ParallelConfig& p, const CostModelOptions& o);
// Kernels recomputation adds to a layer's backward (selective: the attention core; full: the layer's forward).
double recompute_kernels(const spec::ParallelConfig& p, const CostModelOptions& o);
// The embedding (first stage) and the final norm, LM head and loss (last stage), one microbatch,
// with their tensor-parallel calls.
PassKernels embedding_kernels(const spec::ParallelConfig& p, const CostModelOptions& o);
PassKernels head_kernels(const spec::ParallelConfig& p, const CostModelOptions& o);
// Once per step on a rank that holds `layers` layers (and the embedding / head when `first` /
// `last`), besides its collectives: gradient norm, clipping, the optimizer and ZeRO's buffers.
double step_kernels(const spec::ModelSpec& m, const spec::ParallelConfig& p, double layers, bool first, bool last,
                    const CostModelOptions& o);
// Kernels around each communication call (data-parallel buckets, pipeline sends and receives).
double kernels_per_call(const CostModelOptions& o);

}  // namespace cpt::cost
