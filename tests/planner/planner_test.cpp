#include "planner/planner.h"

#include <gtest/gtest.h>

#include <algorithm>

#include <map>
#include <set>

#include "core/error.h"
#include "planner/export_gaps.h"
#include "planner/pruning.h"
#include "spec/hardware_catalog.h"
#include "spec/model_catalog.h"
#include "spec/rank_layout.h"

namespace cpt::planner {
namespace {

const spec::HardwareCatalog& cat() {
  return spec::HardwareCatalog::builtin();
}

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
  // A value no configuration can have is a one-line error, not an empty search.
  EXPECT_THROW(parse_fixed("zero=4"), core::ConfigError);
  EXPECT_THROW(parse_fixed("micro_batch=0"), core::ConfigError);
  EXPECT_THROW(parse_fixed("ep=8,ep=4"), core::ConfigError);  // which one was meant?
  EXPECT_THROW(parse_fixed("ep=8,,tp=1"), core::ConfigError);
  try {
    (void)SearchSpace(m, c, 64, parse_fixed("tp=3"));
    ADD_FAILURE() << "expected a ConfigError";
  } catch (const core::ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("no layout of the 32 GPUs has tp=3"), std::string::npos) << e.what();
  }
  EXPECT_THROW((void)SearchSpace(m, c, 64, parse_fixed("pp=64")), core::ConfigError);  // 32 layers
}

// Every `stride`-th candidate of the search space of `m` on `c` that passes the pruning rules is
// a valid ParallelConfig for spec. Returns how many passed.
std::uint64_t passes_are_valid(const spec::ModelSpec& m, const spec::ClusterSpec& c, std::uint64_t stride) {
  const SearchSpace space(m, c, 64, Fixed{});
  const cost::CostModelOptions o;
  const PruneContext ctx{m, c, 4096, o};
  std::uint64_t passed = 0;
  for (std::uint64_t i = 0; i < space.size(); i += stride) {
    const auto p = space.at(i);
    if (prune_shape(p, ctx) || prune_layout(p, ctx, layout_facts(p, c.node.gpus_per_node))) continue;
    ++passed;
    const auto errors = spec::find_parallel_config_errors(p, m, 4096, c.num_gpus);
    EXPECT_TRUE(errors.empty()) << errors.front();
    if (!errors.empty()) break;
  }
  return passed;
}

// The pruning rules restate spec's rules: whatever passes them is a valid ParallelConfig.
TEST(Pruning, WhatPassesIsValidForSpec) {
  EXPECT_GT(
      passes_are_valid(spec::find_catalog_model("llama3-8b")->spec, cat().cluster_for_gpu("h100", 32, "--gpu"), 1),
      100u);
}

// The same for a mixture of experts; expert degrees that do not fold into a stage's ranks are
// rejected by their shape, before the memory bound divides by expert-dp (0 for them: an
// infinite bound cast to bytes, which UBSan reported, bench/sanitize.sh).
TEST(Pruning, ExpertDegreesThatDoNotFoldAreRejectedByShape) {
  const auto m = spec::find_catalog_model("qwen3-30b-a3b")->spec;
  const auto c = cat().cluster_for_gpu("h100", 16, "--gpu");
  const SearchSpace space(m, c, 64, Fixed{});
  const cost::CostModelOptions o;
  const PruneContext ctx{m, c, 4096, o};
  std::uint64_t not_folding = 0, named = 0;  // named: the first rule that rejects it is this one
  for (std::uint64_t i = 0; i < space.size(); i += 7) {
    const auto p = space.at(i);
    if ((p.tp * p.cp * p.dp) % (p.ep * p.etp) == 0) continue;
    ++not_folding;
    const auto reason = prune_shape(p, ctx);
    ASSERT_TRUE(reason.has_value());
    named += *reason == RejectReason::kExpertsDoNotFold ? 1u : 0u;
  }
  EXPECT_GT(not_folding, 100u);
  EXPECT_GT(named, 0u);
  EXPECT_GT(passes_are_valid(m, c, 7), 100u);
}

