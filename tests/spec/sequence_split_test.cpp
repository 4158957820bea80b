#include "spec/sequence_split.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <numeric>

#include "spec/rank_layout.h"

namespace cpt::spec {
namespace {

TEST(SequenceSplit, TheExampleOfTheHeader) {
  EXPECT_EQ(sequence_positions_of_rank(8, 2, 0), (std::vector<std::int64_t>{0, 1, 6, 7}));
  EXPECT_EQ(sequence_positions_of_rank(8, 2, 1), (std::vector<std::int64_t>{2, 3, 4, 5}));
  // Gathered rows: rank 0's 0 1 6 7, then rank 1's 2 3 4 5.
  EXPECT_EQ(gathered_row_of_position(8, 2), (std::vector<std::int64_t>{0, 1, 4, 5, 6, 7, 2, 3}));
  EXPECT_EQ(sequence_positions_of_rank(5, 1, 0), (std::vector<std::int64_t>{0, 1, 2, 3, 4}));
}

// Every position is held once, and each rank's causal work (Σ of keys visible to its queries) is
// the same.
TEST(SequenceSplit, APartitionWithEqualCausalWork) {
  for (int cp : {2, 3, 4, 8}) {
    const std::int64_t S = 2 * cp * 5;
    std::vector<int> held(static_cast<std::size_t>(S), 0);
    std::int64_t work0 = -1;
    for (int r = 0; r < cp; ++r) {
      const auto pos = sequence_positions_of_rank(S, cp, r);
      EXPECT_EQ(static_cast<std::int64_t>(pos.size()), S / cp);
      std::int64_t work = 0;
      for (auto p : pos) {
        ++held[static_cast<std::size_t>(p)];
        work += p + 1;
      }
      if (work0 < 0) work0 = work;
      EXPECT_EQ(work, work0) << "cp " << cp << " rank " << r;
    }
    EXPECT_TRUE(std::all_of(held.begin(), held.end(), [](int n) { return n == 1; }));
  }
  EXPECT_TRUE(find_sequence_split_error(12, 3) == std::nullopt);
  EXPECT_EQ(*find_sequence_split_error(10, 3),
            "seq_len (10) must be a multiple of 2·cp (6) for the load-balanced context-parallel split");
}

TEST(SequenceShardRuns, TheExampleOfTheHeader) {
  using Runs = std::vector<PositionRun>;
  const auto shards = sequence_shard_runs(12, 2, 3);
  ASSERT_EQ(shards.size(), 6u);
  EXPECT_EQ(shards[0], (Runs{{0, 2}}));
  EXPECT_EQ(shards[1], (Runs{{2, 1}, {9, 1}}));
  EXPECT_EQ(shards[2], (Runs{{10, 2}}));
  EXPECT_EQ(shards[3], (Runs{{3, 2}}));
  EXPECT_EQ(shards[4], (Runs{{5, 1}, {6, 1}}));
  EXPECT_EQ(shards[5], (Runs{{7, 2}}));
  EXPECT_EQ(sequence_shard_runs(8, 1, 2), (std::vector<Runs>{{{0, 4}}, {{4, 4}}}));
  EXPECT_EQ(sequence_shard_runs(8, 2, 1), (std::vector<Runs>{{{0, 2}, {6, 2}}, {{2, 2}, {4, 2}}}));
}

// Each shard's runs, read in order, are its cp rank's positions' slice (the tokens it holds, in
// their order there); their most is max_runs_per_sequence_shard.
TEST(SequenceShardRuns, EachShardsRunsAreItsSliceOfTheContextParallelPositions) {
  for (int cp : {1, 2, 3, 4}) {
    for (int sp : {1, 2, 3, 4, 5, 6}) {
      const std::int64_t S = 2 * cp * sp * 3;
      const auto shards = sequence_shard_runs(S, cp, sp);
      ASSERT_EQ(shards.size(), static_cast<std::size_t>(cp * sp));
      std::size_t most = 0;
      for (int c = 0; c < cp; ++c) {
        const auto positions = sequence_positions_of_rank(S, cp, c);
        std::vector<std::int64_t> held;
        for (int s = 0; s < sp; ++s) {
          const auto& runs = shards[static_cast<std::size_t>(c * sp + s)];
          most = std::max(most, runs.size());
          for (const auto& run : runs) {
            for (std::int64_t i = 0; i < run.length; ++i) held.push_back(run.start + i);
          }
        }
        EXPECT_EQ(held, positions) << "cp " << cp << " sp " << sp << " rank " << c;
      }
      EXPECT_EQ(static_cast<int>(most), max_runs_per_sequence_shard(cp, sp)) << "cp " << cp << " sp " << sp;
    }
  }
}

// The multiple is the smallest length both splits accept: every multiple of it splits, no
// smaller positive length does.
TEST(SequenceLengthMultiple, IsTheSmallestLengthEverySplitAccepts) {
  EXPECT_EQ(sequence_length_multiple(2, 3), 12);  // the header's examples
  EXPECT_EQ(sequence_length_multiple(2, 2), 4);
  EXPECT_EQ(sequence_length_multiple(1, 2), 2);
  for (int cp : {1, 2, 3, 4}) {
    for (int sp : {1, 2, 3, 4, 5, 6}) {
      const auto splits = [&](std::int64_t length) {
        return !find_sequence_split_error(length, cp) && (length / cp) % sp == 0;
      };
      const int multiple = sequence_length_multiple(cp, sp);
      for (std::int64_t length = 1; length <= 4 * multiple; ++length) {
        EXPECT_EQ(splits(length), length % multiple == 0) << "cp " << cp << " sp " << sp << " length " << length;
      }
    }
  }
}

TEST(RankLayoutReplicaGroup, DpTimesCpWithTheSameTpAndPp) {
  ParallelConfig p{.tp = 2, .cp = 2, .dp = 2, .pp = 2};
  const RankLayout l(p, 8);
  for (int r = 0; r < l.world_size(); ++r) {
    const auto g = l.replica_group(r);
    ASSERT_EQ(g.size(), 4u);
    EXPECT_TRUE(std::is_sorted(g.begin(), g.end()));
    EXPECT_NE(std::find(g.begin(), g.end(), r), g.end());
    for (int m : g) {
      EXPECT_EQ(l.coord_of(m).tp, l.coord_of(r).tp);
      EXPECT_EQ(l.coord_of(m).pp, l.coord_of(r).pp);
    }
  }
  EXPECT_EQ(l.zero_shard_group_size(), 4);  // ZeRO shards over dp × cp
  p.hybrid_shard = true;                    // dp 2 of stride 4 on nodes of 8: both dp members on rank 0's node
  EXPECT_EQ(RankLayout(p, 8).zero_shard_group_size(), 4);
  EXPECT_EQ(RankLayout(p, 4).zero_shard_group_size(), 2);  // one dp member per node: cp alone
  p.hybrid_shard = false;
  p.cp = 1;
  p.dp = 4;
  const RankLayout no_cp(p, 8);
  auto dp = no_cp.group_of(3, Axis::kDp);
  std::sort(dp.begin(), dp.end());
  EXPECT_EQ(no_cp.replica_group(3), dp);
}

}  // namespace
}  // namespace cpt::spec
