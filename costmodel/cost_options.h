#pragma once
// CostModelOptions: every constant of the cost model that is not a property of the model, the
// cluster or the parallel configuration, with its default and why (docs/costmodel.md lists them
// with their sources). A user overrides them with flags of `cpt estimate`; `cpt calibrate`
// fits the efficiency curves and latencies to the machine at hand.

#include <algorithm>
#include <cmath>
#include <optional>
#include <vector>

#include "core/units.h"
#include "spec/gradient_buckets.h"
#include "spec/hardware_spec.h"
#include "spec/runtime.h"
#include "spec/token_dispatcher.h"

namespace cpt::cost {

// Efficiency (achieved / dense peak) of a matrix-engine op as a function of its size in FLOPs:
// piecewise linear in log10(FLOPs) between the points, constant beyond the ends.
struct EfficiencyCurve {
  struct Point {
    double gflops;      // op size, 10^9 FLOPs
    double efficiency;  // in (0, 1]
  };
  std::vector<Point> points;  // REQUIRES: gflops strictly increasing
  [[nodiscard]] double at(double flops) const;
};

// The log-linear interpolation of EfficiencyCurve::at over any points with `gflops` and
// `efficiency` (the options' curves and a GPU profile's measured ones), without copying them:
// a search calls it millions of times. Two log10 calls whatever the number of points.
template <class Points>
double interpolate_efficiency(const Points& points, double flops) {
  if (points.empty()) return 1.0;
  const double g = std::max(flops, 1.0) / 1e9;
  if (g <= points.front().gflops) return points.front().efficiency;
  for (std::size_t i = 1; i < points.size(); ++i) {
    if (g <= points[i].gflops) {
      const double x0 = std::log10(points[i - 1].gflops);
      const double w = (std::log10(g) - x0) / (std::log10(points[i].gflops) - x0);
      return points[i - 1].efficiency + w * (points[i].efficiency - points[i - 1].efficiency);
    }
  }
  return points.back().efficiency;
}

// How context parallelism exchanges keys and values (docs/costmodel.md, "CP").
enum class ContextParallelKind {
  // Ring attention (Megatron-LM / Transformer Engine): cp − 1 point-to-point steps per pass, each
  // hidden behind a block of attention when it is long enough.
  kRing,
  // All-gather (Llama 3; cpt's executor, executor/parallel/context_parallel.h): K and V of the
  // whole sequence gathered before attention and their gradients reduce-scattered after, not
  // overlapped; the gathered K and V stay alive for backward.
  kAllGather,
};

// How the software that runs the plan dispatches its work: the number of kernels each layer, head
// and step pays CostModelOptions::kernel_overhead for (costmodel/kernel_dispatch.h), the bytes its
// element-wise operators move (costmodel/elementwise_traffic.h) and whether the projections are
// fused GEMMs (costmodel/layer_costs.h).
enum class KernelDispatch {
  // Megatron-LM / Transformer Engine: fused kernels, 12 per layer forward with FlashAttention (15
  // without), twice that backward.
  kFused,
  // cpt's executor: LibTorch eager mode, one dispatch per ATen operator called and per autograd
  // node run in backward, as executor/measure/op_counter.h counts them.
  kEager,
};

struct CostModelOptions {
  // The software that runs the plan; costmodel/runtime_profile.h's for_runtime sets the fields that
  // differ between runtimes (dispatch, context parallelism, buckets, gradients, the three scales
  // below) together. Setting this field alone changes nothing else.
  spec::Runtime runtime = spec::Runtime::kMegatron;
  // Precision of the matrix engines; activations and weights are 16-bit for bf16/fp16/fp8 (fp8
  // GEMMs keep 16-bit master activations, as Transformer Engine does) and 32-bit for fp32.
  spec::Precision precision = spec::Precision::kBf16;
  // FlashAttention: no s² score matrix is stored, and causal attention does half the work.
  // Megatron-LM and torchtitan both default to fused attention today; Korthikanti et al. 2022
  // predates it (their Table 2 and Table 5 set this to false).
  bool flash_attention = true;
  // Megatron keeps fp32 "main" gradients (18 bytes per parameter with Adam); DeepSpeed's ZeRO paper
  // counts 16-bit gradients (16 bytes per parameter, Rajbhandari et al. 2020 Table 1).
  bool fp32_main_grads = true;
  // Whether the recipe applies dropout: its masks are stored for backward (1 byte per element) and
  // add element-wise traffic. Unset: the model family's convention (GPT-style GELU models train
  // with dropout, as Megatron-LM does; LLaMA-style ones without). MPT trains without
  // (llm-foundry's configurations).
  std::optional<bool> dropout;
  // Whether the loss reads the 16-bit logits in one kernel and keeps no fp32 copy of them
  // (FlashAttention's cross_entropy, llm-foundry's default `loss_fn: fused_crossentropy`): the last
  // stage then holds the logits and their gradient (2 x 16 bits per logit) at its peak, instead of
  // the logits and the loss's fp32 copy (16 + 32 bits). Memory only: the loss's time is the
  // runtime's (memory_traffic_scale).
  bool fused_cross_entropy = false;
  // The continual pre-training recipe (TRAIN.json, docs/continual.md), priced as cpt's executor
  // runs it (executor/train/continual_objective.h): KL distillation runs a frozen teacher of the
  // student's architecture, split, staged and sharded like it, forward on every microbatch, and
  // the KL over both logits; EWC keeps an fp32 Fisher and anchor of every parameter the rank holds
  // and applies its penalty once per step.
  bool distill_teacher = false;
  bool ewc = false;
  // A mixture of experts' auxiliary loss per sequence (TRAIN.json's router_aux_loss_type
  // "seq_aux_loss"): on sequence shards the executor gathers each sequence's router probability
  // sums, not only the microbatch's (executor/model/moe_routing.h).
  bool aux_loss_per_sequence = false;

