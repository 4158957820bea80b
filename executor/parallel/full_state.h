#pragma once
// Checkpoints hold whole tensors, whatever the layout that wrote them (so a run can resume in
// another layout and export to Hugging Face): this file turns a rank's tensor-parallel shards and
// pipeline stages into the whole model's tensors on global rank 0, and cuts whole tensors into
// this rank's shards when loading. Under expert parallelism each rank holds its experts under
// their global names: the ranks of an etp group first join their shards of each expert, then the
// ranks of an ep group send theirs to its rank 0.
//
// Names are parameter names ("layers.3.mlp.up_proj.weight") or optimizer-state names
// ("<parameter>/exp_avg", "<parameter>/exp_avg_sq", "<parameter>/step"); a state tensor is split
// like its parameter, except the replicated step counts.
#include <string>

#include "executor/dist/communicator.h"
#include "executor/parallel/tensor_parallel.h"
#include "executor/train/step_optimizer.h"

namespace cpt::exec {

struct FullStateGroups {
  TensorParallel tp;
  Communicator* pp = nullptr;             // null: one stage
  bool holds_replica_zero = true;         // this rank's data-parallel (and context-parallel) coordinates are 0
  Communicator* ep = nullptr;             // null: every expert on this rank
  bool holds_expert_replica_zero = true;  // this rank's expert-data-parallel coordinate is 0
  Communicator* etp = nullptr;            // null: each expert whole on this rank
};

// The whole tensors of `local` (this rank's shards of its stages' tensors) of every stage, on
// global rank 0; other ranks get an empty list. COLLECTIVE over the tensor- and pipeline-parallel
// groups of the replica-zero ranks, and the etp groups and the ep groups of etp rank 0 of the
// expert-replica-zero ranks (the others return at once). `vocab`: the model's vocabulary.
NamedParams gather_full_tensors(const NamedParams& local, std::int64_t vocab, const FullStateGroups& groups);

// This rank's shard of the whole tensor `full` named `name` (a parameter or a state name).
torch::Tensor shard_of_full_tensor(const std::string& name, const torch::Tensor& full, std::int64_t vocab,
                                   const ParameterSplits& splits);

}  // namespace cpt::exec
