#pragma once
// The work a continual run does besides its training steps, timed at one data-parallel replica's
// training speed (TRAIN.json's `eval`, `eval_interval_steps`, `eval_at_start` and `ewc`;
// executor/train/run_evaluation.h and regularizers.h do it on one replica, the others waiting or
// repeating it):
//   evaluations     every `eval_interval_steps` before the last step, at the end, and at step 0 with
//                   `eval_at_start`; each evaluates every set's `sequences` × seq_len tokens forward
//                   only: 2N FLOPs a token against a training token's 6N (Kaplan et al. 2020), 8N
//                   with a KL teacher's forward;
//   Fisher estimate EWC's `sequences` × seq_len tokens forward and backward (6N), once before
//                   training.
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

// `replica_tokens_per_s`: the plan's training throughput of one data-parallel replica (all GPUs'
// over dp). REQUIRES: replica_tokens_per_s > 0.
RecipeOverheads recipe_overheads(const spec::TrainConfig& recipe, std::int64_t total_steps, int seq_len,
                                 double replica_tokens_per_s);

}  // namespace cpt::planner
