#include "planner/time_to_finish.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "core/check.h"
#include "costmodel/memory_model.h"
#include "costmodel/sim/failures.h"
#include "spec/token_budget.h"

namespace cpt::planner {

double checkpoint_bytes(const spec::ModelSpec& model, const cost::CostModelOptions& options) {
  const auto state = cost::model_state_bytes(static_cast<double>(model.num_params()), 0, 1, options);
  return static_cast<double>((state.weights + state.optimizer).value());
}

namespace {

// The compute between checkpoints as the run takes them: TRAIN.json's interval, the whole run when
// it checkpoints only at the end; nullopt without a TRAIN.json.
std::optional<double> recipe_interval_s(const FinishInputs& in, double step_s, double solve_s) {
  if (in.recipe == nullptr) return std::nullopt;
  const std::int64_t every = in.recipe->checkpoint.interval_steps;
  return every > 0 ? std::min(solve_s, static_cast<double>(every) * step_s) : solve_s;
}

}  // namespace

TimeToFinish time_to_finish(double step_s, int gpus, int dp, const FinishInputs& in) {
  CPT_CHECK(step_s > 0 && dp >= 1 && gpus >= dp && in.tokens >= 1 && in.global_batch >= 1 && in.seq_len >= 1,
            "time_to_finish: step ", step_s, " s, ", gpus, " GPUs, dp ", dp, ", ", in.tokens, " tokens");
  TimeToFinish out;
  out.steps = spec::steps_for_tokens(in.tokens, std::int64_t{in.global_batch} * in.seq_len);
  out.training_s = static_cast<double>(out.steps) * step_s;
  if (in.recipe != nullptr) {
    const double replica_tokens_per_s = static_cast<double>(in.global_batch) * in.seq_len / step_s / dp;
    out.recipe = recipe_overheads(*in.recipe, out.steps, in.seq_len, replica_tokens_per_s);
  }
  const double solve = out.failure_free_s();
  const auto& f = in.failures;
  out.checkpoint_write_s = in.checkpoint_bytes / (f.checkpoint_write_GBps * 1e9);
  const auto from_recipe = recipe_interval_s(in, step_s, solve);
  out.interval_from_recipe = from_recipe.has_value();
  if (f.mtbf_gpu_hours <= 0) {
    // No failures: the fewest checkpoints are best; the recipe's are what it pays.
    out.interval_s = from_recipe.value_or(solve);
    out.best_interval_s = solve;
    out.best_wall_s = solve + out.checkpoint_write_s;
    out.checkpoints_s = solve / out.interval_s * out.checkpoint_write_s;
    out.wall_s = solve + out.checkpoints_s;
  } else {
    const cost::sim::FailureModel model{core::Seconds(f.mtbf_gpu_hours * 3600 / gpus),
                                        core::Seconds(out.checkpoint_write_s), core::Seconds(f.restart_minutes * 60)};
    const auto best = cost::sim::optimal_checkpoint_interval(core::Seconds(solve), model);
    out.best_interval_s = std::min(solve, best.interval.value());
    out.best_wall_s =
        cost::sim::expected_wall_time(core::Seconds(solve), core::Seconds(out.best_interval_s), model).value();
    out.interval_s = from_recipe.value_or(out.best_interval_s);
    out.wall_s = cost::sim::expected_wall_time(core::Seconds(solve), core::Seconds(out.interval_s), model).value();
    out.checkpoints_s = solve / out.interval_s * out.checkpoint_write_s;
    if (!std::isfinite(out.wall_s)) out.wall_s = std::numeric_limits<double>::infinity();
    out.failure_loss_s = out.wall_s - solve - out.checkpoints_s;
  }
  out.gpu_hours = out.wall_s * gpus / 3600;
  return out;
}

}  // namespace cpt::planner
