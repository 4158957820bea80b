#pragma once
// One optimizer step on one process: forward and backward of every microbatch, each loss summed
// over its tokens and scaled by 1 / (loss tokens of the whole step), so the gradient is that of the
// per-token mean over the step however tokens fall into microbatches; then the global gradient L2
// norm, clipping, a finite check and AdamW. Shared by the trainer and bench/.
#include <vector>

#include "executor/data/batch.h"
#include "executor/model/llama_model.h"
#include "executor/dist/communicator.h"
#include "executor/parallel/data_parallel.h"
#include "executor/train/adamw.h"

namespace cpt::exec {

struct StepResult {
  double loss = 0;              // per-token mean over the step
  double grad_norm = 0;         // before clipping
  bool applied = false;         // false: loss or norm not finite, no update
  std::int64_t loss_tokens = 0;
};

// Data parallelism: `dp` is the data-parallel group and `dp_grads` its gradient reduction; the loss
// tokens and the loss are summed over the group, so every replica computes the same step.
struct DataParallel {
  Communicator* dp = nullptr;
  DataParallelGrads* grads = nullptr;
};

// `micro`: CPU or device batches (moved to `device` here), this rank's share of the step.
// grad_clip <= 0 disables clipping.
StepResult train_step(LlamaModelImpl& model, AdamW& optimizer, const std::vector<Batch>& micro, double lr,
                      double grad_clip, const torch::Device& device, const DataParallel& dp = {});

}  // namespace cpt::exec
