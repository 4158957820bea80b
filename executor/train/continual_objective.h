#pragma once
// The continual pre-training recipe around the plain objective (docs/continual.md): EWC's Fisher and
// anchor around the starting weights, KL distillation against a frozen teacher sharded like the
// student, the base run's optimizer state kept, and the learning rate re-warmed as a fraction of
// the base run's peak.
//
// Order matters (train() calls them so): the EWC estimate runs before the step optimizer exists (its
// own backward passes must not touch the optimizer's gradient buffers); the teacher and the
// penalties attach after it (under ZeRO-3 the teacher is sharded over the optimizer's shard group).
#include <filesystem>
#include <memory>
#include <optional>

#include "executor/dist/process_groups.h"
#include "executor/parallel/full_state.h"
#include "executor/parallel/fully_sharded.h"
#include "executor/train/lr_schedule.h"
#include "executor/train/optimizer_choice.h"
#include "executor/train/rank_model.h"
#include "executor/train/regularizers.h"
#include "executor/train/run_inputs.h"
#include "executor/train/train_step.h"

namespace cpt::exec {

// What the step sees of the recipe, and the objects it points into; built in place, never moved.
struct ContinualObjective {
  std::optional<Ewc> ewc;          // whole (tensor-parallel) Fisher and anchor; dropped once ZeRO-3's shards hold them
  bool ewc_on_shards = false;      // ZeRO-3: the penalty lives in the optimizer's shards
  std::int64_t teacher_bytes = 0;  // the teacher's weights on this rank, without ZeRO-3
  std::unique_ptr<FullyShardedModel> teacher_shards;  // ZeRO-3: the teacher's shards (outlive it)
  std::optional<Teacher> teacher;
  Objective objective;  // for a model without a pipeline (the pipeline holds its own)
  ContinualObjective() = default;
  ContinualObjective(const ContinualObjective&) = delete;
  ContinualObjective& operator=(const ContinualObjective&) = delete;
};

// COLLECTIVE when TRAIN.json asks for EWC. The Fisher is estimated by replica 0's ranks together
// (a tensor-parallel, context-parallel or pipelined model's loss is collective), gathered whole to
// rank 0 and written to OUT/ewc_fisher.safetensors, unless it exists already (a resumed run); every
// rank then loads its shards of its chunks.
void estimate_or_load_ewc(ContinualObjective& continual, const spec::Plan& plan, const TrainConfig& config,
                          const RunInputs& inputs, RankModel& rank, const ProcessGroups& groups,
                          const FullStateGroups& full_state_groups, const std::filesystem::path& out_dir,
                          const torch::Device& device);

// The teacher (TRAIN.json's distill.teacher, else init_from) with the student's splits and stages,
// and the EWC penalty where the step applies it (the pipeline, ZeRO-3's shards, or the objective).
void attach_teacher_and_penalties(ContinualObjective& continual, const spec::Plan& plan, const TrainConfig& config,
                                  RankModel& rank, const OptimizerChoice& choice, const TensorParallel& tp,
                                  const ContextParallel& cp, const torch::Device& device);

// The storage the recipe holds on this rank (step_optimizer.h's RecipeBytes).
[[nodiscard]] RecipeBytes recipe_bytes(const ContinualObjective& continual, const OptimizerChoice& choice);

// init_optimizer "keep": the AdamW moments and step counts of the init_from checkpoint, cut into
// this rank's shards. ConfigError for a Hugging Face directory or a checkpoint without them.
void keep_base_optimizer_state(const TrainConfig& config, StepOptimizer& optimizer, const spec::ModelSpec& model,
                               const ParameterSplits& splits, const torch::Device& device);

// TRAIN.json's schedule over `total_steps`, with warmup and peak given as fractions resolved (the
// peak as a fraction of the peak the init_from checkpoint records).
LrSchedule run_lr_schedule(const TrainConfig& config, std::int64_t total_steps);

}  // namespace cpt::exec
