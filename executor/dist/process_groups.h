#pragma once
// The communicators of one process, built from the plan's spec::RankLayout: the process's group
// along each parallel axis (named "<axis>/<smallest global rank>") and the whole world. Built once
// and passed explicitly (design.md: never a global). A single-process run gets groups of one.
#include <chrono>
#include <memory>

#include "executor/dist/communicator.h"
#include "executor/dist/launch_info.h"
#include "executor/dist/timed_communicator.h"
#include "spec/rank_layout.h"

namespace cpt::exec {

class JobStore;

// Seconds blocked in each axis's groups (timed_communicator.h); the data-parallel clock also
// counts the hybrid-sharding and expert-data-parallel groups, the ep clock the expert-tp ones (as
// the cost model's step inventory, costmodel/step_end.cpp).
struct CommClocks {
  CommClock tp, cp, dp, pp, ep;
};

struct ProcessGroups {
  int rank = 0;  // global
  std::shared_ptr<CommClocks> clocks = std::make_shared<CommClocks>();
  spec::RankCoord coord;
  std::unique_ptr<Communicator> world, tp, cp, dp, pp;
  // Hybrid sharding only (null otherwise): the replicas (dp × cp) on this node, over which ZeRO-3
  // shards (spec::RankLayout::zero_shard_group), and this rank's peers holding the same shard on
  // the other nodes (zero_replicate_group).
  std::unique_ptr<Communicator> dp_shard, dp_replicate;
  // Context parallelism only (null otherwise): the ranks holding the same parameters, dp × cp
  // (spec::RankLayout::replica_group): gradients are summed and ZeRO shards spread over them.
  std::unique_ptr<Communicator> dp_cp;
  // Routed experts that are units of their own (spec::ParallelConfig::experts_with_their_layer
  // false: ep > 1, etp > 1, or tp > 1), else null; spec::RankLayout's expert axes. `ep` (null for
  // ep 1): the ranks among which the routed experts are split and tokens dispatched; `etp` (null
  // for etp 1): the ranks splitting each of the same experts' MLPs; `ep_etp` (only when both exceed
  // 1; else the one that does serves): the ep × etp ranks of this rank's expert-dp coordinate,
  // ascending (index ep coord · etp + etp coord), over which the dispatch gathers every rank's pairs
  // per expert (parallel/expert_parallel.h); `expert_dp`: the ranks
  // holding the same expert shards, over which their gradients are summed and sharded.
  std::unique_ptr<Communicator> ep, etp, ep_etp, expert_dp;
  // The group over which gradients are summed and optimizer state is sharded: dp_cp, or dp.
  [[nodiscard]] Communicator& replicas() const { return dp_cp ? *dp_cp : *dp; }
};

// COLLECTIVE over the job: every rank calls it with the same layout. ConfigError when the layout's
// world size is not the launch's. `cuda`: the ranks train on CUDA devices (each on its own, set as
// the current device before this call); every group but the world then routes CUDA tensors to
// NCCL and CPU tensors to Gloo (c10d_communicator.h, route_by_device). `experts_apart`: the model
// has routed experts that are units of their own (the ep and expert_dp groups above).
ProcessGroups make_process_groups(const spec::RankLayout& layout, const LaunchInfo& launch,
                                  std::chrono::seconds timeout, bool cuda = false, bool experts_apart = false);

}  // namespace cpt::exec
