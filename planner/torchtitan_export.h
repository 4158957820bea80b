#pragma once
// A plan as a torchtitan 0.2.x job file (TOML, read by torchtitan's ConfigManager; torchtitan 0.3
// reads Python config modules instead: torchtitan_module.h). What it expresses:
//   [model]       the registry model whose dimensions are the plan's (name and flavor), or, when
//                 torchtitan has none, a flavor named after the plan's model that torchtitan
//                 refuses at start (with the dimensions to register in a comment) rather than its
//                 debug model; the tokenizer and weights of the base model as a placeholder path;
//   [training]    local_batch_size: the micro-batch, or with a pipeline the batch of one
//                 data-parallel rank (torchtitan splits it into pipeline microbatches);
//   [parallelism] ZeRO-3 as FSDP, ZeRO-1/2 and ZeRO-0 beside tp/cp/pp as FSDP without resharding
//                 (torchtitan runs DDP only as the one parallelism), HSDP, the pipeline schedule;
//   [checkpoint]  the base model loaded from its Hugging Face weights (continual pre-training).
// What it cannot express (optimizer-only offload, ZB-H1, an expert tensor parallelism other than
// 1 or tp, a RoPE scaling torchtitan's flavour does not have) is said in a comment.
#include <string>

#include "spec/plan.h"

namespace cpt::planner {

std::string torchtitan_toml(const spec::Plan& plan);

// torchtitan applies DDP only as the one parallelism: ZeRO-0 with tp = cp = pp = 1. Otherwise the
// export writes FSDP (export_gaps.h names what that changes).
[[nodiscard]] bool torchtitan_runs_ddp_alone(const spec::ParallelConfig& parallel);

// The dp ranks of one ZeRO shard group as spec::RankLayout places them on nodes of `gpus_per_node`
// GPUs (with hybrid sharding the dp ranks of one node; else all of dp): torchtitan's
// data_parallel_shard_degree and DeepSpeed's hpZ partition.
[[nodiscard]] int dp_shard_group_size(const spec::ParallelConfig& parallel, int gpus_per_node);

// torchtitan's registry has a model of `model`'s dimensions (the [model] section names it).
[[nodiscard]] bool torchtitan_has_flavour(const spec::ModelSpec& model);

// A model of torchtitan's registry (torchtitan/models/<name>/__init__.py, the same in 0.2.x and
// 0.3), by the dimensions it is matched on; `ffn` is the routed expert's width for a mixture of
// experts, `experts` its routed experts (0: dense).
struct TorchtitanFlavour {
  const char* name;
  const char* flavor;
  int layers, hidden, heads, kv_heads, ffn;
  std::int64_t vocab;
  int experts;
  bool llama31_rope_scaling;  // the flavour applies Llama 3.1's RoPE scaling
};
// The flavour of `model`'s dimensions, or null.
[[nodiscard]] const TorchtitanFlavour* torchtitan_flavour(const spec::ModelSpec& model);

}  // namespace cpt::planner
