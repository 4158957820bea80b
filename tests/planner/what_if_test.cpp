#include "planner/what_if.h"

#include <gtest/gtest.h>

#include "core/error.h"
#include "spec/model_catalog.h"

namespace cpt::planner {
namespace {

const spec::HardwareCatalog& cat() { return spec::HardwareCatalog::builtin(); }

TEST(WhatIf, ChangesApplyToTheCluster) {
  const auto base = cat().cluster_for_gpu("h100", 64, "--gpu");
  HardwareChange gpu;
  gpu.gpu = "h200";
  EXPECT_EQ(apply_change(base, gpu, cat()).gpu().name, "h200_sxm_141gb");
  HardwareChange more;
  more.gpus = 128;
  EXPECT_EQ(apply_change(base, more, cat()).num_nodes, 16);
  HardwareChange nic;
  nic.nic_gbit_per_s = 800;
  EXPECT_DOUBLE_EQ(apply_change(base, nic, cat()).inter_node_bandwidth_per_gpu().value(), 100e9);
  HardwareChange hbm;
  hbm.hbm_gib = 192;
  EXPECT_EQ(apply_change(base, hbm, cat()).gpu().hbm_capacity, core::gibibytes(192));
  HardwareChange nodes;
  nodes.gpus_per_node = 4;
  const auto four = apply_change(base, nodes, cat());
  EXPECT_EQ(four.num_nodes, 16);
  EXPECT_EQ(four.node.nics_per_node, 4);
  HardwareChange bad;
  bad.gpus = 100;
  EXPECT_THROW(apply_change(base, bad, cat()), core::ConfigError);
}

TEST(WhatIf, RescaleKeepsModelParallelism) {
  const spec::ParallelConfig p{.tp = 8, .dp = 8, .pp = 2, .global_batch = 64};
  EXPECT_EQ(rescale(p, 256)->dp, 16);
  EXPECT_FALSE(rescale(p, 24));
}

TEST(WhatIf, SweepParsing) {
  const auto [key, values] = parse_sweep("nic-gbps=100,200,400");
  EXPECT_EQ(key, SweepKey::kNicGbps);
  EXPECT_EQ(values, (std::vector<double>{100, 200, 400}));
  EXPECT_THROW(parse_sweep("nic=100"), core::ConfigError);
  EXPECT_THROW(parse_sweep("gpus=8,x"), core::ConfigError);
  EXPECT_THROW(parse_sweep("gpus"), core::ConfigError);
}

// More network bandwidth never makes the best plan slower: every plan only gets faster, and the
// search may find a better one.
TEST(WhatIf, BestPlanImprovesWithBandwidth) {
  const auto model = spec::find_catalog_model("llama3-8b")->spec;
  const auto base = cat().cluster_for_gpu("h100", 32, "--gpu");
  SearchOptions o;
  o.global_batch = 64;
  o.seq_len = 4096;
  const auto points = sweep(model, base, {"h100"}, SweepKey::kNicGbps, {50, 100, 200, 400}, o, cat());
  ASSERT_EQ(points.size(), 4u);
  for (std::size_t i = 1; i < points.size(); ++i) {
    ASSERT_TRUE(points[i].best && points[i - 1].best);
    EXPECT_LE(points[i].best->estimate.time.total().value(), points[i - 1].best->estimate.time.total().value() * (1 + 1e-9));
  }
}

}  // namespace
}  // namespace cpt::planner

#include "planner/advise.h"

namespace cpt::planner {
namespace {

TEST(Advise, FamiliesAreSearchedAndTheWinnerIsTheFastest) {
  const auto model = spec::find_catalog_model("llama2-7b")->spec;
  const auto cluster = cat().cluster_for_gpu("a100", 16, "--gpu");
  SearchOptions o;
  o.global_batch = 64;
  o.seq_len = 4096;
  const auto a = advise(model, cluster, o);
  ASSERT_EQ(a.families.size(), 4u);
  EXPECT_EQ(a.families[0].family, "ZeRO-2");
  EXPECT_EQ(a.families[3].family, "3D (Megatron)");
  ASSERT_GE(a.winner, 0);
  for (const auto& f : a.families) {
    if (!f.best) continue;
    EXPECT_LE(f.best->estimate.tokens_per_s_per_gpu,
              a.families[static_cast<std::size_t>(a.winner)].best->estimate.tokens_per_s_per_gpu);
  }
  ASSERT_TRUE(a.families[0].best);
  EXPECT_EQ(a.families[0].best->config.zero_stage, 2);
  EXPECT_EQ(a.families[0].best->config.tp * a.families[0].best->config.pp, 1);
  if (a.families[3].best) {
    const auto& p = a.families[3].best->config;
    EXPECT_GT(p.tp * p.pp * p.cp, 1);
  }
  EXPECT_FALSE(a.reason.empty());
  // On one node, HSDP is the same as ZeRO-3 and is not offered.
  const auto one = advise(model, cat().cluster_for_gpu("a100", 8, "--gpu"), o);
  EXPECT_FALSE(one.families[2].best);
  EXPECT_EQ(one.families[2].why_not, "redundant");
}

}  // namespace
}  // namespace cpt::planner
