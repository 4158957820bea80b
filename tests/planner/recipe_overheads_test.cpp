#include "planner/recipe_overheads.h"

#include <gtest/gtest.h>

#include <utility>

namespace cpt::planner {
namespace {

spec::TrainConfig recipe_with_two_eval_sets() {
  spec::TrainConfig recipe;
  for (const auto& [name, sequences] : {std::pair{"old", 64}, std::pair{"new", 192}}) {
    spec::DataSetConfig set;
    set.name = name;
    set.eval_sequences = sequences;
    recipe.eval.push_back(set);
  }
  recipe.eval_interval_steps = 100;
  recipe.eval_at_start = true;
  return recipe;
}

TEST(RecipeOverheads, EvaluationsAreCountedAsTheTrainerRunsThem) {
  // 1,000 steps, every 100: steps 100..900 (the last step's is the end's), the end, step 0: 11.
  const auto extra = recipe_overheads(recipe_with_two_eval_sets(), 1000, 4096, 1e6);
  EXPECT_EQ(extra.evaluations, 11);
  // 11 × 256 sequences × 4,096 tokens, forward only (a third of a training token), at the replica's
  // 1e6 tokens/s.
  EXPECT_DOUBLE_EQ(extra.evaluation_s, 11.0 * 256 * 4096 / 3.0 / 1e6);
  EXPECT_EQ(extra.fisher_s, 0.0);
  auto at_end_only = recipe_with_two_eval_sets();
  at_end_only.eval_interval_steps = 0;
  at_end_only.eval_at_start = false;
  EXPECT_EQ(recipe_overheads(at_end_only, 1000, 4096, 1e6).evaluations, 1);
  EXPECT_EQ(recipe_overheads(spec::TrainConfig{}, 1000, 4096, 1e6).total_s(), 0.0);
  // With a KL teacher a training token is 8N FLOPs (the teacher's forward too): an evaluated token
  // is a quarter of one.
  auto distilled = recipe_with_two_eval_sets();
  distilled.distill = spec::DistillConfig{};
  EXPECT_DOUBLE_EQ(recipe_overheads(distilled, 1000, 4096, 1e6).evaluation_s, 11.0 * 256 * 4096 / 4.0 / 1e6);
}

TEST(RecipeOverheads, TheFisherEstimateIsItsSequencesTrainedOnce) {
  spec::TrainConfig recipe;
  recipe.ewc = spec::EwcConfig{};
  recipe.ewc->sequences = 128;
  const auto extra = recipe_overheads(recipe, 1000, 8192, 2e5);
  EXPECT_DOUBLE_EQ(extra.fisher_s, 128.0 * 8192 / 2e5);
  EXPECT_DOUBLE_EQ(extra.total_s(), extra.fisher_s);
}

}  // namespace
}  // namespace cpt::planner