  // GEMM efficiency over GEMM size, log-linear between the points. Calibrated in two steps
  // (docs/costmodel.md, "Calibration"): the large-GEMM level (10 and 100 GFLOP) as one scale factor
  // fitted to the ten per-layer times of Korthikanti et al. 2022 Table 4 (22B layer, A100, TP 8);
  // the small-GEMM points (0.1 and 1 GFLOP) together with the two overheads below, by grid search on
  // the even rows of vTrain's single-node measurements (bench/vtrain_accuracy.cpp --fit). Held out:
  // Korthikanti Table 5, vTrain's odd single-node rows and its multi-node set. `cpt calibrate`
  // refits it per machine.
  EfficiencyCurve gemm_efficiency{{{0.01, 0.096}, {0.1, 0.10}, {1.0, 0.30}, {10.0, 0.72}, {100.0, 0.768}}};
  // Fused attention kernels reach a lower fraction of peak than plain GEMMs (FlashAttention-2
  // paper: 50-73% of A100 peak forward, lower backward).
  EfficiencyCurve attention_efficiency{{{0.1, 0.25}, {1.0, 0.45}, {10.0, 0.55}, {100.0, 0.60}}};
  // Fraction of HBM bandwidth that element-wise kernels reach (STREAM-like kernels on A100/H100).
  double hbm_efficiency = 0.80;
  // The runtime's kernels against the reference ones the curves above and the fused byte counts
  // describe (Megatron-LM with Transformer Engine): its attention kernel's efficiency as a
  // multiple of the attention curve's; the bytes its memory-bound kernels (element-wise, norms,
  // embedding, loss) move as a multiple of the fused count; its FP8 GEMMs' efficiency as a multiple
  // of the GEMM curve's. 1 for Megatron-LM; costmodel/runtime_profile.h gives the others and what
  // each was fitted to.
  double attention_kernel_scale = 1.0;
  double memory_traffic_scale = 1.0;
  double fp8_gemm_scale = 1.0;
  // Fraction of link bandwidth that large collectives reach (NCCL busBW vs link rate).
  double network_efficiency = 0.85;
  // Fixed cost of each kernel launch and eager-framework dispatch, per kernel on the critical path
  // (fitted with the small-GEMM points above; PyTorch eager dispatch is of this order). Fitted with
  // Megatron's fused counts, it lumps framework costs per fused kernel: under eager dispatch
  // (~130 kernels a layer, kernel_dispatch.h) it overstates a device's per-operator cost, so plans
  // for cpt's executor want a calibrated profile's kernel_overhead_us (2.6-4 µs on this CPU).
  core::Seconds kernel_overhead = core::microseconds(25.0);
  // Fixed cost of each collective or point-to-point call on top of its α–β time (NCCL launch,
  // stream synchronisation, framework bookkeeping); fitted likewise. Both fits sit in a flat
  // valley (20-25 us, 100-150 us): they lump per-layer framework costs cpt does not model apart.
  core::Seconds collective_overhead = core::microseconds(100.0);
  // The device's compute jitter (spec::GpuSpec::compute_jitter_sqrt_s, √s): blocking calls wait
  // for the group's slowest rank (costmodel/straggler.h). 0: the ranks keep pace.
  double compute_jitter_sqrt_s = 0;

