#include "planner/export_gaps.h"

#include "core/str_cat.h"
#include "planner/torchtitan_export.h"
#include "spec/executor_support.h"

namespace cpt::planner {

using core::str_cat;
using spec::Runtime;

namespace {

ExportGap megatron_gap(const spec::ParallelConfig& p) {
  if (p.zero_stage >= 2 && p.hybrid_shard && !megatron_runs_as_fsdp(p)) return ExportGap::kHybridSharding;
  if (p.zero_stage >= 2 && !megatron_runs_as_fsdp(p)) return ExportGap::kShardingBeyondOptimizer;
  if (p.schedule == spec::ScheduleKind::kZeroBubbleH1) return ExportGap::kZeroBubbleH1;
  if (p.offload == spec::Offload::kOptimizerAndParams) return ExportGap::kParameterOffload;
  return ExportGap::kNone;
}

ExportGap deepspeed_gap(const spec::ModelSpec& m, const spec::ParallelConfig& p) {
  if (m.moe.present() && p.zero_stage == 3) return ExportGap::kMoeWithZero3;
  if (p.pp > 1 && p.zero_stage >= 2) return ExportGap::kShardingWithPipeline;
  if (p.pp > 1 && (p.virtual_stages > 1 || p.schedule == spec::ScheduleKind::kZeroBubbleH1)) {
    return ExportGap::kPipelineSchedule;
  }
  if (p.cp > 1) return ExportGap::kRingContextParallel;
  if (p.hybrid_shard) return ExportGap::kHybridSharding;
  return ExportGap::kNone;
}

ExportGap torchtitan_gap(const spec::ModelSpec& m, const spec::ParallelConfig& p) {
  if (!torchtitan_has_flavour(m)) return ExportGap::kNoTorchtitanModel;
  if (p.ep > 1 && p.etp != 1 && p.etp != p.tp) return ExportGap::kExpertTensorParallel;
  // The export's data-parallel shard degree: dp, or 1 for DDP alone (a mixture of experts has no
  // hybrid sharding: pruned by shape before this).
  const bool ddp_alone = torchtitan_runs_ddp_alone(p);
  const int shard = ddp_alone ? 1 : p.dp;
  if (p.ep > 1 && (shard * p.cp * (p.etp == 1 ? p.tp : 1)) % p.ep != 0) return ExportGap::kExpertParallelFold;
  if (p.schedule == spec::ScheduleKind::kZeroBubbleH1) return ExportGap::kZeroBubbleH1;
  if (p.offload == spec::Offload::kOptimizer) return ExportGap::kOptimizerOnlyOffload;
  if (p.zero_stage == 0 && p.dp > 1 && !ddp_alone) return ExportGap::kDataParallelBesideOthers;
  if (p.zero_stage == 1 || p.zero_stage == 2) return ExportGap::kShardedParameters;
  if (p.pp > 1 && m.layers % (p.pp * p.virtual_stages) != 0) return ExportGap::kUnevenPipelineSplit;
  if (p.pp > 1 && p.dp > 1 && p.axis_order[2] == spec::Axis::kPp) return ExportGap::kRankOrder;
  return ExportGap::kNone;
}

spec::ScheduleKind one_f_one_b(const spec::ParallelConfig& p) {
  return p.virtual_stages > 1 ? spec::ScheduleKind::kInterleaved1F1B : spec::ScheduleKind::k1F1B;
}

// `p` with `gap` replaced by what the export writes; unchanged where it writes an equivalent.
spec::ParallelConfig as_written(spec::ParallelConfig p, ExportGap gap, Runtime target) {
  switch (gap) {
    case ExportGap::kShardingBeyondOptimizer:
    case ExportGap::kShardingWithPipeline:
      p.zero_stage = 1;
      p.hybrid_shard = false;
      break;
    case ExportGap::kHybridSharding:
      if (target == Runtime::kMegatron) {
        p.zero_stage = 1;
        p.hybrid_shard = false;
      }
      break;
    case ExportGap::kParameterOffload:
      p.offload = spec::Offload::kOptimizer;
      break;
    case ExportGap::kZeroBubbleH1:
      p.schedule = one_f_one_b(p);
      break;
    case ExportGap::kPipelineSchedule:
      p.virtual_stages = 1;
      p.schedule = spec::ScheduleKind::k1F1B;
      break;
    case ExportGap::kOptimizerOnlyOffload:
      p.offload = spec::Offload::kOptimizerAndParams;
      break;
    case ExportGap::kDataParallelBesideOthers:
      p.zero_stage = 3;
      break;
    default:
      break;
  }
  return p;
}

}  // namespace

bool megatron_runs_as_fsdp(const spec::ParallelConfig& p) {
  return p.zero_stage >= 2 && p.pp == 1 && p.offload == spec::Offload::kNone;
}

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
      return torchtitan_gap(model, parallel);
    case Runtime::kFsdp:
      return ExportGap::kNone;
  }
  return ExportGap::kNone;
}

