#pragma once
// What each framework's export (handoff.h, torchtitan_export.h) cannot run exactly as planned: the
// framework refuses the configuration, or the export writes a different one (with a comment in the
// file). `cpt plan --target F` keeps only the candidates F runs as planned; report.md names the
// refusals. Allocation-free: the planner's pruning calls find_export_gap per candidate.
#include <string>

#include "spec/model_spec.h"
#include "spec/parallel_config.h"
#include "spec/runtime.h"

namespace cpt::planner {

enum class ExportGap {
  kNone,
  kCptExecutor,               // cpt's executor refuses it (spec/executor_support.h)
  kMoeWithZero3,              // DeepSpeed-MoE asserts against ZeRO-3
  kExpertTensorParallel,      // torchtitan: expert tensor parallelism is 1 or tp
  kShardingBeyondOptimizer,   // Megatron: ZeRO-2/3 beside a pipeline or offload written as ZeRO-1
  kParameterOffload,          // Megatron: no argument offloads parameters
  kHybridSharding,            // Megatron beside a pipeline or offload: written as ZeRO-1; DeepSpeed: ZeRO++ hpZ
  kShardingWithPipeline,      // DeepSpeed's pipeline engine refuses ZeRO-2/3: written as ZeRO-1
  kRingContextParallel,       // DeepSpeed's sequence parallelism is Ulysses, not the ring priced
  kZeroBubbleH1,              // torchtitan (no class without virtual stages), Megatron-LM: written as 1F1B
  kOptimizerOnlyOffload,      // torchtitan offloads parameters, gradients and optimizer together
  kDataParallelBesideOthers,  // torchtitan runs DDP only alone: ZeRO-0 beside tp/cp/pp written as FSDP
  kShardedParameters,         // torchtitan has no ZeRO-1/2: FSDP without resharding shards parameters too
  kUnevenPipelineSplit,       // torchtitan splits layers its own way when pp·vp does not divide them
  kRankOrder,                 // torchtitan's mesh keeps pp outermost: no tp-cp-pp-dp order
  kExpertParallelFold,        // torchtitan: ep must divide dp_shard·cp (·tp with etp 1)
  kNoTorchtitanModel,         // torchtitan's registry has no model of these dimensions
  kPipelineSchedule,          // DeepSpeed's pipeline engine runs its own schedule: no interleaving or ZB-H1
};

// The first gap of `parallel` of `model` for the export read by `target`; kNone when it runs as
// planned. Targets without an export of their own (fsdp) have no gaps.
[[nodiscard]] ExportGap find_export_gap(const spec::ModelSpec& model, const spec::ParallelConfig& parallel, int seq_len,
                                        spec::Runtime target);

// Whether Megatron-LM's export writes the plan's ZeRO-2/3 as Megatron-FSDP
// (`--use-megatron-fsdp --data-parallel-sharding-strategy optim_grads|optim_grads_params`, hybrid
// sharding as its HSDP: `--num-distributed-optimizer-instances`, one instance per node's shard
// group): without a pipeline or offload, the setups Megatron-LM's Megatron-FSDP guide
// (docs/discussions/megatron-fsdp-user-guide) runs; otherwise the distributed optimizer (ZeRO-1).
[[nodiscard]] bool megatron_runs_as_fsdp(const spec::ParallelConfig& parallel);

// The configuration `target`'s export writes for `parallel` where the file cannot state the
// planned one: Megatron-LM — ZeRO-2/3 beside a pipeline or offload as ZeRO-1 (the distributed
// optimizer, no hybrid sharding), parameter offload as optimizer offload, ZB-H1 as 1F1B; DeepSpeed
// — ZeRO-2/3 with a pipeline as ZeRO-1, its pipeline engine's schedule as 1F1B without virtual
// stages; torchtitan — ZB-H1 as 1F1B, optimizer offload as offload of everything, ZeRO-0 beside
// tp/cp/pp as FSDP (ZeRO-3). What the file writes as the nearest equivalent the cost model prices
// alike (Ulysses for the ring, hpZ for hybrid sharding, torchtitan's own layer split or mesh
// order, FSDP without resharding for ZeRO-1/2) keeps the planned configuration, as does a refusal.
[[nodiscard]] spec::ParallelConfig config_as_exported(const spec::ModelSpec& model,
                                                      const spec::ParallelConfig& parallel, int seq_len,
                                                      spec::Runtime target);

// What `config_as_exported` changed, as "ZeRO-3 -> ZeRO-1, zb_h1 -> 1f1b"; empty when nothing.
[[nodiscard]] std::string describe_changes(const spec::ParallelConfig& planned, const spec::ParallelConfig& exported);

// True for the gaps where the framework refuses the configuration (rather than running another).
[[nodiscard]] bool is_refusal(ExportGap gap);

// One sentence: what the framework does instead, with the configuration's values.
[[nodiscard]] std::string describe(ExportGap gap, const spec::ParallelConfig& parallel, const spec::ModelSpec& model,
                                   int seq_len);

}  // namespace cpt::planner
