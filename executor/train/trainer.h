#pragma once
// One rank's training run: a plan (model, layout, batch, sequence length) plus TRAIN.json ->
// OUT/metrics.jsonl, OUT/eval.jsonl, OUT/checkpoints/step_*/ and OUT/measured.json.
//
// Per step: grad_accum microbatches, each loss summed over its tokens and divided by the loss
// tokens of the whole step (so the step's loss is the per-token mean however the tokens fall into
// microbatches); gradient L2 norm, clipped; a step whose loss or gradient norm is not finite is
// skipped (no update) and counted; AdamW at lr(step).
#include <filesystem>
#include <optional>
#include <string>

#include "executor/train/train_config.h"
#include "spec/plan.h"

namespace cpt::exec {

struct TrainOptions {
  std::filesystem::path out_dir;
  bool resume = false;                       // continue from the newest valid checkpoint in OUT/checkpoints
  std::optional<std::int64_t> steps;         // overrides TRAIN.json's steps/tokens
  std::optional<std::int64_t> stop_at;       // stop (with a checkpoint) after this step; the schedule still
                                             // spans all steps (for time-limited jobs that resume)
  std::optional<std::string> device;         // overrides TRAIN.json's device
  std::optional<std::int64_t> profile_step;  // profile this step on every rank into OUT/profile/
                                             // (measure/step_profiler.h)
  bool progress = true;                      // progress bar when stdout is a terminal
};

struct TrainSummary {
  std::int64_t first_step = 0;     // 0, or the resumed step
  std::int64_t last_step = 0;      // steps completed in total
  std::int64_t skipped_steps = 0;  // non-finite loss or gradient
  double final_loss = 0;
  double tokens_per_s = 0;  // mean over the steps of this run, after the first
  std::filesystem::path checkpoint;
  bool stopped = false;  // asked to stop (stop_request.h) before the last step
};

// ConfigError when the executor does not run `plan`: a model outside the LLaMA family, a layout
// spec::find_executor_gap names, a sequence length beyond the model's. Every rank checks it; a
// launcher once, before they start. `origin`: the plan's file, which the one-line error names with
// the key at fault.
void check_plan_runs(const spec::Plan& plan, const std::string& origin = "plan");

// ConfigError for a layout the executor does not run (spec::find_executor_gap),
// for inputs that disagree (vocabulary, model vs checkpoint), and for bad files; RuntimeError when
// writing fails. Everything written before a failure stays valid (checkpoints are atomic).
TrainSummary train(const spec::Plan& plan, const TrainConfig& config, const TrainOptions& options);

}  // namespace cpt::exec
