#pragma once
// search(): every candidate of the SearchSpace, pruned with reasons, evaluated by the cost model in
// search mode (topology built once, closed-form pipeline), ranked by the objective; the top K are
// then re-evaluated exactly (schedule replay) and re-ranked. Deterministic: candidates are visited
// in index order and ties break on (score, peak memory, index), so the same input gives the same
// output byte for byte.

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "costmodel/cost_options.h"
#include "costmodel/step_estimator.h"
#include "planner/pruning.h"
#include "planner/search_space.h"
#include "planner/time_to_finish.h"
#include "spec/hardware_spec.h"
#include "spec/model_spec.h"
#include "spec/parallel_config.h"
#include "spec/runtime.h"

namespace cpt::planner {

// Serialized as "throughput", "time", "cost", "headroom", "time-to-train". DO NOT CHANGE the strings.
enum class Objective {
  kThroughput,  // most tokens/s per GPU
  kTime,        // least time to train `tokens` (same ranking as throughput at a fixed GPU count)
  kCost,        // least GPU-hours × price for `tokens`
  kHeadroom,    // most tokens/s per GPU among plans that leave `headroom` of the HBM free
  // least expected wall-clock time to finish `tokens`: the steps, the recipe's evaluations,
  // checkpoints and the failures of the plan's GPUs (time_to_finish.h). Serialized "time-to-train".
  kTimeToTrain,
};
std::string to_string(Objective o);

struct SearchOptions {
  int global_batch = 0;     // sequences per step (REQUIRES >= 1)
  int threads = 0;          // worker threads; 0 = the machine's hardware threads (the result does not depend on it)
  int seq_len = 0;          // REQUIRES >= 1
  std::int64_t tokens = 0;  // token budget for time and cost; 0 = report per step only
  Objective objective = Objective::kThroughput;
  double price_per_gpu_hour = 0;  // USD, for kCost
  double headroom = 0.10;         // fraction of HBM to keep free, for kHeadroom
  // Fraction of HBM every plan leaves free whatever the objective (the user's margin for what the
  // memory model does not see: fragmentation, other processes, a longer sequence later).
  double memory_margin = 0;
  int top_k = 10;
  Fixed fixed;
  // Only layouts cpt's own executor runs (RejectReason::kNotRunByExecutor), and a LLaMA-family
  // model (ConfigError otherwise): what `cpt run` plans.
  bool executor_only = false;
  // Only layouts this framework's export runs as planned (RejectReason::kNotRunByTarget,
  // export_gaps.h); unset: any.
  std::optional<spec::Runtime> target;
  // The software that runs the plan (cost::for_runtime applied to `cost`); unset: `cost` as given
  // (Megatron-LM's by default).
  std::optional<spec::Runtime> runtime;
  // Objective::kTimeToTrain (and the reports' time to finish): failures and checkpoints, and the
  // job's TRAIN.json (evaluations, the Fisher estimate, its checkpoint interval); no TRAIN.json:
  // none of its work, the best checkpoint interval.
  FailureOptions failures;
  std::optional<spec::TrainConfig> recipe;
  cost::CostModelOptions cost;  // exact_pipeline is managed by the search
};

// What finishing `o.tokens` needs besides a plan (time_to_finish.h), as the search ranks it: the
// budget, batch, the checkpoint of `model` priced with pricing_options(o), the failures, TRAIN.json.
// The result points into `o.recipe`: REQUIRES `o` outlives it.
FinishInputs finish_inputs(const spec::ModelSpec& model, const SearchOptions& o);

// The cost-model options the search prices with: `o.cost`, for `o.runtime` when set, as cpt's
// executor runs it with `executor_only` (the device's calibrated overheads are applied on top, per
// cluster). plan.json
// records them (spec::Prediction::priced_as) and `--refine` simulates with them.
cost::CostModelOptions pricing_options(const SearchOptions& o);

struct Candidate {
  std::uint64_t index = 0;      // position in the search space (the last tie-break)
  spec::ParallelConfig config;  // config.world_size() is its GPU count
  cost::Estimate estimate;
  double score = 0;  // higher is better for every objective
};

// A feasible candidate as the search ranks it: search-mode numbers (cost::SearchEstimate, the
// same as a full evaluation with the closed-form pipeline), without the per-stage detail.
struct RankedCandidate {
  std::uint64_t index = 0;
  spec::ParallelConfig config;
  cost::SearchEstimate estimate;
  double score = 0;
};

struct PlannerResult {
  std::uint64_t enumerated = 0;                             // candidates in the space
  std::uint64_t evaluated = 0;                              // passed pruning and went through the cost model
  std::uint64_t feasible = 0;                               // evaluated and fit in memory
  double seconds = 0;                                       // wall time of the search
  int threads = 1;                                          // worker threads used
  std::array<std::uint64_t, kNumRejectReasons> rejected{};  // by RejectReason
  std::vector<Candidate> top;                               // best first, exact estimates
  // The Pareto front of tokens/s of the whole job (up), peak memory per GPU (down) and GPUs (down):
  // no other feasible candidate is at least as good in all three and better in one. At one GPU
  // count, throughput per GPU vs memory. Identical points appear once. Ordered by GPUs, then
  // memory; decided on search-mode numbers, each carried as a full closed-form estimate.
  std::vector<Candidate> pareto;
  std::vector<RankedCandidate> all_feasible;  // every feasible candidate, best first
  // search_sizes only: (GPUs, the best plan at that size, exact) per size, in the order given.
  std::vector<std::pair<int, std::optional<Candidate>>> best_per_size;
};

// ConfigError when the options are invalid (batch, sequence length, cost objective without a price).
PlannerResult search(const spec::ModelSpec& model, const spec::ClusterSpec& cluster, const SearchOptions& options);

// ConfigError naming the flag when `options` cannot be searched for `model` (the global batch, the
// sequence length against the model's, the memory margin, the objective's budget). search() calls
// it; `cpt run --model` calls it before it calibrates this machine.
void check_options(const spec::ModelSpec& model, const SearchOptions& options);

// search() at each GPU count of `clusters` (the same hardware at several sizes), merged: counts
// summed, the top K over all sizes by the objective (tokens/s per GPU, time or cost of the token
// budget), all feasible candidates, and the three-way Pareto front across sizes.
// REQUIRES: clusters non-empty, of distinct GPU counts.
PlannerResult search_sizes(const spec::ModelSpec& model, const std::vector<spec::ClusterSpec>& clusters,
                           const SearchOptions& options);

}  // namespace cpt::planner