  // HBM bytes the optimizer step moves per parameter of the local shard: fused Adam reads the fp32
  // parameter, gradient and two moments and writes three back (28), the gradient norm for clipping
  // reads the gradients (4), and the 16-bit copy of the parameter is refreshed (6). fp16 adds the
  // loss-scale unscale and inf check (8 more).
  double optimizer_bytes_per_param = 38.0;

  // Data-parallel gradient reduction in buckets overlapped with the last backward (Megatron and
  // torch DDP); false when the framework reduces only after backward (vTrain's setting).
  bool overlap_dp_with_backward = true;
  // true: build the pipeline schedule and replay it (exact for any stage durations; what
  // `cpt estimate` uses). false: closed forms for the in-flight microbatches and the makespan,
  // exact for uniform stages and within a few percent otherwise, for searches over many candidates.
  bool exact_pipeline = true;
  // Context parallelism's exchange: the ring for plans handed to Megatron-LM; the all-gather for
  // what cpt's executor runs (`cpt plan --for-executor`, `cpt compare`).
  ContextParallelKind context_parallel = ContextParallelKind::kRing;
  // The kernels the runtime dispatches: fused for plans handed to Megatron-LM; eager for cpt's
  // executor (as_run_by_cpt_executor).
  KernelDispatch dispatch = KernelDispatch::kFused;
  // DP gradient buckets (Megatron/DDP default 40 M elements; torch DDP and cpt's executor 25 MiB).
  std::int64_t bucket_elements = 40'000'000;
  // ZeRO-3 gathers this many blocks ahead of use (FSDP's forward prefetch of one, plus the block
  // in use).
  int zero3_prefetch_blocks = 2;
  // While communication overlaps compute, compute slows by this fraction of the overlapped time
  // (SM and HBM contention; Calculon's processor_usage: 0.15 NVLink, 0.02 InfiniBand).
  double overlap_slowdown_nvlink = 0.15;
  double overlap_slowdown_network = 0.02;
  // Mixtures of experts: tokens the busiest expert rank computes per MoE layer, as a multiple of
  // the balanced share T·k/E, where nothing is dropped (dropless routing). 1: balanced, the
  // setting of published benchmarks (Megatron-Bridge's moe_router_force_load_balancing); a router
  // trained on one domain and run on another is less balanced (measure it: `cpt doctor` on a run).
  double moe_load_imbalance = 1.0;
  // How the runtime sends tokens to their experts (spec/token_dispatcher.h): the all-to-all of
  // every (token, expert) pair, or the flex dispatcher's one copy per node and rank
  // (costmodel/token_dispatch.h; priced so only with expert-tp 1, as DeepEP runs).
  spec::TokenDispatcher moe_dispatcher = spec::TokenDispatcher::kAllToAll;

  // Memory that is not model state or activations.
  core::Bytes cuda_context = core::gibibytes(0.75);            // CUDA context, cuBLAS and cuDNN workspaces
  core::Bytes comm_buffer_per_group = core::gibibytes(0.125);  // NCCL buffers per group of size > 1
  double fragmentation = 0.05;  // caching-allocator slack, as a fraction of activations + buffers
};

// `o` as cpt's own executor runs a plan: all-gather context parallelism, eager dispatch (its
// operators counted, so the kernel scales are 1), its gradient buckets (`cpt plan --for-executor`,
// `--gpu local`, `cpt compare`, `cpt calibrate --from-runs`; for_runtime(o, spec::Runtime::kCpt)).
inline CostModelOptions as_run_by_cpt_executor(CostModelOptions o) {
  o.runtime = spec::Runtime::kCpt;
  o.attention_kernel_scale = o.memory_traffic_scale = o.fp8_gemm_scale = 1.0;
  o.context_parallel = ContextParallelKind::kAllGather;
  o.dispatch = KernelDispatch::kEager;
  o.bucket_elements = spec::kDefaultGradientBucketBytes / 4;  // its default bucket of fp32 gradients
  return o;
}

}  // namespace cpt::cost
