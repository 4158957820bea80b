#include "planner/time_to_finish.h"

#include <gtest/gtest.h>

#include <cmath>

#include "core/error.h"
#include "planner/planner.h"
#include "spec/hardware_catalog.h"
#include "spec/model_catalog.h"

namespace cpt::planner {
namespace {

// 1e9 tokens in steps of 8 x 4,096 = 32,768 tokens: 30,518 steps (30,517.6 rounded up), 2 s each;
// a 14 GB checkpoint (1e9 parameters in bf16 with fp32 Adam) at 50 GB/s: 0.28 s.
FinishInputs billion_tokens(FailureOptions failures) {
  return FinishInputs{1'000'000'000, 8, 4096, 14e9, failures, nullptr};
}

TEST(TimeToFinish, WithoutFailuresItIsTheStepsAndOneCheckpoint) {
  const auto t = time_to_finish(2.0, 64, 8, billion_tokens(FailureOptions{0, 50, 10}));
  EXPECT_EQ(t.steps, 30518);
  EXPECT_DOUBLE_EQ(t.training_s, 61036.0);
  EXPECT_DOUBLE_EQ(t.checkpoint_write_s, 0.28);
  EXPECT_DOUBLE_EQ(t.wall_s, 61036.28);
  EXPECT_DOUBLE_EQ(t.failure_loss_s, 0.0);
  EXPECT_DOUBLE_EQ(t.gpu_hours, 61036.28 * 64 / 3600);
  EXPECT_FALSE(t.interval_from_recipe);
}

// Daly's first-order model (costmodel/sim/failures.h) at TRAIN.json's interval: a checkpoint every
// 500 steps is τ = 1,000 s of compute; the job's MTBF is 1,000 GPU-hours / 100 GPUs = 36,000 s.
TEST(TimeToFinish, FailuresCostTheWorkSinceTheLastCheckpointAndARestart) {
  spec::TrainConfig recipe;
  recipe.checkpoint.interval_steps = 500;
  auto in = billion_tokens(FailureOptions{1000, 50, 10});
  in.recipe = &recipe;
  const auto t = time_to_finish(2.0, 100, 10, in);
  const double mtbf = 36000, tau = 1000, write = 0.28, restart = 600, solve = 61036;
  const double daly = mtbf * std::exp(restart / mtbf) * std::expm1((tau + write) / mtbf) * solve / tau;
  EXPECT_TRUE(t.interval_from_recipe);
  EXPECT_DOUBLE_EQ(t.interval_s, tau);
  EXPECT_NEAR(t.wall_s, daly, 1e-9 * daly);
  EXPECT_NEAR(t.checkpoints_s, solve / tau * write, 1e-12);
  EXPECT_NEAR(t.failure_loss_s, t.wall_s - solve - t.checkpoints_s, 1e-6);
  EXPECT_GT(t.failure_loss_s, 0.0);
  // The best interval can only do better, and more failures only worse.
  EXPECT_LE(t.best_wall_s, t.wall_s);
  auto flaky = in;
  flaky.failures.mtbf_gpu_hours = 100;
  EXPECT_GT(time_to_finish(2.0, 100, 10, flaky).wall_s, t.wall_s);
  // A rare failure tends to the failure-free time.
  auto solid = in;
  solid.failures.mtbf_gpu_hours = 1e12;
  EXPECT_NEAR(time_to_finish(2.0, 100, 10, solid).wall_s, solve + t.checkpoints_s, 1e-3);
}

// A TRAIN.json that checkpoints only at the end loses the whole run to each failure: with a job
// MTBF of 3.6 h and a 17 h run the expectation is far beyond the best interval's; with a 72-second
// MTBF it has no finite value, and the best interval still does.
TEST(TimeToFinish, OnlyAFinalCheckpointIsPricedAsTheRunWouldSufferIt) {
  spec::TrainConfig recipe;
  auto in = billion_tokens(FailureOptions{360, 50, 10});
  in.recipe = &recipe;
  const auto t = time_to_finish(2.0, 100, 10, in);
  EXPECT_TRUE(t.interval_from_recipe);
  EXPECT_DOUBLE_EQ(t.interval_s, 61036.0);
  EXPECT_GT(t.wall_s, 10 * t.best_wall_s);
  EXPECT_LT(t.best_interval_s, 3600.0);
  in.failures.mtbf_gpu_hours = 2;
  const auto hopeless = time_to_finish(2.0, 100, 10, in);
  EXPECT_TRUE(std::isinf(hopeless.wall_s));
  EXPECT_TRUE(std::isfinite(hopeless.best_wall_s));
}

TEST(TimeToFinish, TheRecipesEvaluationsAreWorkToFinish) {
  spec::TrainConfig recipe;
  spec::DataSetConfig set;
  set.name = "old";
  set.eval_sequences = 100;
  recipe.eval = {set};
  recipe.eval_interval_steps = 1000;
  auto in = billion_tokens(FailureOptions{0, 50, 10});
  in.recipe = &recipe;
  const auto t = time_to_finish(2.0, 64, 8, in);
  // Steps 1,000 .. 30,000 and the end: 31 evaluations of 100 x 4,096 tokens at a third of a
  // training token's work, on one of 8 replicas: 32,768 / 2 / 8 = 2,048 tokens/s.
  EXPECT_EQ(t.recipe.evaluations, 31);
  EXPECT_DOUBLE_EQ(t.recipe.evaluation_s, 31.0 * 100 * 4096 / 3 / 2048);
  EXPECT_DOUBLE_EQ(t.failure_free_s(), 61036.0 + t.recipe.evaluation_s);
}

// Frequent failures with slow restarts make a larger job slower to finish: the time objective
// (failure-free) takes the most GPUs, time-to-train the size whose expected time is least.
TEST(TimeToFinish, TheObjectiveWeighsFailuresAgainstSpeedAcrossSizes) {
  const auto model = spec::find_catalog_model("tiny")->spec;
  const auto& catalog = spec::HardwareCatalog::builtin();
  const std::vector<spec::ClusterSpec> sizes = {catalog.cluster_for_gpu("h100", 8, "--gpu"),
                                                catalog.cluster_for_gpu("h100", 64, "--gpu")};
  SearchOptions o;
  o.global_batch = 64;
  o.seq_len = 128;
  o.top_k = 3;
  o.tokens = 1'000'000'000'000;
  o.failures = FailureOptions{20, 50, 60};
  o.objective = Objective::kTime;
  EXPECT_EQ(search_sizes(model, sizes, o).top.front().config.world_size(), 64);
  o.objective = Objective::kTimeToTrain;
  const auto r = search_sizes(model, sizes, o);
  ASSERT_EQ(r.best_per_size.size(), 2u);
  EXPECT_EQ(r.top.front().config.world_size(), 8);
  const auto in = finish_inputs(model, o);
  const auto wall = [&](const Candidate& c) {
    return time_to_finish(c.estimate.time.total().value(), c.config.world_size(), c.config.dp, in).wall_s;
  };
  for (const auto& [gpus, best] : r.best_per_size) {
    ASSERT_TRUE(best.has_value()) << gpus;
    EXPECT_LE(wall(r.top.front()), wall(*best)) << gpus;
  }
  o.tokens = 0;
  EXPECT_THROW(search_sizes(model, sizes, o), core::ConfigError);
}

}  // namespace
}  // namespace cpt::planner
