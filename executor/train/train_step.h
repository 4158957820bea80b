#pragma once
// One optimizer step: forward and backward of every microbatch of this rank, each loss summed over
// its tokens and scaled by 1 / (loss tokens of the whole step over every data-parallel rank), so
// the gradient is that of the per-token mean over the step however tokens fall into microbatches
// and ranks; then the global gradient L2 norm, clipping, a finite check and the update (all in the
// StepOptimizer, which knows the data layout). Shared by the trainer and bench/.
#include <vector>

#include "executor/data/batch.h"
#include "executor/model/llama_model.h"
#include "executor/dist/communicator.h"
#include "executor/train/step_optimizer.h"

namespace cpt::exec {

struct StepResult {
  double loss = 0;              // per-token mean over the step (over every data-parallel rank)
  double grad_norm = 0;         // before clipping
  bool applied = false;         // false: loss or norm not finite, no update
  std::int64_t loss_tokens = 0; // over every data-parallel rank
};

// `micro`: CPU or device batches (moved to `device` here), this rank's share of the step. `dp`:
// the data-parallel group (its loss tokens and losses are summed over it; a group of one for a
// single process); `optimizer` reduces the gradients and updates. grad_clip <= 0 disables
// clipping (torch's rule: scale by max_norm / (norm + 1e-6) when that is below 1).
StepResult train_step(LlamaModelImpl& model, StepOptimizer& optimizer, const std::vector<Batch>& micro, double lr,
                      double grad_clip, const torch::Device& device, Communicator& dp);

}  // namespace cpt::exec