// With a target, what passes the pruning rules is what that framework's export runs as planned
// (export_gaps.h), and the rule rejects something in a real search space.
TEST(Pruning, ATargetKeepsWhatItsExportRunsAsPlanned) {
  const auto m = spec::find_catalog_model("llama3-70b")->spec;
  const auto c = cat().cluster_for_gpu("h100", 64, "--gpu");
  const SearchSpace space(m, c, 64, Fixed{});
  const cost::CostModelOptions o;
  for (const auto target : {spec::Runtime::kMegatron, spec::Runtime::kDeepSpeed, spec::Runtime::kTorchtitan}) {
    PruneContext ctx{m, c, 4096, o};
    ctx.target = target;
    std::uint64_t kept = 0, rejected = 0;
    for (std::uint64_t i = 0; i < space.size(); i += 5) {
      const auto p = space.at(i);
      const auto reason = prune_shape(p, ctx);
      rejected += reason == RejectReason::kNotRunByTarget ? 1u : 0u;
      if (reason) continue;
      ++kept;
      ASSERT_EQ(find_export_gap(m, p, 4096, target), ExportGap::kNone) << spec::to_string(target);
    }
    EXPECT_GT(kept, 100u) << spec::to_string(target);
    EXPECT_GT(rejected, 100u) << spec::to_string(target);
  }
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

// Workers take blocks in whatever order timing gives; the merge sorts by a total order.
TEST(Planner, TheResultDoesNotDependOnTheThreads) {
  const auto m = spec::find_catalog_model("llama3-70b")->spec;
  const auto c = cat().cluster_for_gpu("h100", 64, "--gpu");
  auto o = options(256, 8192);
  o.threads = 1;
  const auto one = search(m, c, o);
  o.threads = 3;
  const auto three = search(m, c, o);
  EXPECT_EQ(one.threads, 1);
  EXPECT_EQ(three.threads, 3);
  EXPECT_EQ(one.evaluated, three.evaluated);
  EXPECT_EQ(one.rejected, three.rejected);
  ASSERT_EQ(one.all_feasible.size(), three.all_feasible.size());
  for (std::size_t i = 0; i < one.all_feasible.size(); ++i) {
    ASSERT_EQ(one.all_feasible[i].index, three.all_feasible[i].index) << i;
    ASSERT_EQ(one.all_feasible[i].score, three.all_feasible[i].score) << i;
  }
  ASSERT_EQ(one.top.size(), three.top.size());
  for (std::size_t i = 0; i < one.top.size(); ++i) EXPECT_EQ(one.top[i].index, three.top[i].index);
  ASSERT_EQ(one.pareto.size(), three.pareto.size());
  for (std::size_t i = 0; i < one.pareto.size(); ++i) EXPECT_EQ(one.pareto[i].index, three.pareto[i].index);
}

// Across sizes the front trades the job's throughput, memory and GPUs: no member is dominated by
// any feasible candidate, and every candidate off the front is dominated by a member.
TEST(Planner, ParetoFrontAcrossGpuCounts) {
  const auto m = spec::find_catalog_model("llama3-8b")->spec;
  std::vector<spec::ClusterSpec> clusters;
  for (int n : {8, 16, 32}) clusters.push_back(cat().cluster_for_gpu("h100", n, "--gpu"));
  auto o = options(64, 4096);
  const auto r = search_sizes(m, clusters, o);
  ASSERT_EQ(r.best_per_size.size(), 3u);
  for (std::size_t i = 0; i < 3; ++i) {
    EXPECT_EQ(r.best_per_size[i].first, clusters[i].num_gpus);
    ASSERT_TRUE(r.best_per_size[i].second.has_value());
    EXPECT_EQ(r.best_per_size[i].second->config.world_size(), clusters[i].num_gpus);
  }
  std::set<int> sizes_on_front;
  auto rate = [](const spec::ParallelConfig& p, double per_gpu) { return per_gpu * p.world_size(); };
  auto dominates = [&](double ra, core::Bytes ma, int ga, double rb, core::Bytes mb, int gb) {
    return ra >= rb && ma <= mb && ga <= gb && (ra > rb || ma < mb || ga < gb);
  };
  // The front is decided on the search-mode numbers: compare those.
  std::map<std::pair<int, std::uint64_t>, const RankedCandidate*> feasible;
  for (const auto& c : r.all_feasible) feasible[{c.config.world_size(), c.index}] = &c;
  std::vector<const RankedCandidate*> front;
  for (const auto& f : r.pareto) {
    ASSERT_TRUE(feasible.count({f.config.world_size(), f.index}));
    front.push_back(feasible[{f.config.world_size(), f.index}]);
    sizes_on_front.insert(f.config.world_size());
    // Its full estimate carries the same numbers.
    EXPECT_NEAR(f.estimate.tokens_per_s_per_gpu / front.back()->estimate.tokens_per_s_per_gpu, 1.0, 1e-9);
    EXPECT_EQ(f.estimate.peak_memory().total(), front.back()->estimate.peak_memory.total());
  }
  EXPECT_EQ(sizes_on_front.size(), 3u);  // each size contributes (more GPUs: faster job)
  for (const auto* f : front) {
    for (const auto& c : r.all_feasible) {
      ASSERT_FALSE(dominates(rate(c.config, c.estimate.tokens_per_s_per_gpu), c.estimate.peak_memory.total(),
                             c.config.world_size(), rate(f->config, f->estimate.tokens_per_s_per_gpu),
                             f->estimate.peak_memory.total(), f->config.world_size()))
          << "front member " << f->index << " on " << f->config.world_size() << " GPUs is dominated";
    }
  }
  for (const auto& c : r.all_feasible) {
    if (std::find(front.begin(), front.end(), &c) != front.end()) continue;
    const double rc = rate(c.config, c.estimate.tokens_per_s_per_gpu);
    bool dominated = false;
    for (const auto* f : front) {
      dominated = dominated || (rate(f->config, f->estimate.tokens_per_s_per_gpu) >= rc &&
                                f->estimate.peak_memory.total() <= c.estimate.peak_memory.total() &&
                                f->config.world_size() <= c.config.world_size());
    }
    ASSERT_TRUE(dominated) << "candidate " << c.index << " on " << c.config.world_size() << " GPUs is missing";
  }
  // The top is ranked across sizes by the objective (tokens/s per GPU here).
  for (std::size_t i = 1; i < r.top.size(); ++i) EXPECT_GE(r.top[i - 1].score, r.top[i].score);
}

// `cpt run` plans only what cpt's executor runs.
TEST(Planner, ExecutorOnlyKeepsWhatTheExecutorRuns) {
  const auto m = spec::find_catalog_model("llama3-70b")->spec;
  const auto c = cat().cluster_for_gpu("h100", 64, "--gpu");
  auto o = options(256, 8192);
  o.executor_only = true;
  const auto r = search(m, c, o);
  EXPECT_GT(r.rejected[static_cast<std::size_t>(RejectReason::kNotRunByExecutor)], 0u);
  ASSERT_FALSE(r.top.empty());
  for (const auto& cand : r.all_feasible) {
    ASSERT_FALSE(cand.config.zero_stage == 3 && cand.config.pp > 1) << cand.index;
  }
  // Hybrid sharding with context parallelism is run (ZeRO-3 over the node's dp × cp replicas).
  EXPECT_TRUE(std::any_of(r.all_feasible.begin(), r.all_feasible.end(),
                          [](const auto& cand) { return cand.config.hybrid_shard && cand.config.cp > 1; }));
  o.executor_only = false;
  const auto all = search(m, c, o);
  EXPECT_EQ(all.rejected[static_cast<std::size_t>(RejectReason::kNotRunByExecutor)], 0u);
  EXPECT_GT(all.feasible, r.feasible);
  o.executor_only = true;
  EXPECT_THROW(search(spec::find_catalog_model("gpt3-175b")->spec, c, o), core::ConfigError);
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

// A memory margin holds under any objective: every plan leaves it free, and fewer plans fit.
TEST(Planner, MemoryMarginHoldsUnderEveryObjective) {
  const auto m = spec::find_catalog_model("llama3-70b")->spec;
  const auto c = cat().cluster_for_gpu("h100", 64, "--gpu");
  auto o = options(128, 4096);
  o.objective = Objective::kTime;
  o.tokens = 1'000'000'000;
  const auto free_run = search(m, c, o);
  o.memory_margin = 0.25;
  const auto r = search(m, c, o);
  ASSERT_FALSE(r.top.empty());
  for (const auto& cand : r.top) EXPECT_LE(core::to_gibibytes(cand.estimate.peak_memory().total()), 60.0);
  EXPECT_LT(r.feasible, free_run.feasible);
  o.memory_margin = 1.0;
  EXPECT_THROW(search(m, c, o), core::ConfigError);
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
