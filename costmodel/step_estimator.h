#pragma once
// evaluate(): memory and time of one training step of a ParallelConfig, or why it cannot run.
// An infeasible configuration is a value, not an exception: the planner meets millions of them.
//
// Step time = replay of the pipeline schedule with per-stage forward/backward durations (compute,
// recompute, exposed TP/CP communication, ZeRO-3 gathers) and point-to-point transfers, + the
// exposed part of the data-parallel gradient reduction, + the optimizer step. Each term names the
// configuration that enables it (docs/costmodel.md, "Time").

#include <optional>
#include <string>
#include <variant>
#include <vector>

#include "core/units.h"
#include "costmodel/cost_options.h"
#include "costmodel/memory_model.h"
#include "costmodel/topology.h"
#include "spec/hardware_spec.h"
#include "spec/model_spec.h"
#include "spec/parallel_config.h"

namespace cpt::cost {

// Serialized as the strings of to_string. DO NOT CHANGE them.
enum class InfeasibleReason { kInvalidConfig, kUnsupportedCombination, kOutOfMemory };
std::string to_string(InfeasibleReason r);

struct Infeasible {
  InfeasibleReason reason = InfeasibleReason::kInvalidConfig;
  std::string detail;  // the numbers, e.g. "91.2 GiB > 80.0 GiB on pp rank 0 (weights 40.1, ...)"
};

// Seconds of one step on the critical pipeline rank, by cause; total() is the step time.
struct StepTimeBreakdown {
  core::Seconds compute;    // forward + backward of blocks, embedding, head
  core::Seconds recompute;  // activation recomputation
  core::Seconds tp_comm;    // tensor-parallel collectives (not overlapped)
  core::Seconds cp_comm;    // context-parallel K/V exchange not hidden behind attention
  core::Seconds ep_comm;    // expert parallelism's token all-to-alls (and etp's gathers)
  core::Seconds pp_comm;    // point-to-point transfers on the critical path
  core::Seconds pp_bubble;  // idle time of the critical rank in the schedule
  core::Seconds dp_comm;    // exposed data-parallel / ZeRO communication
  core::Seconds optimizer;  // optimizer step
  // The continual recipe's own work (CostModelOptions::distill_teacher, ewc): the teacher's
  // forward and the KL on every microbatch, EWC's penalty once per step.
  core::Seconds continual;
  core::Seconds other;  // compute slowdown while communication overlaps it
  [[nodiscard]] core::Seconds total() const {
    return compute + recompute + tp_comm + cp_comm + ep_comm + pp_comm + pp_bubble + dp_comm + optimizer + continual +
           other;
  }
};

// The same step time split by the kind of work the critical rank does (spec/work_kinds.h), as a
// profiled step of the executor is split (cpt compare); total() is the step time.
struct StepTimeByKind {
  core::Seconds gemm;           // matrix products, forward, backward and recomputed
  core::Seconds attention;      // the attention core
  core::Seconds loss;           // the cross-entropy over the logits
  core::Seconds optimizer;      // the optimizer step (with its kernels)
  core::Seconds communication;  // exposed tp, cp, dp and pp communication and the pipeline bubble
  core::Seconds other;          // the rest: memory-bound kernels, kernel dispatch, overlap slowdown
  [[nodiscard]] core::Seconds total() const { return gemm + attention + loss + optimizer + communication + other; }
};

// The per-stage durations and step-end terms an estimate was built from, so that the simulator
// (costmodel/sim/) replays exactly the same costs: one source of truth for every formula.
struct StageDurations {
  std::vector<double> forward_s;   // per stage, one microbatch: compute + exposed TP/CP/ZeRO-3
  std::vector<double> backward_s;  // per stage, one microbatch: + recomputation
  // Per stage, one microbatch: the weight-gradient GEMMs inside backward_s (the W part of a split
  // backward; the input-gradient part I is the rest, including recomputation and TP traffic).
  std::vector<double> weight_grad_s;
  std::vector<double> p2p_after_s;  // per stage: transfer to the next stage (and of the gradient back)
  core::Seconds dp_reduce;          // one gradient reduction of the critical rank (bucketed, overlappable)
  int dp_buckets = 1;               // buckets of that reduction
  int dp_reductions = 1;            // reductions per step: 1, or the microbatches for ZeRO-2
  // After the reductions: ZeRO-1/2 all-gather, HSDP all-reduce, and (cpt's executor) the step's
  // scalar all-reduces over every group (spec::executor_step_scalar_all_reduces).
  core::Seconds dp_after;
  core::Seconds optimizer;
  // What the estimate adds to the critical rank's step beside its schedule and reductions: the wait
  // for the data-parallel group's slowest rank at the last reduction (straggler.h), the dispatch
  // of the data-parallel and pipeline calls' kernels and, for cpt's executor under ZeRO-3, the root
  // unit's gathers and reduce-scatters of every microbatch. Replayed before the optimizer.
  core::Seconds outside_schedule;
  // Compute slowdown per second of communication overlapped with it (the estimate's `other`): the
  // simulator lengthens a compute task by overlap_slowdown times the time a data-parallel bucket
  // runs beside it, and by overlap_slowdown times the ZeRO-3 communication hidden in it (below).
  double overlap_slowdown = 0;
  // ZeRO-3 only (else empty): per stage, one microbatch, the seconds of prefetched parameter
  // gathers (and gradient reduce-scatters, backward) that run hidden behind the stage's compute.
  std::vector<double> zero3_overlapped_forward_s;
  std::vector<double> zero3_overlapped_backward_s;
  // What-if only (the simulator's per-rank mode; never set by the cost model): per pipeline rank,
  // a multiplier of its data-parallel collectives. Empty: 1 everywhere.
  std::vector<double> dp_slowdown;
};

// A quantity per communication group, for one rank's step.
struct PerCommGroup {
  double tp = 0;
  double cp = 0;
  double dp = 0;  // the dp × cp replicas' and the ZeRO shard group's (and expert-dp's)
  double pp = 0;
  double ep = 0;  // ep's and etp's
};
// Communication calls a rank starts in one step, by group (collectives, sends and receives): what
// measured.json's dispatch counts for the executor's ranks.
using CallsPerStep = PerCommGroup;
// Their bytes (WorkItem::bytes of each operation: the reduced buffer, the gathered result, what an
// all-to-all sends, one transfer), as measured.json's dispatch counts them.
using BytesPerStep = PerCommGroup;

struct Estimate {
  StepTimeBreakdown time;
  StepTimeByKind by_kind;
  StageDurations stages;
  double tokens_per_s_per_gpu = 0;
  double model_tflops_per_gpu = 0;
  // MFU and HFU against the dense peak of the compute precision. FLOP convention: Korthikanti et
  // al. 2022 eq. (7) (non-causal attention, backward = 2 x forward), generalised to GQA, SwiGLU and
  // the model's LM head; HFU adds the recomputed forward work in the same convention. (Their
  // eq. (8) adds 12·b·s²·h per layer for selective recompute; cpt adds the 4·b·s²·h actually
  // recomputed.)
  double mfu = 0;
  double hfu = 0;
  core::Flops model_flops_per_step;
  core::Flops hardware_flops_per_step;
  std::vector<MemoryBreakdown> memory_per_pp_rank;
  int worst_pp_rank = 0;  // the rank with the highest memory
  // Kernels the critical pipeline rank dispatches per step (CostModelOptions::dispatch's counts).
  double kernels_per_step = 0;
  CallsPerStep calls_per_step;  // of the critical pipeline rank
  BytesPerStep bytes_per_step;  // of the critical pipeline rank
  int critical_pp_rank = 0;     // the pipeline rank that finishes the step last
  [[nodiscard]] const MemoryBreakdown& peak_memory() const {
    return memory_per_pp_rank[static_cast<std::size_t>(worst_pp_rank)];
  }
};

using Evaluation = std::variant<Estimate, Infeasible>;

// What a search keeps of an evaluation: the same numbers as evaluate() with exact_pipeline =
// false, without the per-stage durations, the other ranks' memory or a formatted reason, so that
// it costs no allocation and O(1) in the pipeline degree once the thread has seen its pipeline
// shape (search_ranks.h; search_evaluation_test.cpp checks it against evaluate()). REQUIRES of the configuration: a
// balanced stage partition (the planner's).
struct SearchEstimate {
  std::optional<InfeasibleReason> infeasible;  // set: nothing else is
  StepTimeBreakdown time;
  MemoryBreakdown peak_memory;  // of the worst pipeline rank
  int worst_pp_rank = 0;
  double tokens_per_s_per_gpu = 0;
  double model_tflops_per_gpu = 0;
  double mfu = 0;
  double hfu = 0;
};

[[nodiscard]] Evaluation evaluate(const spec::ModelSpec& model, const spec::ClusterSpec& cluster,
                                  const spec::ParallelConfig& parallel, int seq_len,
                                  const CostModelOptions& options = {});
// The same with the cluster's topology graph built once by the caller (a search evaluates many
// configurations on one cluster). REQUIRES: `topology` was built from `cluster`.
[[nodiscard]] Evaluation evaluate(const spec::ModelSpec& model, const spec::ClusterSpec& cluster,
                                  const spec::ParallelConfig& parallel, int seq_len, const CostModelOptions& options,
                                  const Topology& topology);

// The search's evaluation (see SearchEstimate): `options.exact_pipeline` is ignored (closed forms).
// REQUIRES: `topology` was built from `cluster`.
[[nodiscard]] SearchEstimate evaluate_search(const spec::ModelSpec& model, const spec::ClusterSpec& cluster,
                                             const spec::ParallelConfig& parallel, int seq_len,
                                             const CostModelOptions& options, const Topology& topology);

// `options` with the device's own fixed costs per kernel and per collective call, when its profile
// has them (`cpt calibrate --from-runs`); evaluate() applies this itself, and copies the options
// only when it changes them: a search applies it once beforehand.
[[nodiscard]] CostModelOptions with_device_overheads(const CostModelOptions& options, const spec::GpuSpec& gpu);

}  // namespace cpt::cost
