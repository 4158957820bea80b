#pragma once
// The step optimizer a plan's ZeRO stage asks for: ZeRO-0 replicates the update (bucketed
// all-reduce), ZeRO-1/2 shard the optimizer state (and gradients) over the replicas
// (step_optimizer.h), ZeRO-3 shards the parameters too, gathered per block (fully_sharded.h), over
// the node's part of the replicas under hybrid sharding. Under expert parallelism the routed
// experts have their own optimizer over expert-dp (make_expert_split_optimizer; under ZeRO-3
// make_expert_split_fully_sharded).
#include <memory>
#include <utility>

#include "executor/dist/process_groups.h"
#include "executor/model/llama_model.h"
#include "executor/parallel/fully_sharded.h"
#include "executor/train/step_optimizer.h"
#include "executor/train/train_config.h"
#include "spec/parallel_config.h"

namespace cpt::exec {

struct OptimizerChoice {
  std::unique_ptr<StepOptimizer> optimizer;
  FullyShardedModel* zero3 = nullptr;   // the optimizer, under ZeRO-3; null otherwise
  Communicator* shard_group = nullptr;  // ZeRO-3's: the node's replicas under hybrid sharding, else all
  // ZeRO-3's for the routed experts apart from their layer (expert-dp); null otherwise.
  Communicator* expert_shard_group = nullptr;
};

// `named` as (everything else, the routed experts), each in its order.
std::pair<NamedParams, NamedParams> split_routed_experts(const NamedParams& named);

// `model`: the whole model (pp = 1), told where its parameters live under ZeRO-3.
OptimizerChoice choose_step_optimizer(const spec::ParallelConfig& par, const TrainConfig& config,
                                      const NamedParams& named, const ProcessGroups& groups, LlamaModel& model);

}  // namespace cpt::exec
