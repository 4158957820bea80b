#include "planner/planner.h"

#include <gtest/gtest.h>

#include <set>

#include "core/error.h"
#include "spec/hardware_catalog.h"
#include "spec/model_catalog.h"
#include "spec/rank_layout.h"

namespace cpt::planner {
namespace {

const spec::HardwareCatalog& cat() { return spec::HardwareCatalog::builtin(); }

TEST(SearchSpace, FixPinsFieldsAndEveryCandidateUsesAllGpus) {
  const auto m = spec::find_catalog_model("llama3-8b")->spec;
  const auto c = cat().cluster_for_gpu("h100", 32, "--gpu");
  const SearchSpace all(m, c, 64, Fixed{});
  const SearchSpace pinned(m, c, 64, parse_fixed("tp=4,zero=1,recompute=selective"));
  EXPECT_GT(all.size(), pinned.size());
  for (std::uint64_t i = 0; i < pinned.size(); ++i) {
    const auto p = pinned.at(i);
    EXPECT_EQ(p.tp, 4);
    EXPECT_EQ(p.zero_stage, 1);
    EXPECT_EQ(p.recompute, spec::Recompute::kSelective);
    EXPECT_EQ(p.world_size(), 32);
  }
  EXPECT_THROW(parse_fixed("tp=four"), core::ConfigError);
  EXPECT_THROW(parse_fixed("tp"), core::ConfigError);
  EXPECT_THROW(parse_fixed("recompute=some"), core::ConfigError);  // checked when the space is built
}

// The pruning rules restate spec's rules: whatever passes them is a valid ParallelConfig.
TEST(Pruning, WhatPassesIsValidForSpec) {
  const auto m = spec::find_catalog_model("llama3-8b")->spec;
  const auto c = cat().cluster_for_gpu("h100", 32, "--gpu");
  const SearchSpace space(m, c, 64, Fixed{});
  const cost::CostModelOptions o;
  const PruneContext ctx{m, c, 4096, o};
  std::uint64_t passed = 0;
  for (std::uint64_t i = 0; i < space.size(); ++i) {
    const auto p = space.at(i);
    if (prune_shape(p, ctx)) continue;
    if (prune_layout(p, ctx, layout_facts(p, c.node.gpus_per_node))) continue;
    ++passed;
    const auto errors = spec::find_parallel_config_errors(p, m, 4096, c.num_gpus);
    ASSERT_TRUE(errors.empty()) << errors.front();
  }
  EXPECT_GT(passed, 100u);
}

// layout_facts (one allocation-free pass) agrees with RankLayout's group functions.
TEST(Pruning, LayoutFactsAgreeWithRankLayout) {
  int checked = 0;
  for (int tp : {1, 2}) {
    for (int dp : {2, 3, 4, 6, 8}) {
      for (int pp : {1, 2, 3}) {
        for (bool dp_first : {true, false}) {
          spec::ParallelConfig p{.tp = tp, .dp = dp, .pp = pp, .zero_stage = 3};
          if (!dp_first) p.axis_order = {spec::Axis::kTp, spec::Axis::kCp, spec::Axis::kPp, spec::Axis::kDp};
          const auto f = layout_facts(p, 4);
          const spec::RankLayout plain(p, 4);
          p.hybrid_shard = true;
          const spec::RankLayout hybrid(p, 4);
          EXPECT_EQ(f.dp_spans_nodes, plain.max_nodes_spanned(spec::Axis::kDp) > 1);
          EXPECT_EQ(f.hybrid_shard_uneven, hybrid.find_hybrid_shard_error().has_value());
          if (!f.hybrid_shard_uneven) {
            EXPECT_EQ(f.hybrid_shard_group, static_cast<int>(hybrid.dp_shard_group(0).size()));
          }
          ++checked;
        }
      }
    }
  }
  EXPECT_EQ(checked, 60);
}

SearchOptions options(int gb, int seq) {
  SearchOptions o;
  o.global_batch = gb;
  o.seq_len = seq;
  o.top_k = 5;
  return o;
}

TEST(Planner, CountsAddUpAndTheTopIsRankedAndExact) {
  const auto m = spec::find_catalog_model("llama3-8b")->spec;
  const auto c = cat().cluster_for_gpu("h100", 16, "--gpu");
  const auto r = search(m, c, options(64, 4096));
  std::uint64_t rejected = 0;
  for (auto n : r.rejected) rejected += n;
  const auto evaluated_rejections = r.rejected[static_cast<std::size_t>(RejectReason::kOutOfMemory)] +
                                    r.rejected[static_cast<std::size_t>(RejectReason::kUnsupported)];
  EXPECT_EQ(r.evaluated, r.enumerated - (rejected - evaluated_rejections));
  EXPECT_EQ(r.feasible, r.evaluated - evaluated_rejections);
  ASSERT_EQ(r.top.size(), 5u);
  for (std::size_t i = 1; i < r.top.size(); ++i) EXPECT_GE(r.top[i - 1].score, r.top[i].score);
  // The top estimates are exact: the same as `cpt estimate` would print.
  const auto exact = cost::evaluate(m, c, r.top[0].config, 4096);
  EXPECT_DOUBLE_EQ(std::get<cost::Estimate>(exact).time.total().value(), r.top[0].estimate.time.total().value());
  // The Pareto front trades memory for speed monotonically.
  for (std::size_t i = 1; i < r.pareto.size(); ++i) {
    EXPECT_GE(r.pareto[i].estimate.peak_memory().total(), r.pareto[i - 1].estimate.peak_memory().total());
    EXPECT_GT(r.pareto[i].estimate.tokens_per_s_per_gpu, r.pareto[i - 1].estimate.tokens_per_s_per_gpu);
  }
}

TEST(Planner, HeadroomObjectiveKeepsMemoryFree) {
  const auto m = spec::find_catalog_model("llama3-70b")->spec;
  const auto c = cat().cluster_for_gpu("h100", 64, "--gpu");
  auto o = options(128, 4096);
  o.objective = Objective::kHeadroom;
  o.headroom = 0.25;
  const auto r = search(m, c, o);
  ASSERT_FALSE(r.top.empty());
  for (const auto& cand : r.top) EXPECT_LE(core::to_gibibytes(cand.estimate.peak_memory().total()), 60.0);
}

TEST(Planner, CostObjectiveNeedsAPrice) {
  const auto m = spec::find_catalog_model("tiny")->spec;
  const auto c = cat().cluster_for_gpu("h100", 8, "--gpu");
  auto o = options(8, 128);
  o.objective = Objective::kCost;
  EXPECT_THROW(search(m, c, o), core::ConfigError);
  o.price_per_gpu_hour = 2.5;
  o.tokens = 1'000'000'000;
  const auto r = search(m, c, o);
  ASSERT_FALSE(r.top.empty());
  const double hours = 1e9 / (r.top[0].estimate.tokens_per_s_per_gpu * 8) / 3600;
  EXPECT_NEAR(-r.top[0].score, hours * 8 * 2.5, 1e-6 * hours * 20);
}

}  // namespace
}  // namespace cpt::planner
