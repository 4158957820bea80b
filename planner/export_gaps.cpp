#include "planner/export_gaps.h"

#include "core/str_cat.h"
#include "spec/executor_support.h"

namespace cpt::planner {

using core::str_cat;
using spec::Runtime;

namespace {

ExportGap megatron_gap(const spec::ParallelConfig& p) {
  if (p.zero_stage >= 2) return ExportGap::kShardingBeyondOptimizer;
  if (p.offload == spec::Offload::kOptimizerAndParams) return ExportGap::kParameterOffload;
  if (p.hybrid_shard) return ExportGap::kHybridSharding;
  return ExportGap::kNone;
}

ExportGap deepspeed_gap(const spec::ModelSpec& m, const spec::ParallelConfig& p) {
  if (m.moe.present() && p.zero_stage == 3) return ExportGap::kMoeWithZero3;
  if (p.pp > 1 && p.zero_stage >= 2) return ExportGap::kShardingWithPipeline;
  if (p.cp > 1) return ExportGap::kRingContextParallel;
  if (p.hybrid_shard) return ExportGap::kHybridSharding;
  return ExportGap::kNone;
}

ExportGap torchtitan_gap(const spec::ParallelConfig& p) {
  if (p.ep > 1 && p.etp != 1 && p.etp != p.tp) return ExportGap::kExpertTensorParallel;
  if (p.schedule == spec::ScheduleKind::kZeroBubbleH1) return ExportGap::kZeroBubbleH1;
  if (p.offload == spec::Offload::kOptimizer) return ExportGap::kOptimizerOnlyOffload;
  if (p.zero_stage == 0 && p.dp > 1 && (p.tp > 1 || p.cp > 1 || p.pp > 1)) return ExportGap::kDataParallelBesideOthers;
  return ExportGap::kNone;
}

}  // namespace

ExportGap find_export_gap(const spec::ModelSpec& model, const spec::ParallelConfig& parallel, int seq_len,
                          Runtime target) {
  switch (target) {
    case Runtime::kCpt:
      return spec::find_executor_gap(parallel, model, seq_len) ? ExportGap::kCptExecutor : ExportGap::kNone;
    case Runtime::kMegatron:
      return megatron_gap(parallel);
    case Runtime::kDeepSpeed:
      return deepspeed_gap(model, parallel);
    case Runtime::kTorchtitan:
      return torchtitan_gap(parallel);
    case Runtime::kFsdp:
      return ExportGap::kNone;
  }
  return ExportGap::kNone;
}

bool is_refusal(ExportGap gap) {
  return gap == ExportGap::kCptExecutor || gap == ExportGap::kMoeWithZero3 || gap == ExportGap::kExpertTensorParallel;
}

std::string describe(ExportGap gap, const spec::ParallelConfig& p, const spec::ModelSpec& model, int seq_len) {
  switch (gap) {
    case ExportGap::kNone:
      return "runs as planned";
    case ExportGap::kCptExecutor:
      return spec::describe(*spec::find_executor_gap(p, model, seq_len), p, seq_len);
    case ExportGap::kMoeWithZero3:
      return "DeepSpeed-MoE does not run with ZeRO-3 (its engine asserts it): ZeRO-2 at most";
    case ExportGap::kExpertTensorParallel:
      return str_cat("torchtitan's expert tensor parallelism is 1 or tp (", p.tp, "), not ", p.etp);
    case ExportGap::kShardingBeyondOptimizer:
      return str_cat("Megatron-LM's export shards the optimizer state only: ZeRO-", p.zero_stage, " runs as ZeRO-1");
    case ExportGap::kParameterOffload:
      return "Megatron-LM has no argument that offloads parameters: the optimizer state only";
    case ExportGap::kHybridSharding:
      return "hybrid sharding is written as ZeRO-1 for Megatron-LM and as ZeRO++ hpZ for DeepSpeed, not HSDP";
    case ExportGap::kShardingWithPipeline:
      return str_cat("DeepSpeed's pipeline engine refuses ZeRO-", p.zero_stage, ": runs as ZeRO-1");
    case ExportGap::kRingContextParallel:
      return "DeepSpeed's sequence parallelism is Ulysses, not the ring attention priced for context parallelism";
    case ExportGap::kZeroBubbleH1:
      return "torchtitan has no ZB-H1 schedule without virtual stages: runs as 1F1B";
    case ExportGap::kOptimizerOnlyOffload:
      return "torchtitan offloads parameters, gradients and optimizer state together, not the optimizer alone";
    case ExportGap::kDataParallelBesideOthers:
      return "torchtitan runs DDP only alone: ZeRO-0 beside tensor, context or pipeline parallelism runs as FSDP";
  }
  return "";
}

}  // namespace cpt::planner
