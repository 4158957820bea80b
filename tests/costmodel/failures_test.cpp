#include "costmodel/sim/failures.h"

#include <gtest/gtest.h>

#include <cmath>

namespace cpt::cost::sim {
namespace {

using core::Seconds;

// Without failures (M → ∞) the only cost is the checkpoint writes: T·(1 + δ/τ).
TEST(Failures, RareFailuresCostOnlyTheCheckpoints) {
  const FailureModel f{Seconds(1e12), Seconds(60), Seconds(600)};
  EXPECT_NEAR(expected_wall_time(Seconds(3600), Seconds(600), f).value(), 3600 * (1 + 60.0 / 600), 1e-3);
}

// The numerical optimum is close to Daly's first-order √(2δM) − δ when δ << M, and no interval
// does better (checked on a grid).
TEST(Failures, OptimalIntervalIsTheMinimum) {
  // 16,384 GPUs with a GPU MTBF of 50,000 h: job MTBF about 3 h; 2-minute checkpoints, 10-minute restarts.
  const FailureModel f{Seconds(50'000.0 * 3600 / 16384), Seconds(120), Seconds(600)};
  const Seconds solve(30.0 * 24 * 3600);
  const auto plan = optimal_checkpoint_interval(solve, f);
  EXPECT_NEAR(plan.interval / plan.daly_first_order, 1.0, 0.15);
  for (double tau = 60; tau < 6 * 3600; tau *= 1.1) {
    EXPECT_GE(expected_wall_time(solve, Seconds(tau), f).value(), plan.wall_time.value() * (1 - 1e-9)) << tau;
  }
  EXPECT_GT(plan.overhead, 0.0);
  EXPECT_LT(plan.overhead, 1.0);
}

}  // namespace
}  // namespace cpt::cost::sim
