#pragma once
// search(): every candidate of the SearchSpace, pruned with reasons, evaluated by the cost model in
// search mode (topology built once, closed-form pipeline), ranked by the objective; the top K are
// then re-evaluated exactly (schedule replay) and re-ranked. Deterministic: candidates are visited
// in index order and ties break on (score, peak memory, index), so the same input gives the same
// output byte for byte.

#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "costmodel/cost_options.h"
#include "costmodel/step_estimator.h"
#include "planner/pruning.h"
#include "planner/search_space.h"
#include "spec/hardware_spec.h"
#include "spec/model_spec.h"
#include "spec/parallel_config.h"

namespace cpt::planner {

// Serialized as "throughput", "time", "cost", "headroom". DO NOT CHANGE the strings.
enum class Objective {
  kThroughput,  // most tokens/s per GPU
  kTime,        // least time to train `tokens` (same ranking as throughput at a fixed GPU count)
  kCost,        // least GPU-hours × price for `tokens`
  kHeadroom,    // most tokens/s per GPU among plans that leave `headroom` of the HBM free
};
std::string to_string(Objective o);

struct SearchOptions {
  int global_batch = 0;   // sequences per step (REQUIRES >= 1)
  int seq_len = 0;        // REQUIRES >= 1
  std::int64_t tokens = 0;  // token budget for time and cost; 0 = report per step only
  Objective objective = Objective::kThroughput;
  double price_per_gpu_hour = 0;  // USD, for kCost
  double headroom = 0.10;         // fraction of HBM to keep free, for kHeadroom
  int top_k = 10;
  Fixed fixed;
  cost::CostModelOptions cost;  // exact_pipeline is managed by the search
};

struct Candidate {
  std::uint64_t index = 0;  // position in the search space (the last tie-break)
  spec::ParallelConfig config;
  cost::Estimate estimate;
  double score = 0;  // higher is better for every objective
};

struct PlannerResult {
  std::uint64_t enumerated = 0;  // candidates in the space
  std::uint64_t evaluated = 0;   // passed pruning and went through the cost model
  std::uint64_t feasible = 0;    // evaluated and fit in memory
  double seconds = 0;            // wall time of the search
  std::array<std::uint64_t, kNumRejectReasons> rejected{};  // by RejectReason
  std::vector<Candidate> top;     // best first, exact estimates
  std::vector<Candidate> pareto;  // tokens/s per GPU vs peak memory: no other is better in both
  std::vector<Candidate> all_feasible;  // every feasible candidate, search-mode estimates, best first
};

// ConfigError when the options are invalid (batch, sequence length, cost objective without a price).
PlannerResult search(const spec::ModelSpec& model, const spec::ClusterSpec& cluster, const SearchOptions& options);

}  // namespace cpt::planner
