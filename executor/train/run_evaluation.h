#pragma once
// Evaluation during a run: the mean loss of each evaluation set's first sequences, in order, in
// microbatches of the plan's size (one smaller for the remainder), so that every layout evaluates
// the same tokens. Data-parallel replica 0 evaluates (its tensor-, context- and pipeline-parallel
// ranks together: attention gathers over cp), or every rank under ZeRO-3 (its gathers span dp) and
// under expert and expert-tensor parallelism (their all-to-alls span dp); rank 0 writes the rows
// (run_log.h).
#include <cstdint>

#include "executor/data/data_loader.h"
#include "executor/dist/process_groups.h"
#include "executor/parallel/context_parallel.h"
#include "executor/train/rank_model.h"
#include "executor/train/run_inputs.h"
#include "executor/train/run_log.h"

namespace cpt::exec {

class RunEvaluator {
 public:
  // The referenced objects must outlive the evaluator. `evaluates`: this rank takes part.
  RunEvaluator(const RunInputs& inputs, const LoaderOptions& loader, const torch::Device& device,
               const ContextParallel& cp, RankModel& rank, bool evaluates);
  [[nodiscard]] bool has_sets() const { return !inputs_.eval.empty(); }
  // COLLECTIVE over the evaluating ranks: every set at `step`, rows to `log`.
  void evaluate(std::int64_t step, RunLog& log);

 private:
  double loss_sum(const Batch& whole);
  double mean_loss(const DataSource& source, std::int64_t sequences, std::int64_t* tokens);

  const RunInputs& inputs_;
  LoaderOptions loader_;
  torch::Device device_;
  ContextParallel cp_;
  RankModel& rank_;
  bool evaluates_;
};

}  // namespace cpt::exec
