#pragma once
// refine(): re-ranks the planner's top K with the discrete-event simulator (costmodel/sim/), which
// replays the real schedule with separate compute, p2p and collective streams, instead of the
// analytical step time. Candidates keep their estimates; their score and order change.

#include <vector>

#include "planner/planner.h"

namespace cpt::planner {

struct Refined {
  Candidate candidate;
  double simulated_step_s = 0;
};

// The first min(k, top.size()) candidates of `result.top`, simulated and sorted by simulated
// throughput (ties: the planner's order).
std::vector<Refined> refine(const PlannerResult& result, const spec::ModelSpec& model,
                            const spec::ClusterSpec& cluster, const SearchOptions& options, int k);

}  // namespace cpt::planner
