#include "spec/stage_partition.h"

#include <gtest/gtest.h>

#include "core/error.h"

namespace cpt::spec {
namespace {

TEST(StagePartition, EvenSplit) {
  const auto p = StagePartition::balanced(32, 4, 1);
  EXPECT_EQ(p.layers_per_stage(), (std::vector<int>{8, 8, 8, 8}));
  EXPECT_EQ(p.first_layer(2), 16);
  EXPECT_EQ(p.stage_of_layer(31), 3);
}

TEST(StagePartition, ExtraLayersGoToInnerStagesFirst) {
  // Llama 3.1 405B: 126 layers over 16 stages -> 14 stages of 8 and 2 of 7; the ends get 7.
  const auto p = StagePartition::balanced(126, 16, 1);
  EXPECT_EQ(p.layers_in(0), 7);
  EXPECT_EQ(p.layers_in(15), 7);
  for (int s = 1; s < 15; ++s) EXPECT_EQ(p.layers_in(s), 8);
  EXPECT_EQ(p.num_layers(), 126);
  EXPECT_EQ(StagePartition::balanced(5, 2, 1).layers_per_stage(), (std::vector<int>{3, 2}));
}

TEST(StagePartition, InterleavedStagesMapToRanksRoundRobin) {
  // The example in stage_partition.h: pp 2, v 2, 8 layers.
  const auto p = StagePartition::balanced(8, 2, 2);
  EXPECT_EQ(p.num_stages(), 4);
  EXPECT_EQ(p.stages_of_rank(0), (std::vector<int>{0, 2}));
  EXPECT_EQ(p.stages_of_rank(1), (std::vector<int>{1, 3}));
  EXPECT_EQ(p.first_layer(2), 4);
  EXPECT_EQ(p.pp_rank_of(3), 1);
  EXPECT_EQ(p.chunk_of(3), 1);
  EXPECT_EQ(p.layers_of_rank(0), 4);
}

TEST(StagePartition, ClosedFormsMatchTheContractOrder) {
  // The contract: extra layers go to stages 1, 2, ..., S-2, then 0, then S-1, one each.
  for (int layers = 1; layers <= 40; ++layers) {
    for (int pp = 1; pp <= 8; ++pp) {
      for (int v = 1; v <= 4 && pp * v <= layers; ++v) {
        const int S = pp * v;
        std::vector<int> expected(static_cast<std::size_t>(S), layers / S);
        std::vector<int> order;
        for (int s = 1; s + 1 < S; ++s) order.push_back(s);
        order.push_back(0);
        if (S > 1) order.push_back(S - 1);
        int extra = layers % S;
        for (int s : order) {
          if (extra-- > 0) ++expected[static_cast<std::size_t>(s)];
        }
        const auto p = StagePartition::balanced(layers, pp, v);
        EXPECT_EQ(p.layers_per_stage(), expected) << layers << " " << pp << " " << v;
        for (int s = 0; s < S; ++s) {
          EXPECT_EQ(StagePartition::balanced_first_layer(layers, pp, v, s), p.first_layer(s)) << layers << " " << S;
        }
      }
    }
  }
}

TEST(StagePartition, ARanksRangesAreItsChunksInOrder) {
  // pp 2, v 2, 9 layers: stages [0,2) [2,5) [5,7) [7,9) (stage 1 takes the extra one).
  const auto zero = StagePartition::balanced_ranges_of_rank(9, 2, 2, 0);
  ASSERT_EQ(zero.size(), 2u);
  EXPECT_EQ(zero[0].first, 0);
  EXPECT_EQ(zero[0].count, 2);
  EXPECT_EQ(zero[1].first, 5);
  EXPECT_EQ(zero[1].count, 2);
  for (int layers = 4; layers <= 24; ++layers) {
    for (int pp = 1; pp <= 4; ++pp) {
      for (int v = 1; v <= 3 && pp * v <= layers; ++v) {
        const auto p = StagePartition::balanced(layers, pp, v);
        for (int r = 0; r < pp; ++r) {
          const auto ranges = StagePartition::balanced_ranges_of_rank(layers, pp, v, r);
          const auto stages = p.stages_of_rank(r);
          ASSERT_EQ(ranges.size(), stages.size());
          for (std::size_t c = 0; c < ranges.size(); ++c) {
            EXPECT_EQ(ranges[c].first, p.first_layer(stages[c])) << layers << " " << pp << " " << v << " " << r;
            EXPECT_EQ(ranges[c].count, p.layers_in(stages[c])) << layers << " " << pp << " " << v << " " << r;
          }
        }
      }
    }
  }
}

TEST(StagePartition, ExplicitListsAreChecked) {
  EXPECT_FALSE(StagePartition::find_error({3, 5}, 8, 2, 1));
  EXPECT_EQ(*StagePartition::find_error({3, 5}, 8, 4, 1), "2 entries for pp (4) * virtual_stages (1) = 4 stages");
  EXPECT_EQ(*StagePartition::find_error({0, 8}, 8, 2, 1), "stage 0 must hold >= 1 layer, got 0");
  EXPECT_EQ(*StagePartition::find_error({4, 5}, 8, 2, 1), "layers per stage sum to 9, the model has 8");
  EXPECT_EQ(StagePartition::from_list({3, 5}, 2, 1).layers_in(1), 5);
  EXPECT_THROW(StagePartition::balanced(2, 4, 1), core::InternalError);
}

}  // namespace
}  // namespace cpt::spec
