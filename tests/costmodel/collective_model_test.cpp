#include "costmodel/collective_model.h"

#include <gtest/gtest.h>

#include "costmodel/topology.h"
#include "spec/hardware_catalog.h"
#include "spec/rank_layout.h"

namespace cpt::cost {
namespace {

using core::Bytes;
using core::BytesPerSecond;
using core::Seconds;

// Readable constants: B = 100 GB/s, α = 1 µs, S = 1 GB, efficiency 1.
const LinkCost kLink{BytesPerSecond(100e9), Seconds(1e-6)};

TEST(CollectiveModel, RingFormulasInsideANode) {
  const GroupPlacement g{8, 1, 8, kLink, {}};
  // all-reduce: 2·(7/8)·1 GB / 100 GB/s + 14 µs = 17.5 ms + 14 µs
  EXPECT_NEAR(collective_time(Collective::kAllReduce, Bytes(1'000'000'000), g, 1.0).value(), 0.0175 + 14e-6, 1e-12);
  // all-gather: (7/8)·10 ms + 7 µs
  EXPECT_NEAR(collective_time(Collective::kAllGather, Bytes(1'000'000'000), g, 1.0).value(), 0.00875 + 7e-6, 1e-12);
  EXPECT_EQ(collective_time(Collective::kAllReduce, Bytes(1'000'000'000), GroupPlacement{}, 1.0).value(), 0.0);
}

TEST(CollectiveModel, TreeWinsForSmallMessages) {
  const GroupPlacement g{64, 1, 64, kLink, {}};
  // 1 KB: ring 2·63 µs of latency; tree 2·6 µs + 2·10 ns.
  EXPECT_NEAR(collective_time(Collective::kAllReduce, Bytes(1000), g, 1.0).value(), 12e-6 + 2e-8, 1e-12);
}

TEST(CollectiveModel, TwoLevelAcrossNodes) {
  // 4 nodes x 8 ranks: RS inside (7/8·S/B_intra), AR of S/8 across 4 nodes, AG inside.
  const LinkCost intra{BytesPerSecond(400e9), Seconds(0)};
  const LinkCost inter{BytesPerSecond(50e9), Seconds(0)};
  const GroupPlacement g{32, 4, 8, intra, inter};
  const double S = 1.6e9;
  const double expected = 2 * (7.0 / 8) * S / 400e9 + 2 * (3.0 / 4) * (S / 8) / 50e9;
  EXPECT_NEAR(collective_time(Collective::kAllReduce, Bytes(1'600'000'000), g, 1.0).value(), expected, 1e-12);
  EXPECT_NEAR(p2p_time(Bytes(50'000'000), inter, 1.0).value(), 1e-3, 1e-12);
}

// A node that measured its calls apart (spec::NodeSpec::intra_measured, as `cpt calibrate` writes
// for Gloo): each call's α and B scale the node's intra link by its ratio to the node's own, in
// the collectives of a group inside the node and in a point-to-point inside it; calls it did not
// measure keep the link; between nodes nothing changes.
TEST(CollectiveModel, MeasuredCallsScaleTheIntraNodeLink) {
  auto cluster = spec::HardwareCatalog::builtin().cluster_for_gpu("h100", 16, "--gpu");
  auto& node = cluster.node;
  const double B = node.intra_bandwidth.value(), a = node.intra_latency.value();
  using spec::LinkCall;
  node.intra_measured[static_cast<std::size_t>(LinkCall::kReduceScatter)] =
      spec::MeasuredLink{Seconds(3 * a), BytesPerSecond(B / 2)};
  node.intra_measured[static_cast<std::size_t>(LinkCall::kSendRecv)] = spec::MeasuredLink{Seconds(a / 10), BytesPerSecond(B)};
  const Topology measured(cluster), plain(spec::HardwareCatalog::builtin().cluster_for_gpu("h100", 16, "--gpu"));
  const spec::ParallelConfig p{.tp = 8, .dp = 2};
  const spec::RankLayout layout(p, 8);
  const auto tp = measured.place(layout, spec::Axis::kTp), tp_plain = plain.place(layout, spec::Axis::kTp);
  const Bytes S(80'000'000);
  const double n = 8, frac = (n - 1) / n;
  const double B_ring = tp_plain.intra.bandwidth.value(), a_ring = tp_plain.intra.latency.value();
  EXPECT_NEAR(collective_time(Collective::kReduceScatter, S, tp, 1.0).value(),
              frac * 8e7 / (B_ring / 2) + (n - 1) * 3 * a_ring, 1e-12);
  EXPECT_DOUBLE_EQ(collective_time(Collective::kAllGather, S, tp, 1.0).value(),
                   collective_time(Collective::kAllGather, S, tp_plain, 1.0).value());
  const auto inside = measured.p2p(0, 1, 8), inside_plain = plain.p2p(0, 1, 8);
  EXPECT_NEAR(inside.latency.value(), inside_plain.latency.value() / 10, 1e-15);
  EXPECT_DOUBLE_EQ(inside.bandwidth.value(), inside_plain.bandwidth.value());
  const auto across = measured.p2p(0, 8, 8), across_plain = plain.p2p(0, 8, 8);
  EXPECT_DOUBLE_EQ(across.latency.value(), across_plain.latency.value());
  // Across nodes the data-parallel pair is untouched.
  EXPECT_DOUBLE_EQ(collective_time(Collective::kReduceScatter, S, measured.place(layout, spec::Axis::kDp), 1.0).value(),
                   collective_time(Collective::kReduceScatter, S, plain.place(layout, spec::Axis::kDp), 1.0).value());
}

}  // namespace
}  // namespace cpt::cost
