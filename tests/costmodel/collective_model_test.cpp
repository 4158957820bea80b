#include "costmodel/collective_model.h"

#include <gtest/gtest.h>

#include "spec/hardware_catalog.h"

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

}  // namespace
}  // namespace cpt::cost
