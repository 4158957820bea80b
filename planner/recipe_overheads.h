#pragma once
// The work a continual run does besides its training steps, timed at the plan's training speed
// (TRAIN.json's `eval`, `eval_interval_steps`, `eval_at_start` and `ewc`; executor/train/
// run_evaluation.h and regularizers.h do it):
//   evaluations     every `eval_interval_steps` before the last step, at the end, and at step 0 with
//                   `eval_at_start`; each evaluates every set's `sequences` × seq_len tokens forward
//                   only: a third of a training token's work (2N of the 6N FLOPs per token,
//                   Kaplan et al. 2020), so a third of its time;
//   Fisher estimate EWC's `sequences` × seq_len tokens forward and backward, once before training,
//                   at a training token's time.
// Not counted: checkpoint writes (no storage bandwidth in the hardware profiles) and the slower
// per-sequence backward of the Fisher estimate.
#include <cstdint>

#include "spec/train_config.h"

namespace cpt::planner {

struct RecipeOverheads {
  std::int64_t evaluations = 0;  // evaluation passes over the run
  double evaluation_s = 0;       // all of them
  double fisher_s = 0;           // the one-off EWC Fisher estimate

  [[nodiscard]] double total_s() const { return evaluation_s + fisher_s; }
};

// `tokens_per_s`: the plan's training throughput over all GPUs. REQUIRES: tokens_per_s > 0.
RecipeOverheads recipe_overheads(const spec::TrainConfig& recipe, std::int64_t total_steps, int seq_len,
                                 double tokens_per_s);

}  // namespace cpt::planner
