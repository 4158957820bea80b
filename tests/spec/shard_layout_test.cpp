#include "spec/shard_layout.h"

#include <gtest/gtest.h>

namespace cpt::spec {
namespace {

TEST(ShardLayout, WorkedExample) {
  const ShardLayout l(10, 4);
  EXPECT_EQ(l.padded_size(), 12);
  EXPECT_EQ(l.slice(0), (ShardSlice{0, 3}));
  EXPECT_EQ(l.slice(3), (ShardSlice{9, 3}));
  EXPECT_EQ(l.unpadded_slice(3), (ShardSlice{9, 1}));
}

// Over a sweep, the slices tile [0, padded) without gap or overlap, are equal and aligned, and the
// unpadded parts tile [0, num_elements) exactly.
TEST(ShardLayout, SlicesReassembleTheBuffer) {
  for (std::int64_t n : {0, 1, 7, 64, 1000, 123457})
    for (int g : {1, 2, 3, 8, 64})
      for (std::int64_t align : {1, 4, 64}) {
        const ShardLayout l(n, g, align);
        std::int64_t next = 0;
        std::int64_t real = 0;
        for (int i = 0; i < g; ++i) {
          const auto s = l.slice(i);
          ASSERT_EQ(s.offset, next);
          ASSERT_EQ(s.size, l.shard_size());
          ASSERT_EQ(s.offset % align, 0);
          next += s.size;
          const auto u = l.unpadded_slice(i);
          if (u.size > 0) {
            ASSERT_EQ(u.offset, real);
          }
          real += u.size;
        }
        ASSERT_EQ(next, l.padded_size());
        ASSERT_EQ(real, n);
        ASSERT_GE(l.padded_size(), n);
        ASSERT_LT(l.padded_size() - n, static_cast<std::int64_t>(g) * align) << n << " " << g << " " << align;
      }
}

TEST(ShardLayout, ZeroStagesShardCumulatively) {
  EXPECT_FALSE(zero_sharding(0).optimizer_state);
  EXPECT_TRUE(zero_sharding(1).optimizer_state);
  EXPECT_FALSE(zero_sharding(1).gradients);
  EXPECT_TRUE(zero_sharding(2).gradients);
  EXPECT_FALSE(zero_sharding(2).parameters);
  EXPECT_TRUE(zero_sharding(3).parameters);
}

}  // namespace
}  // namespace cpt::spec
