#pragma once
// The planner's evaluation of a configuration in O(1) of the pipeline degree (evaluate_search):
// the pipeline ranks grouped by what they hold, their peak memory, and the critical rank of the
// closed-form pipeline over them.

#include <span>

#include "costmodel/memory_model.h"
#include "costmodel/step_end.h"
#include "costmodel/step_estimator.h"
#include "costmodel/topology.h"
#include "costmodel/work_pricing.h"

namespace cpt::cost {

// The chunks of a rank that can be its heaviest in stored activations, d·a_dense + m·a_moe for any
// rates: of each chunk size (the balanced partition's q or q + 1 layers), the fewest and the most
// MoE layers.
struct ChunkCandidates {
  int smallest = 0;  // q
  bool present[2] = {};
  double fewest_moe[2] = {}, most_moe[2] = {};
  void add(const HeldLayers& chunk);
  [[nodiscard]] double heaviest_bytes(const MemoryTerms& terms) const;
  // Whether each of `other`'s candidates has no more layers of either kind than one of these.
  [[nodiscard]] bool covers(const ChunkCandidates& other) const;
  bool operator==(const ChunkCandidates&) const = default;
};

// A pipeline rank the search prices, standing for `alike` ranks that hold the same layers (the same
// count of each kind, the same chunk candidates, the same kinds from its first layer on): itself
// and later inner ranks, whose work, parameters and buckets equal its own and whose live
// microbatches (spec::in_flight_closed_form, never growing with the rank) are at most its own.
struct SearchRank {
  RankShare share;  // without parameters (search_memory prices them)
  ChunkCandidates chunks;
  int alike = 1;
  // An earlier inner rank of the same single kind of layers holds at least as many layers, and
  // chunks as heavy: this one's memory cannot be the peak.
  bool memory_bounded = false;
};

// The ranks of a configuration's pipeline shape, in rank order: rank 0, the inner ranks grouped
// (each group by its lowest rank), rank pp - 1. They depend on the layers, the MoE rule, pp and v
// alone, and the planner evaluates many configurations of each shape: computed once per shape and
// thread, so `ranks` is valid until the thread's next search_ranks call.
struct SearchRanks {
  std::span<const SearchRank> ranks;
};

SearchRanks search_ranks(const spec::ModelSpec& model, const spec::ParallelConfig& parallel);

// What the search needs to price a rank's parameters and memory, once per configuration.
struct SearchMemoryTerms {
  MemoryTerms terms;
  spec::ParamCounts counts;
  double expert_params_per_moe_layer = 0;  // routed-expert parameters of one MoE layer on one rank
};
SearchMemoryTerms search_memory_terms(const spec::ModelSpec& model, const spec::ParallelConfig& parallel, int seq_len,
                                      int shard_group, const CostModelOptions& options);

// The peak memory over `ranks` (the first rank with the highest total, as evaluate() picks it) into
// `out`.
void search_memory(const spec::ModelSpec& model, const spec::ParallelConfig& parallel, const SearchMemoryTerms& memory,
                   const CostModelOptions& options, const SearchRanks& ranks, SearchEstimate& out);

// The critical rank of the closed-form pipeline over `ranks`' work per microbatch
// (pipeline_replay.h): the first of the busiest, with its parameters.
CriticalRank search_critical_rank(const spec::ModelSpec& model, const SearchMemoryTerms& memory,
                                  const SearchRanks& ranks, const MicrobatchCharges& charges,
                                  const LayoutCosts& layout_costs, const spec::ParallelConfig& parallel,
                                  const PricingContext& context);

}  // namespace cpt::cost
