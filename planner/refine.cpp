#include "planner/refine.h"

#include <algorithm>

#include "costmodel/sim/plan_simulation.h"
#include "spec/plan.h"

namespace cpt::planner {

std::vector<Refined> refine(const PlannerResult& result, const spec::ModelSpec& model,
                            const spec::ClusterSpec& cluster, const SearchOptions& options, int k) {
  std::vector<Refined> out;
  const auto n = std::min(result.top.size(), static_cast<std::size_t>(std::max(0, k)));
  for (std::size_t i = 0; i < n; ++i) {
    const auto& c = result.top[i];
    const auto plan = spec::make_plan(model, cluster, spec::Workload{options.seq_len, options.tokens}, c.config);
    const auto sim = cost::sim::simulate_plan(plan, pricing_options(options));
    out.push_back(Refined{c, sim.result.step_time.value()});
  }
  // Same global batch and GPUs for every candidate: higher throughput = shorter step.
  std::stable_sort(out.begin(), out.end(),
                   [](const Refined& a, const Refined& b) { return a.simulated_step_s < b.simulated_step_s; });
  return out;
}

}  // namespace cpt::planner
