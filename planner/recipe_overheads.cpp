#include "planner/recipe_overheads.h"

#include "core/check.h"

namespace cpt::planner {

// Forward-only tokens cost a third of a training token (2N of 6N FLOPs).
constexpr double kForwardShareOfTraining = 1.0 / 3.0;

RecipeOverheads recipe_overheads(const spec::TrainConfig& recipe, std::int64_t total_steps, int seq_len,
                                 double tokens_per_s) {
  CPT_CHECK(tokens_per_s > 0, "recipe_overheads: tokens_per_s must be positive");
  RecipeOverheads out;
  if (!recipe.eval.empty()) {
    const std::int64_t interval = recipe.eval_interval_steps;
    const std::int64_t periodic = interval > 0 && total_steps > 0 ? (total_steps - 1) / interval : 0;
    out.evaluations = periodic + 1 + (recipe.eval_at_start ? 1 : 0);
    double tokens_per_evaluation = 0;
    for (const auto& set : recipe.eval) tokens_per_evaluation += static_cast<double>(set.eval_sequences) * seq_len;
    out.evaluation_s =
        static_cast<double>(out.evaluations) * tokens_per_evaluation * kForwardShareOfTraining / tokens_per_s;
  }
  if (recipe.ewc) out.fisher_s = static_cast<double>(recipe.ewc->sequences) * seq_len / tokens_per_s;
  return out;
}

}  // namespace cpt::planner
