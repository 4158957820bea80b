#include "spec/rank_layout.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <set>

namespace cpt::spec {
namespace {

// The worked example of rank_layout.h: tp 2, dp 2, pp 2 on nodes of 4 GPUs.
TEST(RankLayout, WorkedExample) {
  const RankLayout l(ParallelConfig{.tp = 2, .dp = 2, .pp = 2}, 4);
  EXPECT_EQ(l.world_size(), 8);
  EXPECT_EQ(l.coord_of(5), (RankCoord{.tp = 1, .dp = 0, .pp = 1}));
  EXPECT_EQ(l.coord_of(6), (RankCoord{.tp = 0, .dp = 1, .pp = 1}));
  EXPECT_EQ(l.groups(Axis::kTp), (std::vector<std::vector<int>>{{0, 1}, {2, 3}, {4, 5}, {6, 7}}));
  EXPECT_EQ(l.groups(Axis::kDp), (std::vector<std::vector<int>>{{0, 2}, {1, 3}, {4, 6}, {5, 7}}));
  EXPECT_EQ(l.groups(Axis::kPp), (std::vector<std::vector<int>>{{0, 4}, {1, 5}, {2, 6}, {3, 7}}));
  EXPECT_EQ(l.max_nodes_spanned(Axis::kTp), 1);
  EXPECT_EQ(l.max_nodes_spanned(Axis::kDp), 1);
  EXPECT_EQ(l.max_nodes_spanned(Axis::kPp), 2);
}

// Over a sweep of degrees and axis orders: coord_of and rank_of are inverse, the groups of every
// axis partition the ranks, every group has size = degree, and members differ only on that axis.
TEST(RankLayout, GroupsPartitionTheRanks) {
  const std::vector<std::array<Axis, 4>> orders = {{Axis::kTp, Axis::kCp, Axis::kDp, Axis::kPp},
                                                   {Axis::kTp, Axis::kCp, Axis::kPp, Axis::kDp},
                                                   {Axis::kPp, Axis::kDp, Axis::kCp, Axis::kTp}};
  int cases = 0;
  for (int tp : {1, 2, 4})
    for (int cp : {1, 2})
      for (int dp : {1, 3, 4})
        for (int pp : {1, 2, 5})
          for (const auto& order : orders) {
            const ParallelConfig c{.tp = tp, .cp = cp, .dp = dp, .pp = pp, .axis_order = order};
            const RankLayout l(c, 8);
            ASSERT_EQ(l.world_size(), tp * cp * dp * pp);
            for (int r = 0; r < l.world_size(); ++r) ASSERT_EQ(l.rank_of(l.coord_of(r)), r);
            for (Axis a : {Axis::kTp, Axis::kCp, Axis::kDp, Axis::kPp}) {
              std::vector<int> seen(static_cast<std::size_t>(l.world_size()), 0);
              for (const auto& g : l.groups(a)) {
                ASSERT_EQ(static_cast<int>(g.size()), c.degree(a));
                for (int r : g) {
                  ++seen[static_cast<std::size_t>(r)];
                  RankCoord x = l.coord_of(r), y = l.coord_of(g.front());
                  x.set(a, 0);
                  y.set(a, 0);
                  ASSERT_EQ(x, y);
                }
              }
              ASSERT_TRUE(std::all_of(seen.begin(), seen.end(), [](int n) { return n == 1; }));
            }
            ++cases;
          }
  EXPECT_EQ(cases, 162);
}

TEST(RankLayout, DefaultOrderKeepsTensorParallelInsideANode) {
  const RankLayout l(ParallelConfig{.tp = 8, .dp = 16, .pp = 4}, 8);
  EXPECT_EQ(l.max_nodes_spanned(Axis::kTp), 1);
  EXPECT_EQ(l.max_nodes_spanned(Axis::kDp), 16);
  const RankLayout bad(ParallelConfig{.tp = 8, .dp = 16, .pp = 4, .axis_order = {Axis::kDp, Axis::kTp, Axis::kCp, Axis::kPp}}, 8);
  EXPECT_EQ(bad.max_nodes_spanned(Axis::kTp), 8);
}

// HSDP: tp 2 x dp 8 on nodes of 4 GPUs -> each dp group spans 4 nodes with 2 members per node.
TEST(RankLayout, HybridShardGroupsStayInsideNodesAndReplicateAcross) {
  const RankLayout l(ParallelConfig{.tp = 2, .dp = 8, .zero_stage = 3, .hybrid_shard = true}, 4);
  for (int r = 0; r < l.world_size(); ++r) {
    const auto shard = l.dp_shard_group(r);
    ASSERT_EQ(shard.size(), 2u);
    for (int s : shard) EXPECT_EQ(l.node_of(s), l.node_of(r));
    const auto rep = l.zero_replicate_group(r);
    ASSERT_EQ(rep.size(), 4u);
    std::set<int> nodes;
    for (int s : rep) nodes.insert(l.node_of(s));
    EXPECT_EQ(nodes.size(), 4u);
    EXPECT_NE(std::find(rep.begin(), rep.end(), r), rep.end());
  }
  EXPECT_EQ(l.dp_shard_group(0), (std::vector<int>{0, 2}));
  EXPECT_EQ(l.zero_replicate_group(0), (std::vector<int>{0, 4, 8, 12}));
  EXPECT_EQ(l.zero_shard_group(0), l.dp_shard_group(0));  // cp 1: the dp shard group
  // Without hybrid sharding the shard group is the whole dp group.
  const RankLayout flat(ParallelConfig{.tp = 2, .dp = 8, .zero_stage = 3}, 4);
  EXPECT_EQ(flat.dp_shard_group(0).size(), 8u);
  EXPECT_EQ(flat.zero_replicate_group(0), std::vector<int>{0});
  EXPECT_FALSE(l.find_hybrid_shard_error());
}

// dp 3 on nodes of 2 GPUs: dp group {0,1,2} has 2 ranks on node 0 and 1 on node 1.
TEST(RankLayout, HybridShardNeedsEvenSplits) {
  const RankLayout l(ParallelConfig{.dp = 3, .zero_stage = 3, .hybrid_shard = true}, 2);
  EXPECT_EQ(*l.find_hybrid_shard_error(),
            "hybrid_shard needs the same number of dp ranks on every node of a dp group; dp group of rank 0 has 2 on "
            "node 0 and 1 on node 1");
}

// Hybrid sharding with context parallelism: cp 2 × dp 4 on nodes of 4 (order tp, cp, dp, pp): each
// node holds two cp pairs of two dp ranks; ZeRO-3 shards over those four and replicates across the
// two nodes. A cp group across nodes cannot shard hybridly.
TEST(RankLayout, HybridShardWithContextParallelShardsOverTheNodesReplicas) {
  ParallelConfig p;
  p.cp = 2;
  p.dp = 4;
  p.zero_stage = 3;
  p.hybrid_shard = true;
  const RankLayout l(p, 4);
  EXPECT_EQ(l.zero_shard_group(0), (std::vector<int>{0, 1, 2, 3}));
  EXPECT_EQ(l.zero_shard_group(5), (std::vector<int>{4, 5, 6, 7}));
  EXPECT_EQ(l.zero_replicate_group(1), (std::vector<int>{1, 5}));
  EXPECT_EQ(static_cast<int>(l.zero_shard_group(0).size()), l.zero_shard_group_size());
  EXPECT_FALSE(l.find_hybrid_shard_error());
  for (int r = 0; r < l.world_size(); ++r) {  // shard × replicate = the replica group, every rank once
    std::vector<int> all;
    for (int s : l.zero_shard_group(r)) {
      for (int x : l.zero_replicate_group(s)) all.push_back(x);
    }
    std::sort(all.begin(), all.end());
    EXPECT_EQ(all, l.replica_group(r));
  }
  p.hybrid_shard = false;
  EXPECT_EQ(RankLayout(p, 4).zero_shard_group(0), RankLayout(p, 4).replica_group(0));
  EXPECT_EQ(RankLayout(p, 4).zero_replicate_group(3), std::vector<int>{3});
  p.hybrid_shard = true;
  p.axis_order = {Axis::kTp, Axis::kDp, Axis::kCp, Axis::kPp};  // cp outermost but pp: cp 2 of stride 4
  EXPECT_EQ(*RankLayout(p, 4).find_hybrid_shard_error(),
            "hybrid_shard with cp 2 needs every cp group inside one node; cp group of rank 0 spans 2 nodes");
}

}  // namespace
}  // namespace cpt::spec
