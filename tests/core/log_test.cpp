#include "core/log.h"

#include <gtest/gtest.h>

#include "core/error.h"

namespace cpt::core {
namespace {

TEST(Log, LevelsParseAndFilter) {
  EXPECT_EQ(parse_log_level("debug", "--log-level"), LogLevel::kDebug);
  EXPECT_EQ(parse_log_level("warn", "--log-level"), LogLevel::kWarn);
  EXPECT_EQ(parse_log_level("warning", "--log-level"), LogLevel::kWarn);
  try {
    parse_log_level("loud", "--log-level");
    FAIL();
  } catch (const ConfigError& e) {
    EXPECT_STREQ(e.what(), "--log-level: expected one of debug|info|warn|error|off, got \"loud\"");
  }
}

TEST(Log, LinesCarryTheRankPrefix) {
  set_log_level(LogLevel::kInfo);
  set_log_prefix("r3 tp1 pp0 dp1", false);
  testing::internal::CaptureStderr();
  info("loaded ", 2, " files");
  info0("only rank 0 says this");
  debug("filtered out");
  const auto err = testing::internal::GetCapturedStderr();
  EXPECT_EQ(err, "[r3 tp1 pp0 dp1] info: loaded 2 files\n");
  set_log_prefix("", true);
  testing::internal::CaptureStderr();
  info0("rank 0 speaks");
  EXPECT_EQ(testing::internal::GetCapturedStderr(), "info: rank 0 speaks\n");
}

}  // namespace
}  // namespace cpt::core
