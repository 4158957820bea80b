// The step profiler's aggregation (executor/measure/step_profiler.h): top-level events per thread,
// by name, the stepping thread apart from the others, and the JSON round trip.
#include "executor/measure/step_profiler.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

namespace cpt::exec {
namespace {

TEST(StepProfiler, TopLevelEventsAreSummedByNameAndNestedOnesAreNot) {
  const std::uint64_t main = 7, worker = 9;
  // Stepping thread: linear [0, 10) holding matmul [1, 9) holding mm [2, 8); linear [10, 14);
  // a wait [20, 30). Another thread: an all-reduce [5, 25), overlapping the stepping thread.
  const auto p = aggregate_top_level({{main, 2'000, 8'000, "aten::mm"},
                                      {main, 10'000, 14'000, "aten::linear"},
                                      {worker, 5'000, 25'000, "gloo:all_reduce"},
                                      {main, 0, 10'000, "aten::linear"},
                                      {main, 1'000, 9'000, "aten::matmul"},
                                      {main, 20'000, 30'000, "comm wait dp/0"}},
                                     main);
  ASSERT_EQ(p.by_name.size(), 2u);
  EXPECT_EQ(p.by_name[0].name, "aten::linear");
  EXPECT_EQ(p.by_name[0].calls, 2);
  EXPECT_NEAR(p.by_name[0].seconds, 14e-6, 1e-15);
  EXPECT_EQ(p.by_name[1].name, "comm wait dp/0");
  EXPECT_NEAR(p.by_name[1].seconds, 10e-6, 1e-15);
  EXPECT_NEAR(p.top_level_s, 24e-6, 1e-15);
  EXPECT_NEAR(p.span_s, 30e-6, 1e-15);  // the stepping thread's
  ASSERT_EQ(p.other_threads.size(), 1u);
  EXPECT_EQ(p.other_threads[0].name, "gloo:all_reduce");
  EXPECT_NEAR(p.other_threads[0].seconds, 20e-6, 1e-15);

  EXPECT_NEAR(p.seconds_by_kind.at("gemm"), 14e-6, 1e-15);
  EXPECT_NEAR(p.seconds_by_kind.at("communication"), 10e-6, 1e-15);
  EXPECT_EQ(p.seconds_by_kind.at("other"), 0.0);

  const auto back = step_profile_from_json(to_json(p));
  EXPECT_EQ(to_json(back), to_json(p));
  EXPECT_TRUE(aggregate_top_level({}, main).by_name.empty());
}

// Each event's own time goes to the outermost kind around it (op_kind.h), a communication wait
// to communication wherever it is; the kinds add up to the top-level time.
TEST(StepProfiler, OwnTimeGoesToTheOutermostKindAndWaitsToCommunication) {
  const std::uint64_t t = 1;
  const auto p = aggregate_top_level({{t, 0, 10'000, "aten::linear"},
                                      {t, 2'000, 8'000, "aten::mm"},
                                      {t, 40'000, 60'000, "cpt optimizer step"},
                                      {t, 41'000, 45'000, "aten::mul"},
                                      {t, 50'000, 55'000, "comm wait dp/0"},
                                      {t, 70'000, 80'000, "aten::cross_entropy_loss"},
                                      {t, 71'000, 75'000, "aten::exp"},
                                      {t, 90'000, 92'000, "aten::add"},
                                      {t, 100'000, 110'000, "aten::scaled_dot_product_attention"},
                                      {t, 101'000, 105'000, "aten::matmul"}},
                                     t);
  const auto& k = p.seconds_by_kind;
  EXPECT_NEAR(k.at("gemm"), 10e-6, 1e-15);
  EXPECT_NEAR(k.at("optimizer"), 15e-6, 1e-15);       // its scope less the wait inside
  EXPECT_NEAR(k.at("communication"), 5e-6, 1e-15);
  EXPECT_NEAR(k.at("loss"), 10e-6, 1e-15);            // the exp inside the loss is the loss's
  EXPECT_NEAR(k.at("attention"), 10e-6, 1e-15);       // the matmul inside attention is attention's
  EXPECT_NEAR(k.at("other"), 2e-6, 1e-15);
  double sum = 0;
  for (const auto& [kind, s] : k) sum += s;
  EXPECT_NEAR(sum, p.top_level_s, 1e-15);
}

}  // namespace
}  // namespace cpt::exec
