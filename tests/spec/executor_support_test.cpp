#include "spec/executor_support.h"

#include <gtest/gtest.h>

namespace cpt::spec {
namespace {

// The executor's scalar all-reduces per step, by group (executor_support.h). Measured against the
// executor's own call counts in tests/cli/distributed_train_test.cpp (`cpt compare`'s
// *_calls_per_step, every example layout).
TEST(ExecutorSupport, StepScalarAllReducesFollowTheGroupsThatExist) {
  EXPECT_EQ(executor_step_scalar_all_reduces(ParallelConfig{}, 1).total(), 0);  // one rank: none

  const auto dp2 = executor_step_scalar_all_reduces(ParallelConfig{.dp = 2}, 2);
  EXPECT_EQ(dp2.replicas, 2);  // the loss-token count, the loss
  EXPECT_EQ(dp2.shard, 0);     // replicated gradients: the norm needs no sum
  EXPECT_EQ(dp2.total(), 2);

  const auto zero1 = executor_step_scalar_all_reduces(ParallelConfig{.dp = 2, .zero_stage = 1}, 2);
  EXPECT_EQ(zero1.shard, 1);  // the sharded gradient norm
  EXPECT_EQ(zero1.total(), 3);

  // Context parallelism makes replicas of dp = 1 (the loss is summed over cp ranks too).
  EXPECT_EQ(executor_step_scalar_all_reduces(ParallelConfig{.cp = 2}, 2).replicas, 2);

  const auto tp_pp = executor_step_scalar_all_reduces(ParallelConfig{.tp = 2, .pp = 2}, 1);
  EXPECT_EQ(tp_pp.tp, 1);  // the norm
  EXPECT_EQ(tp_pp.pp, 2);  // the last stage's loss, the norm
  EXPECT_EQ(tp_pp.replicas, 0);
  EXPECT_EQ(tp_pp.total(), 3);
}

}  // namespace
}  // namespace cpt::spec
