#include "costmodel/topology.h"

#include <gtest/gtest.h>

#include "spec/hardware_catalog.h"

namespace cpt::cost {
namespace {

const spec::HardwareCatalog& cat() { return spec::HardwareCatalog::builtin(); }

TEST(Topology, GraphHasEveryDevice) {
  // 4 DGX H100: 32 GPUs, 4 hubs, 32 NICs, 8 rail leaves (one per NIC index), 1 spine.
  const Topology t(cat().cluster_for_gpu("h100", 32, "--gpu"));
  EXPECT_EQ(t.num_vertices(), 32 + 4 + 32 + 8 + 1);
}

TEST(Topology, TensorGroupsUseNvLinkAndDataGroupsTheirOwnNic) {
  const auto c = cat().cluster_for_gpu("h100", 32, "--gpu");
  const Topology t(c);
  const spec::RankLayout layout(spec::ParallelConfig{.tp = 8, .dp = 4}, 8);
  const auto tp = t.place(layout, spec::Axis::kTp);
  EXPECT_EQ(tp.nodes, 1);
  EXPECT_EQ(tp.ranks_per_node, 8);
  EXPECT_DOUBLE_EQ(tp.intra.bandwidth.value(), 450e9);
  const auto dp = t.place(layout, spec::Axis::kDp);
  EXPECT_EQ(dp.nodes, 4);
  EXPECT_EQ(dp.ranks_per_node, 1);
  EXPECT_DOUBLE_EQ(dp.inter.bandwidth.value(), 50e9);      // NDR 400 Gb/s: one NIC per GPU, no sharing
  EXPECT_DOUBLE_EQ(dp.inter.latency.value(), 5e-6);        // NIC-leaf-NIC, same rail
}

// The dp × cp replica groups (gradients, ZeRO shards) are placed as RankLayout::replica_group
// lists them, in the default axis order (cp and dp adjacent: one strided group) and in one that
// puts pp between them.
TEST(Topology, ReplicaGroupsSpanDataAndContextRanks) {
  const auto c = cat().cluster_for_gpu("h100", 32, "--gpu");
  const Topology t(c);
  const spec::RankLayout adjacent(spec::ParallelConfig{.tp = 4, .cp = 2, .dp = 4}, 8);
  const auto r = t.place_replicas(adjacent);
  EXPECT_EQ(r.size, 8);
  EXPECT_EQ(r.nodes, adjacent.nodes_spanned(0, spec::Axis::kDp));  // {0,4} on node 0, {8,12} on 1, ...
  EXPECT_EQ(r.nodes, 4);
  EXPECT_EQ(r.ranks_per_node, 2);
  EXPECT_DOUBLE_EQ(r.intra.bandwidth.value(), 450e9);

  spec::ParallelConfig apart{.cp = 2, .dp = 2, .pp = 8};
  apart.axis_order = {spec::Axis::kTp, spec::Axis::kCp, spec::Axis::kPp, spec::Axis::kDp};
  const spec::RankLayout layout(apart, 8);  // replicas of rank 0: {0, 1, 16, 17}
  ASSERT_EQ(layout.replica_group(0), (std::vector<int>{0, 1, 16, 17}));
  const auto g = t.place_replicas(layout);
  EXPECT_EQ(g.size, 4);
  EXPECT_EQ(g.nodes, 2);
  EXPECT_EQ(g.ranks_per_node, 2);
  // dp inner of cp (order tp, dp, pp, cp): replicas of rank 0 are {0, 1, 8, 9} (dp stride 1, cp
  // stride 8), two runs of two on nodes 0 and 1.
  spec::ParallelConfig swapped{.cp = 2, .dp = 2, .pp = 4};
  swapped.axis_order = {spec::Axis::kTp, spec::Axis::kDp, spec::Axis::kPp, spec::Axis::kCp};
  const spec::RankLayout dp_inner(swapped, 8);
  ASSERT_EQ(dp_inner.replica_group(0), (std::vector<int>{0, 1, 8, 9}));
  const auto s = t.place_replicas(dp_inner);
  EXPECT_EQ(s.size, 4);
  EXPECT_EQ(s.nodes, 2);
  EXPECT_EQ(s.ranks_per_node, 2);
  // Without context parallelism the replicas are the dp group.
  const spec::RankLayout plain(spec::ParallelConfig{.tp = 8, .dp = 4}, 8);
  EXPECT_EQ(t.place_replicas(plain).nodes, t.place(plain, spec::Axis::kDp).nodes);
  EXPECT_EQ(t.place_replicas(plain).size, 4);
}

// PCIe servers with one NIC per two GPUs: eight concurrent cross-node rings share four NICs.
TEST(Topology, SharedNicsHalveTheBandwidth) {
  const auto c = cat().cluster_for_gpu("a100-pcie-80g", 16, "--gpu");
  const Topology t(c);
  const spec::RankLayout layout(spec::ParallelConfig{.dp = 16}, 8);
  const auto dp = t.place(layout, spec::Axis::kDp);
  EXPECT_EQ(dp.ranks_per_node, 8);
  EXPECT_DOUBLE_EQ(dp.inter.bandwidth.value(), 12.5e9);  // 25 GB/s HDR NIC shared by two flows
  EXPECT_DOUBLE_EQ(dp.intra.bandwidth.value(), 32e9);    // PCIe Gen4
}

// An oversubscribed, non-rail-optimised fabric: rings that leave their leaf share its uplink.
TEST(Topology, OversubscribedUplinksLimitCrossLeafRings) {
  spec::ClusterSpec c = cat().cluster_for_gpu("h100", 64, "--gpu");
  c.fabric = cat().fabric("ib_ndr_400g_2to1", "--fabric");  // 32 down ports per leaf: 4 nodes a leaf
  const Topology t(c);
  const spec::RankLayout layout(spec::ParallelConfig{.dp = 64}, 8);  // 8 per node, 8 nodes, 2 leaves
  const auto dp = t.place(layout, spec::Axis::kDp);
  EXPECT_EQ(dp.nodes, 8);
  // 8 rings each cross between the two leaves twice (there and back): per direction 8 flows on an
  // uplink of 32·50 GB/s / 2 = 800 GB/s -> 100 GB/s each, above the 50 GB/s NIC: NIC-bound.
  EXPECT_DOUBLE_EQ(dp.inter.bandwidth.value(), 50e9);
}

}  // namespace
}  // namespace cpt::cost
