#include "spec/executor_support.h"

#include <gtest/gtest.h>

namespace cpt::spec {
namespace {

// The executor's scalar all-reduces per step, by group (executor_support.h). Measured against the
// executor's own call counts in tests/integration/distributed_train_test.cpp (`cpt compare`'s
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

  // Expert parallelism: the routed experts' part of the norm over ep, over pp, and over expert-dp
  // where ZeRO shards them there (dp 4 / ep 2 = 2).
  const auto ep = executor_step_scalar_all_reduces(ParallelConfig{.dp = 4, .pp = 2, .zero_stage = 1, .ep = 2}, 4);
  EXPECT_EQ(ep.ep, 1);
  EXPECT_EQ(ep.pp, 3);
  EXPECT_EQ(ep.expert_shard, 1);
  EXPECT_EQ(ep.total(), 2 + 1 + 3 + 1 + 1);
  EXPECT_EQ(executor_step_scalar_all_reduces(ParallelConfig{.dp = 2, .ep = 2}, 2).expert_shard, 0);  // expert-dp 1

  // Experts whole on the ranks of a tp group (ep 1) are apart from their layer too: their norm over
  // pp, no ep group; ZeRO shards them over expert-dp (tp 2 · dp 2).
  const ParallelConfig tp_experts{.tp = 2, .dp = 2, .pp = 2, .zero_stage = 1, .sequence_parallel = true};
  const auto folded = executor_step_scalar_all_reduces(tp_experts, 2, /*moe=*/true);
  EXPECT_EQ(folded.ep, 0);
  EXPECT_EQ(folded.pp, 3);
  EXPECT_EQ(folded.expert_shard, 1);
  EXPECT_EQ(executor_step_scalar_all_reduces(tp_experts, 2).pp, 2);  // a dense model: no expert part
}

// EWC's penalty value: summed over the shards under ZeRO-3, then over tp and pp; replicas hold the
// same penalty (measured in tests/integration/distributed_train_test.cpp like the step's).
TEST(ExecutorSupport, EwcPenaltyIsSummedOverTheGroupsThatSplitTheParameters) {
  EXPECT_EQ(executor_ewc_scalar_all_reduces(ParallelConfig{.dp = 2}, 2).total(), 0);
  EXPECT_EQ(executor_ewc_scalar_all_reduces(ParallelConfig{.dp = 2, .zero_stage = 2}, 2).total(), 0);
  const auto zero3 = executor_ewc_scalar_all_reduces(ParallelConfig{.dp = 4, .zero_stage = 3}, 2);
  EXPECT_EQ(zero3.shard, 1);
  EXPECT_EQ(zero3.total(), 1);
  // Routed experts split over ep: their part of the penalty summed over the ep group.
  EXPECT_EQ(executor_ewc_scalar_all_reduces(ParallelConfig{.dp = 2, .ep = 2}, 2).ep, 1);
  EXPECT_EQ(executor_ewc_scalar_all_reduces(ParallelConfig{.dp = 2, .ep = 2}, 2).total(), 1);
  const auto tp_pp = executor_ewc_scalar_all_reduces(ParallelConfig{.tp = 2, .pp = 2}, 1);
  EXPECT_EQ(tp_pp.tp, 1);
  EXPECT_EQ(tp_pp.pp, 1);
  EXPECT_EQ(tp_pp.total(), 2);
}

// The executor runs experts over ep and etp with data parallelism, ZeRO-0 to 3, context
// parallelism and tensor parallelism with sequence parallelism (which spec requires of experts
// under tp; model/moe_mlp.h).
TEST(ExecutorSupport, ExpertParallelismRunsWithDataParallelismAndZero) {
  auto moe = ModelSpec{};
  moe.moe.experts = 4;
  moe.moe.experts_per_token = 2;
  ASSERT_TRUE(moe.moe.present());
  EXPECT_FALSE(find_executor_gap(ParallelConfig{.dp = 2, .zero_stage = 2, .ep = 2}, moe, 64));
  EXPECT_FALSE(find_executor_gap(ParallelConfig{.dp = 2, .zero_stage = 3, .ep = 2}, moe, 64));
  EXPECT_FALSE(find_executor_gap(ParallelConfig{.tp = 2, .dp = 2, .sequence_parallel = true, .ep = 2}, moe, 64));
  EXPECT_FALSE(find_executor_gap(ParallelConfig{.tp = 2, .zero_stage = 1, .sequence_parallel = true}, moe, 64));
  EXPECT_FALSE(find_executor_gap(ParallelConfig{.tp = 2, .zero_stage = 3, .sequence_parallel = true}, moe, 64));
  EXPECT_FALSE(find_executor_gap(ParallelConfig{.cp = 2, .ep = 2}, moe, 64));
  EXPECT_FALSE(find_executor_gap(ParallelConfig{.tp = 2, .cp = 2, .sequence_parallel = true, .ep = 2}, moe, 64));
  // Expert-tp splits each expert's MLP over its group (parallel/expert_parallel.h).
  EXPECT_FALSE(find_executor_gap(ParallelConfig{.dp = 2, .ep = 2, .etp = 2}, moe, 64));
  EXPECT_FALSE(
      find_executor_gap(ParallelConfig{.tp = 2, .dp = 2, .sequence_parallel = true, .ep = 2, .etp = 2}, moe, 64));
  EXPECT_FALSE(find_executor_gap(ParallelConfig{.dp = 2, .zero_stage = 3}, moe, 64));  // experts with their layer
  // DeepSeek's routing: its groups and its expert bias run (model/moe_mlp.h).
  auto routed = moe;
  routed.moe.expert_groups = 2;
  EXPECT_FALSE(find_executor_gap(ParallelConfig{.dp = 2, .ep = 2}, routed, 64));
  routed.moe.router = RouterScore::kSigmoid;  // an expert bias moves sigmoid scores
  routed.moe.expert_bias = true;
  EXPECT_FALSE(find_executor_gap(ParallelConfig{.dp = 2, .ep = 2}, routed, 64));
}

}  // namespace
}  // namespace cpt::spec
