#pragma once
// The step inventory's entries for a mixture of experts' own communication (step_inventory.h's
// microbatch_work calls them): expert parallelism's dispatch and combine (the all-to-all or the
// flex dispatcher), expert-tp's gathers, and cpt's executor's routing gathers on sequence shards
// (sequence or context parallelism).
#include "costmodel/cost_options.h"
#include "costmodel/step_inventory.h"
#include "spec/model_spec.h"
#include "spec/parallel_config.h"

namespace cpt::cost {

// Per MoE layer and pass, `tokens` per rank (before tp's sequence split), each element
// `element_bytes`; nothing for a dense model or ep = etp = 1.
void add_expert_parallel(StepInventory& inv, const spec::ModelSpec& model, const spec::ParallelConfig& p, double tokens,
                         double element_bytes, const CostModelOptions& o);
// cpt's executor only (eager dispatch), under tp with sequence parallelism or cp > 1.
void add_sequence_shard_routing(StepInventory& inv, const spec::ModelSpec& model, const spec::ParallelConfig& p,
                                const CostModelOptions& o);

}  // namespace cpt::cost
