#include "core/check.h"

#include <gtest/gtest.h>

namespace cpt::core {
namespace {

TEST(Check, PassingCheckDoesNothing) { EXPECT_NO_THROW(CPT_CHECK(1 + 1 == 2, "never shown")); }

TEST(Check, FailingCheckThrowsInternalErrorWithPlaceAndMessage) {
  const int stage = 5;
  const int num_stages = 4;
  try {
    CPT_CHECK(stage < num_stages, "stage ", stage, " of ", num_stages);
    FAIL() << "CPT_CHECK did not throw";
  } catch (const InternalError& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("check_test.cpp:"), std::string::npos) << what;
    EXPECT_NE(what.find("check failed: stage < num_stages: stage 5 of 4"), std::string::npos) << what;
    EXPECT_EQ(e.exit_code(), kExitInternal);
  }
}

TEST(Check, ExitCodesPerErrorCategory) {
  EXPECT_EQ(ConfigError("x").exit_code(), 2);
  EXPECT_EQ(RuntimeError("x").exit_code(), 3);
  EXPECT_EQ(InternalError("x").exit_code(), 1);
}

}  // namespace
}  // namespace cpt::core
