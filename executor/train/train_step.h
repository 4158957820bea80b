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
#include "executor/train/regularizers.h"
#include "executor/train/step_optimizer.h"
#include "spec/pipeline_schedule.h"

namespace cpt::exec {

class PipelineExecutor;

// Continual pre-training terms of the objective (regularizers.h); both off by default.
struct Objective {
  Teacher* teacher = nullptr;  // KL distillation against this frozen model
  double kl_lambda = 0;
  const Ewc* ewc = nullptr;    // elastic weight consolidation around the base weights
  double ewc_lambda = 0;
};

struct StepResult {
  double loss = 0;              // cross-entropy, per-token mean over the step (over every data-parallel rank)
  double kl = 0;                // KL(student ‖ teacher), per-token mean (0 without a teacher)
  double ewc_penalty = 0;       // λ/2·Σ F (θ − θ*)² before the update (0 without EWC)
  double grad_norm = 0;         // before clipping
  bool applied = false;         // false: loss or norm not finite, no update
  std::int64_t loss_tokens = 0; // over every data-parallel rank
  ModelStateBytes state;        // gradient and optimizer storage once the gradients were in
};

// `micro`: CPU or device batches (moved to `device` here), this rank's share of the step. `dp`:
// the data-parallel group (its loss tokens and losses are summed over it; a group of one for a
// single process); `optimizer` reduces the gradients and updates. grad_clip <= 0 disables
// clipping (torch's rule: scale by max_norm / (norm + 1e-6) when that is below 1).
// The objective is CE + kl_lambda·KL per loss token, plus the EWC penalty once per step.
StepResult train_step(LlamaModelImpl& model, StepOptimizer& optimizer, const std::vector<Batch>& micro, double lr,
                      double grad_clip, const torch::Device& device, Communicator& dp, const Objective& objective = {});

// The same step through a pipeline (pipeline_executor.h): the schedule's forwards and backwards
// instead of the microbatch loop; the loss is reduced over the pipeline group, then the rest as
// above. KL distillation and the EWC penalty run inside the pipeline (PipelineExecutor::set_teacher,
// set_ewc); `ewc` (with its λ) only reports the penalty before the update.
StepResult train_step_pipelined(PipelineExecutor& pipeline, const spec::PipelineSchedule& schedule,
                                StepOptimizer& optimizer, const std::vector<Batch>& micro, double lr, double grad_clip,
                                const torch::Device& device, Communicator& dp, const Ewc* ewc = nullptr,
                                double ewc_lambda = 0);

}  // namespace cpt::exec
