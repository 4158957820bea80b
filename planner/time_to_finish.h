#pragma once
// The wall-clock time, GPU-hours and cost to finish a run's token budget with a plan: its steps at
// the plan's step time, the recipe's evaluations and Fisher estimate (recipe_overheads.h), the
// checkpoint writes, and the expected loss to failures: the work since the last checkpoint redone
// and a restart after each failure, under the first-order exponential model of
// costmodel/sim/failures.h (Daly 2006) with the job's MTBF = one GPU's MTBF / GPUs.
//   checkpoint interval  TRAIN.json's `checkpoint.interval_steps` × step time when it states one
//                        (with a TRAIN.json that checkpoints only at the end, the whole run); else,
//                        and always as advice, the interval that minimises the expected time.
//   checkpoint           the model's weights and optimizer state (cost::model_state_bytes
//                        unsharded: 14 bytes a parameter in bf16 with fp32 Adam, 12 in fp32),
//                        written at the storage's aggregate write bandwidth.
// Not counted: the time to start the job, to load init_from, and to prepare the data.
#include <cstdint>

#include "costmodel/cost_options.h"
#include "planner/recipe_overheads.h"
#include "spec/model_spec.h"
#include "spec/train_config.h"

namespace cpt::planner {

// Llama 3's pre-training saw 419 unexpected interruptions in 54 days on 16,384 H100s (Dubey et al.
// 2024, "The Llama 3 Herd of Models", §3.3.4): one per 16,384 · 54 · 24 / 419 ≈ 50,700 GPU-hours.
inline constexpr double kDefaultMtbfGpuHours = 50'000;

struct FailureOptions {
  double mtbf_gpu_hours = kDefaultMtbfGpuHours;  // one GPU's mean time between failures; 0: none
  double checkpoint_write_GBps = 50;             // aggregate storage write bandwidth, GB/s (1e9 B/s)
  double restart_minutes = 10;                   // detect a failure, reschedule, reload the checkpoint
};

// What finishing needs of the run besides the plan's step time and shape.
struct FinishInputs {
  std::int64_t tokens = 0;  // the budget; REQUIRES >= 1
  int global_batch = 0;     // sequences per step
  int seq_len = 0;
  double checkpoint_bytes = 0;  // checkpoint_bytes() below
  FailureOptions failures;
  const spec::TrainConfig* recipe = nullptr;  // TRAIN.json; nullptr: none (no evaluations, the best interval)
};

struct TimeToFinish {
  std::int64_t steps = 0;
  double training_s = 0;          // the steps, failure-free
  RecipeOverheads recipe;         // evaluations and the Fisher estimate, failure-free
  double checkpoint_write_s = 0;  // one checkpoint
  double checkpoints_s = 0;       // every interval's write
  double failure_loss_s = 0;      // expected redone work and restarts
  double interval_s = 0;          // compute between checkpoints, as run
  bool interval_from_recipe = false;
  double best_interval_s = 0;  // the one that minimises the expected time (no failures: the run)
  double best_wall_s = 0;      // the expected time at it
  double wall_s = 0;           // expected time to finish, as run (+inf when failures outpace it)
  double gpu_hours = 0;        // wall_s × GPUs
  [[nodiscard]] double failure_free_s() const { return training_s + recipe.total_s(); }
};

// Bytes of one checkpoint of `model` trained as `options` states (weights and optimizer state).
double checkpoint_bytes(const spec::ModelSpec& model, const cost::CostModelOptions& options);

// `step_s`: the plan's step time; `gpus` its GPUs, `dp` its data-parallel degree (one replica
// evaluates). REQUIRES: step_s > 0, gpus >= dp >= 1, inputs.tokens, global_batch, seq_len >= 1.
TimeToFinish time_to_finish(double step_s, int gpus, int dp, const FinishInputs& inputs);

}  // namespace cpt::planner
