// deepspeed_config (planner/handoff.h): a plan as DeepSpeed's ds_config.json, with `cpt_notes` for
// what DeepSpeed cannot express as planned.
#include <algorithm>
#include <nlohmann/json.hpp>

#include "core/str_cat.h"
#include "planner/handoff.h"
#include "planner/torchtitan_export.h"

namespace cpt::planner {

using core::str_cat;

core::Json deepspeed_config(const spec::Plan& plan) {
  const auto& c = plan.parallel;
  core::Json notes = core::Json::array();
  // DeepSpeed's pipeline engine refuses ZeRO-2/3 (gradient partitioning across micro-steps).
  const int stage = c.pp > 1 ? std::min(c.zero_stage, 1) : c.zero_stage;
  if (stage != c.zero_stage) {
    notes.push_back(str_cat("ZeRO-", c.zero_stage,
                            " with pipeline parallelism is refused by DeepSpeed's pipeline "
                            "engine: stage 1 here, so the optimizer state fits as the plan priced it only at ZeRO-1"));
  }
  core::Json zero = {{"stage", stage},
                     {"overlap_comm", true},
                     {"contiguous_gradients", true},
                     {"reduce_bucket_size", 40'000'000},
                     {"allgather_bucket_size", 40'000'000}};
  if (stage == 3) {
    zero["stage3_prefetch_bucket_size"] = 40'000'000;
    zero["stage3_param_persistence_threshold"] = 100'000;
  }
  if (c.offload != spec::Offload::kNone) zero["offload_optimizer"] = {{"device", "cpu"}, {"pin_memory", true}};
  if (c.offload == spec::Offload::kOptimizerAndParams)
    zero["offload_param"] = {{"device", "cpu"}, {"pin_memory", true}};
  if (c.hybrid_shard) {
    zero["zero_hpz_partition_size"] =
        dp_shard_group_size(c, std::min(plan.cluster.num_gpus, plan.cluster.node.gpus_per_node));
    notes.push_back(
        "hybrid sharding (HSDP) has no DeepSpeed equivalent: zero_hpz_partition_size is ZeRO++'s hpZ, a secondary "
        "copy of the weights inside each node; gradients and optimizer state stay sharded over every GPU");
  }
  core::Json j = {{"train_micro_batch_size_per_gpu", c.micro_batch},
                  {"gradient_accumulation_steps", c.grad_accum()},
                  {"gradient_clipping", 1.0},
                  {"bf16", {{"enabled", trains_in_bf16(plan)}}},
                  {"zero_optimization", zero},
                  {"activation_checkpointing",
                   {{"partition_activations", c.sequence_parallel}, {"contiguous_memory_optimization", false}}},
                  {"wall_clock_breakdown", false}};
  if (c.offload != spec::Offload::kNone) {
    // Offload runs DeepSpeed's CPU Adam, which it builds from this block (not from a torch optimizer).
    j["optimizer"] = {{"type", "AdamW"},
                      {"params", {{"lr", 3e-4}, {"betas", {0.9, 0.95}}, {"eps", 1e-8}, {"weight_decay", 0.1}}}};
    notes.push_back("optimizer.params.lr is a placeholder: set it (and its schedule) from the job's TRAIN.json");
  }
  if (c.tp * c.pp * c.cp > 1) {
    // The global batch follows from the micro-batch, the accumulation and the data-parallel size
    // DeepSpeed reads from the model's mpu; stated here, it would be checked against world size.
    notes.push_back(str_cat("tensor parallel ", c.tp, ", pipeline parallel ", c.pp, " and context parallel ", c.cp,
                            " come from the model code (Megatron-DeepSpeed: --tensor-model-parallel-size, "
                            "--pipeline-model-parallel-size), which passes DeepSpeed its mpu; the global batch (",
                            c.global_batch, ") is micro-batch x accumulation x the mpu's data-parallel size"));
  } else {
    j["train_batch_size"] = c.global_batch;
  }
  if (c.cp > 1) {
    notes.push_back(
        str_cat("context parallel ", c.cp,
                " was priced as ring attention; DeepSpeed's own sequence parallelism (Ulysses, "
                "sequence_parallel_size in the model code) is a different algorithm (all-to-all over heads)"));
  }
  if (plan.model.moe.present()) {
    notes.push_back(str_cat(
        "a mixture of experts: DeepSpeed-MoE places its experts in the model code "
        "(deepspeed.moe.layer.MoE(num_experts=",
        plan.model.moe.experts, ", ep_size=", c.ep, ", k=", plan.model.moe.experts_per_token, "))",
        c.etp > 1 ? str_cat("; the plan's expert tensor parallel ", c.etp, " has no DeepSpeed-MoE setting") : ""));
  }
  if (!notes.empty()) j["cpt_notes"] = notes;
  return j;
}

}  // namespace cpt::planner
