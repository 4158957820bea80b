#include "spec/parallel_config.h"

#include <gtest/gtest.h>

#include "spec/model_catalog.h"

namespace cpt::spec {
namespace {

const ModelSpec& llama70b() {
  static const ModelSpec m = find_catalog_model("llama3-70b")->spec;
  return m;
}

TEST(ParallelConfig, DerivedValues) {
  ParallelConfig c{.tp = 8, .dp = 4, .pp = 4, .micro_batch = 2, .global_batch = 512};
  EXPECT_EQ(c.world_size(), 128);
  EXPECT_EQ(c.grad_accum(), 64);
  EXPECT_EQ(c.num_stages(), 4);
  EXPECT_TRUE(find_parallel_config_errors(c, llama70b(), 8192, 128).empty());
}

TEST(ParallelConfig, ErrorsShowEveryFactor) {
  ParallelConfig c{.tp = 16, .dp = 3, .pp = 2, .micro_batch = 2, .global_batch = 100};
  const auto e = find_parallel_config_errors(c, llama70b(), 8192, 64);
  ASSERT_EQ(e.size(), 3u);
  EXPECT_EQ(e[0], "tp (16) * cp (1) * dp (3) * pp (2) = 96 != number of GPUs (64)");
  EXPECT_EQ(e[1], "kv_heads (8) must be divisible by tp (16)");
  EXPECT_EQ(e[2], "global_batch (100) must be divisible by micro_batch (2) * dp (3) = 6");
}

// Degrees and batch sizes each in range whose products are not an int: one error each, no
// arithmetic wrapped to zero and divided by (it was SIGFPE in train, simulate and whatif).
TEST(ParallelConfig, ProductsBeyondAnIntAreErrorsNotCrashes) {
  ParallelConfig batch{.dp = 65'536, .micro_batch = 65'536, .global_batch = kMaxGlobalBatch};
  EXPECT_EQ(batch.sequences_per_microbatch(), 4'294'967'296);
  EXPECT_EQ(batch.grad_accum(), 0);
  const auto e = find_parallel_config_errors(batch, llama70b(), 0, 0);
  ASSERT_FALSE(e.empty());
  EXPECT_EQ(e.back(), "global_batch (1048576) must be divisible by micro_batch (65536) * dp (65536) = 4294967296");
  // Beyond the most cpt plans (the replayed schedules grow with the microbatches): refused as such.
  batch.global_batch = 1 << 30;
  EXPECT_EQ(find_parallel_config_errors(batch, llama70b(), 0, 0).back(),
            "global_batch must be at most 1048576 sequences, got 1073741824");
  ParallelConfig world{.tp = 1 << 16, .dp = 1 << 16, .micro_batch = 1, .global_batch = 1 << 16};
  EXPECT_EQ(
      find_parallel_config_errors(world, llama70b(), 0, 0),
      std::vector<std::string>{"tp (65536) * cp (1) * dp (65536) * pp (1) = 4294967296 GPUs: more than any cluster"});
}

TEST(ParallelConfig, CombinationRules) {
  const ModelSpec& m = llama70b();
  auto first_error = [&](ParallelConfig c) {
    const auto e = find_parallel_config_errors(c, m, 8192, 0);
    return e.empty() ? std::string() : e.front();
  };
  EXPECT_EQ(first_error({.zero_stage = 2, .hybrid_shard = true}), "hybrid_shard needs zero_stage 3, got zero_stage 2");
  EXPECT_EQ(first_error({.sequence_parallel = true}), "sequence_parallel needs tp >= 2, got tp = 1");
  EXPECT_EQ(first_error({.pp = 4, .virtual_stages = 2}),
            "virtual_stages (2) > 1 needs schedule interleaved_1f1b, got 1f1b");
  EXPECT_EQ(first_error({.pp = 4, .virtual_stages = 2, .global_batch = 6, .schedule = ScheduleKind::kInterleaved1F1B}),
            "schedule interleaved_1f1b needs microbatches per step (6) divisible by pp (4)");
  EXPECT_EQ(
      first_error({.pp = 80, .virtual_stages = 2, .global_batch = 80, .schedule = ScheduleKind::kInterleaved1F1B}),
      "pp (80) * virtual_stages (2) = 160 stages exceed layers (80)");
  EXPECT_EQ(first_error({.cp = 3}),
            "seq_len (8192) must be a multiple of 2·cp (6) for the load-balanced context-parallel split");
  EXPECT_EQ(first_error({.offload = Offload::kOptimizerAndParams}),
            "offload optimizer+params needs zero_stage 3, got zero_stage 0");
  EXPECT_EQ(first_error({.axis_order = {Axis::kTp, Axis::kTp, Axis::kDp, Axis::kPp}}),
            "axis_order must name each of tp, cp, dp, pp exactly once");
  EXPECT_EQ(first_error({.tp = 0}), "tp must be >= 1, got 0");
}

}  // namespace
}  // namespace cpt::spec
