#pragma once
// The gradient buckets cpt's executor forms on one rank: spec::reverse_order_buckets over the
// parameters it holds, per tp rank, in spec::visit_gradient_order's order (the executor sorts its
// parameters by spec::gradient_order_key).
// The cost model prices the executor's data-parallel calls per bucket and its ZeRO-2 staging
// buffers from these (as_run_by_cpt_executor); Megatron's buckets are priced as Ψ / cap.
#include <cstdint>
#include <span>

#include "spec/model_spec.h"
#include "spec/parameter_order.h"

namespace cpt::cost {

struct BucketStats {
  int count = 0;            // buckets on the rank
  double largest_pair = 0;  // elements of the largest two consecutive buckets together
  // ZeRO-1/2: the most optimizer segments (parts of one parameter inside one owned slice of a
  // bucket) any member of the shard group holds, each bucket split by spec::ShardLayout.
  int busiest_segments = 0;
};

// `held`: the rank's blocks, one range per chunk (spec::StagePartition::balanced_ranges_of_rank); `first` / `last`: it
// holds the embedding / the final norm and head; `single_stage`: one pipeline stage (a tied head is the embedding
// itself); `shard_group`: the ZeRO-1/2 group each bucket is split over (1: none); `subset`, `ep` and `etp`: under
// expert parallelism the routed experts' buckets or the rest's (spec::ParameterSubset). O(parameter tensors +
// shard_group).
BucketStats executor_gradient_buckets(const spec::ModelSpec& model, int tp, std::span<const spec::LayerRange> held,
                                      bool first, bool last, bool single_stage, std::int64_t cap_elements,
                                      int shard_group = 1, spec::ParameterSubset subset = spec::ParameterSubset::kAll,
                                      int ep = 1, int etp = 1);

}  // namespace cpt::cost
