#include "core/units.h"

#include <gtest/gtest.h>

namespace cpt::core {
namespace {

using namespace literals;

TEST(Units, SameUnitArithmeticKeepsTheUnit) {
  const Bytes a = 3_GiB;
  const Bytes b = 1_GiB;
  EXPECT_EQ((a + b).value(), 4 * kGiB);
  EXPECT_EQ((a - b).value(), 2 * kGiB);
  EXPECT_EQ((a * 2).value(), 6 * kGiB);
  EXPECT_EQ((2 * a).value(), 6 * kGiB);
  EXPECT_EQ((a / 3).value(), kGiB);
  EXPECT_DOUBLE_EQ(a / b, 3.0);
  EXPECT_LT(b, a);
}

TEST(Units, CrossDimensionOperatorsGiveSeconds) {
  // 1 GB over 100 GB/s = 10 ms; 989.4 TFLOP at 989.4 TFLOP/s = 1 s.
  EXPECT_DOUBLE_EQ((1_GB / 100_GB_per_s).value(), 0.01);
  EXPECT_DOUBLE_EQ((Flops(989.4e12) / teraflops_per_second(989.4)).value(), 1.0);
  EXPECT_DOUBLE_EQ((Bytes(1'000'000'000) / Seconds(2.0)).value(), 5e8);
}

TEST(Units, GibibytesAndGigabytesAreDifferentUnits) {
  EXPECT_EQ(gibibytes(80).value(), 85'899'345'920);
  EXPECT_EQ(gigabytes(80).value(), 80'000'000'000);
  EXPECT_EQ(gigabytes(141).value(), 141'000'000'000);
  EXPECT_NEAR(to_gibibytes(gigabytes(141)), 131.3165, 1e-4);  // 141e9 / 2^30
}

TEST(Units, NetworkRatesAreQuotedInBits) {
  EXPECT_DOUBLE_EQ(gigabits_per_second(400).value(), 50e9);
  EXPECT_DOUBLE_EQ(to_gigabits_per_second(gigabytes_per_second(25)), 200.0);
  EXPECT_DOUBLE_EQ(microseconds(5).value(), 5e-6);
  EXPECT_DOUBLE_EQ(to_microseconds(5.0_us), 5.0);
}

TEST(Units, RenderWithTheirUnit) {
  EXPECT_EQ(to_string(80_GiB), "80.00 GiB");
  EXPECT_EQ(to_string(512_MiB), "512.00 MiB");
  EXPECT_EQ(to_string(Seconds(0.00125)), "1.250 ms");
  EXPECT_EQ(to_string(teraflops_per_second(989.4)), "989.4 TFLOP/s");
  EXPECT_EQ(to_string(gigabytes_per_second(3350)), "3350.0 GB/s");
}

}  // namespace
}  // namespace cpt::core