spec::ParallelConfig config_as_exported(const spec::ModelSpec& model, const spec::ParallelConfig& parallel, int seq_len,
                                        Runtime target) {
  spec::ParallelConfig written = parallel;
  // Each rewrite removes its gap; the next gap (if any) is then the file's next note.
  for (int rewrites = 0; rewrites < 8; ++rewrites) {
    const ExportGap gap = find_export_gap(model, written, seq_len, target);
    if (gap == ExportGap::kNone || is_refusal(gap)) break;
    const spec::ParallelConfig next = as_written(written, gap, target);
    if (next == written) break;
    written = next;
  }
  return written;
}

std::string describe_changes(const spec::ParallelConfig& planned, const spec::ParallelConfig& exported) {
  std::string changes;
  const auto add = [&](const std::string& change) { changes += (changes.empty() ? "" : ", ") + change; };
  if (planned.zero_stage != exported.zero_stage) {
    add(str_cat("ZeRO-", planned.zero_stage, " -> ZeRO-", exported.zero_stage));
  }
  if (planned.hybrid_shard != exported.hybrid_shard) add("hybrid sharding -> none");
  if (planned.offload != exported.offload) {
    add(str_cat("offload ", spec::to_string(planned.offload), " -> ", spec::to_string(exported.offload)));
  }
  if (planned.virtual_stages != exported.virtual_stages) {
    add(str_cat("virtual stages ", planned.virtual_stages, " -> ", exported.virtual_stages));
  }
  if (planned.schedule != exported.schedule) {
    add(str_cat(spec::to_string(planned.schedule), " -> ", spec::to_string(exported.schedule)));
  }
  return changes;
}

bool is_refusal(ExportGap gap) {
  return gap == ExportGap::kCptExecutor || gap == ExportGap::kMoeWithZero3 || gap == ExportGap::kExpertTensorParallel ||
         gap == ExportGap::kExpertParallelFold || gap == ExportGap::kNoTorchtitanModel;
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
      return str_cat("Megatron-LM's export writes Megatron-FSDP only without a pipeline or offload: ZeRO-",
                     p.zero_stage, " runs as ZeRO-1 (the distributed optimizer)");
    case ExportGap::kParameterOffload:
      return "Megatron-LM has no argument that offloads parameters: the optimizer state only";
    case ExportGap::kHybridSharding:
      return "hybrid sharding is Megatron-FSDP's HSDP without a pipeline or offload; with them it is written as ZeRO-1 "
             "for Megatron-LM, and as ZeRO++ hpZ for DeepSpeed, not HSDP";
    case ExportGap::kShardingWithPipeline:
      return str_cat("DeepSpeed's pipeline engine refuses ZeRO-", p.zero_stage, ": runs as ZeRO-1");
    case ExportGap::kRingContextParallel:
      return "DeepSpeed's sequence parallelism is Ulysses, not the ring attention priced for context parallelism";
    case ExportGap::kZeroBubbleH1:
      return "the export has no ZB-H1 (torchtitan: none without virtual stages; Megatron-LM: not upstream): runs as "
             "1F1B";
    case ExportGap::kOptimizerOnlyOffload:
      return "torchtitan offloads parameters, gradients and optimizer state together, not the optimizer alone";
    case ExportGap::kDataParallelBesideOthers:
      return "torchtitan runs DDP only alone: ZeRO-0 beside tensor, context or pipeline parallelism runs as FSDP";
    case ExportGap::kShardedParameters:
      return str_cat("torchtitan has no ZeRO-", p.zero_stage,
                     ": FSDP without resharding after forward also shards the parameters between steps");
    case ExportGap::kUnevenPipelineSplit:
      return str_cat("torchtitan splits ", model.layers, " layers over ", p.pp * p.virtual_stages,
                     " stages its own way, not as the plan does");
    case ExportGap::kRankOrder:
      return "torchtitan's device mesh keeps pp outermost: the plan's tp-cp-pp-dp rank order is not expressed";
    case ExportGap::kExpertParallelFold:
      return str_cat("torchtitan folds ep over its data-parallel shards and cp", p.etp == 1 ? " and tp" : "", ": ep ",
                     p.ep, " does not divide them");
    case ExportGap::kNoTorchtitanModel:
      return str_cat("torchtitan's model registry has no model of ", model.name,
                     "'s dimensions: the export names one torchtitan refuses");
    case ExportGap::kPipelineSchedule:
      return "DeepSpeed's pipeline engine runs its own 1F1B-style schedule: no interleaved stages or ZB-H1";
  }
  return "";
}

}  // namespace cpt::planner
