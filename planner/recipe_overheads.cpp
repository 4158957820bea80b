#include "planner/recipe_overheads.h"

#include "core/check.h"

namespace cpt::planner {

// FLOPs per token in units of N (parameters): forward 2, forward and backward 6 (Kaplan et al.).
constexpr double kForwardFlops = 2, kTrainingFlops = 6;

RecipeOverheads recipe_overheads(const spec::TrainConfig& recipe, std::int64_t total_steps, int seq_len,
                                 double replica_tokens_per_s) {
  CPT_CHECK(replica_tokens_per_s > 0, "recipe_overheads: replica_tokens_per_s must be positive");
  // A training token's work at the plan's speed: the student's, and the teacher's forward with KL.
  const double step_flops = kTrainingFlops + (recipe.distill ? kForwardFlops : 0);
  const double seconds_per_training_flop = 1 / (replica_tokens_per_s * step_flops);
  RecipeOverheads out;
  if (!recipe.eval.empty()) {
    const std::int64_t interval = recipe.eval_interval_steps;
    const std::int64_t periodic = interval > 0 && total_steps > 0 ? (total_steps - 1) / interval : 0;
    out.evaluations = periodic + 1 + (recipe.eval_at_start ? 1 : 0);
    double tokens_per_evaluation = 0;
    for (const auto& set : recipe.eval) tokens_per_evaluation += static_cast<double>(set.eval_sequences) * seq_len;
    out.evaluation_s =
        static_cast<double>(out.evaluations) * tokens_per_evaluation * kForwardFlops * seconds_per_training_flop;
  }
  if (recipe.ewc) {
    out.fisher_s = static_cast<double>(recipe.ewc->sequences) * seq_len * kTrainingFlops * seconds_per_training_flop;
  }
  return out;
}

}  // namespace cpt::planner
