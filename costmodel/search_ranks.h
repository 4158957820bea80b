#pragma once
// The planner's evaluation of a configuration in O(1) of the pipeline degree (evaluate_search):
// the few pipeline ranks that can be worst, their peak memory, and the critical rank of the
// closed-form pipeline over them.

#include "costmodel/memory_model.h"
#include "costmodel/step_end.h"
#include "costmodel/step_estimator.h"
#include "costmodel/topology.h"
#include "costmodel/work_pricing.h"

namespace cpt::cost {

// The pipeline ranks that can be worst (evaluate_search). Under the balanced partition the extra
// layers go to the inner stages first, so among ranks 1..pp-2 (no embedding, no head) rank 1
// holds the most layers and the heaviest chunk, and the closed-form live microbatches never grow
// with the rank: rank 1 bounds every inner rank in each memory component and in work. Only ranks
// 0, 1 and pp - 1 need computing; the inner ranks 2..pp-2 enter the bubble as a sum of their layers.
// A mixture of experts with dense layers among its MoE layers (a dense prefix, or MoE every few
// layers) may put more MoE layers on another inner rank: rank 1 then stands for the bound, with the
// most MoE layers (and the heaviest chunk) any inner rank holds.
struct SearchRanks {
  RankShare ranks[3];
  double heaviest_chunk[3] = {};  // each one's largest model chunk, in layers
  int count = 0;
  RankShare inner;            // the layers of ranks 2..pp-2
  bool mixed_layers = false;  // dense and MoE layers both
};

SearchRanks search_ranks(const spec::ModelSpec& model, const spec::ParallelConfig& parallel);

// The peak memory over `ranks` (the first rank with the highest total, as evaluate() picks it) into
// `out`; sets each rank's parameters.
void search_memory(const spec::ModelSpec& model, const spec::ParallelConfig& parallel, int seq_len, int shard_group,
                   const CostModelOptions& options, SearchRanks& ranks, SearchEstimate& out);

// The critical rank of the closed-form pipeline over `ranks`' work per microbatch
// (pipeline_replay.h): the busiest.
CriticalRank search_critical_rank(const SearchRanks& ranks, const MicrobatchCharges& charges,
                                  const LayoutCosts& layout_costs, const spec::ParallelConfig& parallel,
                                  const PricingContext& context);

}  // namespace cpt::cost
