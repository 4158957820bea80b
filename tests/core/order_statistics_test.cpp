#include "core/order_statistics.h"

#include <gtest/gtest.h>

#include <cmath>

namespace cpt::core {
namespace {

// The median of odd and even counts in any order; nearest-rank quantiles at the ends and between.
TEST(OrderStatistics, MedianAndNearestRankQuantile) {
  EXPECT_DOUBLE_EQ(median({5, 1, 3}), 3);
  EXPECT_DOUBLE_EQ(median({4, 1, 3, 2}), 2.5);
  EXPECT_DOUBLE_EQ(median({7}), 7);
  EXPECT_TRUE(std::isnan(median({})));
  const std::vector<double> ten{10, 9, 8, 7, 6, 5, 4, 3, 2, 1};
  EXPECT_DOUBLE_EQ(nearest_rank_quantile(ten, 0.0), 1);
  EXPECT_DOUBLE_EQ(nearest_rank_quantile(ten, 0.5), 5);    // the 5th smallest
  EXPECT_DOUBLE_EQ(nearest_rank_quantile(ten, 0.9), 9);    // the 9th
  EXPECT_DOUBLE_EQ(nearest_rank_quantile(ten, 0.91), 10);  // ⌈9.1⌉ = 10th
  EXPECT_DOUBLE_EQ(nearest_rank_quantile(ten, 1.0), 10);
  EXPECT_TRUE(std::isnan(nearest_rank_quantile({}, 0.5)));
  // Linear: position q·(n − 1) among the sorted values, interpolated.
  EXPECT_DOUBLE_EQ(linear_quantile(ten, 0.0), 1);
  EXPECT_DOUBLE_EQ(linear_quantile(ten, 0.5), 5.5);  // between the 5th and 6th
  EXPECT_DOUBLE_EQ(linear_quantile(ten, 0.1), 1.9);  // position 0.9
  EXPECT_DOUBLE_EQ(linear_quantile(ten, 1.0), 10);
  EXPECT_DOUBLE_EQ(linear_quantile({4}, 0.3), 4);
  EXPECT_TRUE(std::isnan(linear_quantile({}, 0.5)));
}

}  // namespace
}  // namespace cpt::core
