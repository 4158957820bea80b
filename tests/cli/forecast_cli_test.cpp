// `cpt forecast` through the real binary: a user's first mistakes (the library's behaviour is
// tests/forecast/).
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <string>

#include "cli_test_support.h"

namespace cpt::cli_testing {
namespace {

// Its own scratch directory per process: ctest -j runs tests at once.
Run cpt(const std::string& args) {
  const auto dir = std::filesystem::temp_directory_path() / ("cpt_forecast_cli." + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  return sh(std::string(CPT_BINARY) + " " + args, dir);
}

// A user's first mistakes with `cpt forecast`: one line, exit 2, naming what was wrong.
TEST(ForecastCli, WithoutARunDirectoryItSaysWhatItExpects) {
  const auto missing = cpt("forecast /nonexistent-run");
  EXPECT_EQ(missing.exit_code, 2);
  EXPECT_NE(missing.err.find("/nonexistent-run: not a directory; expected a `cpt train` output directory"),
            std::string::npos)
      << missing.err;
  const auto typo = cpt("forecast /tmp --replya 0.1");
  EXPECT_EQ(typo.exit_code, 2);
  EXPECT_NE(typo.err.find("--replya"), std::string::npos) << typo.err;
}

}  // namespace
}  // namespace cpt::cli_testing
