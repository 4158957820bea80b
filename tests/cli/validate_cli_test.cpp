// `cpt validate` through the real binary: the published runs' sample, Korthikanti's Table 5, and
// what a user gets wrong (the library's checks are tests/planner/validation_test.cpp and
// paper_runs_test.cpp).
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>

#include "tests/cli/cli_test_support.h"

namespace cpt::cli_testing {
namespace {

// Its own scratch directory per process: ctest -j runs tests at once.
Run cpt(const std::string& args) {
  const auto dir = std::filesystem::temp_directory_path() / ("cpt_validate_cli." + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  return sh(std::string(CPT_BINARY) + " " + args, dir);
}

TEST(ValidateCli, ReportsTheErrorPerSource) {
  const std::string sample = std::string(CPT_SOURCE_DIR) + "/tests/golden/published_runs_sample.jsonl";
  const auto r = cpt("validate --runs " + sample + " --json");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["rows"].size(), 5u);
  EXPECT_EQ(j["groups"].back()["group"], "all");
  EXPECT_EQ(j["groups"].back()["compared"], 3);
  const auto table = cpt("validate --runs " + sample + " --rows");
  ASSERT_EQ(table.exit_code, 0) << table.err;
  EXPECT_NE(table.out.find("predicted_out_of_memory"), std::string::npos);
  EXPECT_NE(table.out.find("llm-foundry A100-40GB bf16"), std::string::npos);
  const auto missing = cpt("validate --runs /nonexistent/runs.jsonl");
  EXPECT_EQ(missing.exit_code, 2);
  EXPECT_EQ(lines(missing.err), 1) << missing.err;
  const auto bad = cpt("validate --runs " + write_temp("cpt_validate_bad.jsonl", "{\"id\": 3}\n").string());
  EXPECT_EQ(bad.exit_code, 2);
  EXPECT_NE(bad.err.find("cpt_validate_bad.jsonl:1"), std::string::npos) << bad.err;
  // The published runs and Korthikanti's Table 5 in one report, each group apart.
  const auto both = cpt("validate --runs " + sample + " --korthikanti --json");
  ASSERT_EQ(both.exit_code, 0) << both.err;
  const auto groups = nlohmann::json::parse(both.out)["groups"];
  ASSERT_GE(groups.size(), 2u);
  EXPECT_EQ(groups[groups.size() - 2]["group"], "Korthikanti Table 5 A100-80GB bf16");
  EXPECT_EQ(groups[groups.size() - 2]["compared"], 8);
  EXPECT_LT(groups[groups.size() - 2]["mean_absolute_error"].get<double>(), 0.06);
  const auto none = cpt("validate");
  EXPECT_EQ(none.exit_code, 2);
  EXPECT_NE(none.err.find("--korthikanti"), std::string::npos) << none.err;
  const auto no_vtrain = cpt("validate --vtrain /nonexistent");
  EXPECT_EQ(no_vtrain.exit_code, 2);
  EXPECT_NE(no_vtrain.err.find("/nonexistent: expected vTrain's directory"), std::string::npos) << no_vtrain.err;
  // A file where a directory belongs, and an empty runs file, are refused in one line too.
  const auto file = cpt("validate --vtrain " + sample);
  EXPECT_EQ(file.exit_code, 2);
  EXPECT_NE(file.err.find("found a file"), std::string::npos) << file.err;
  const auto empty = cpt("validate --runs " + write_temp("cpt_validate_empty.jsonl", "\n").string());
  EXPECT_EQ(empty.exit_code, 2);
  EXPECT_EQ(lines(empty.err), 1) << empty.err;
}

}  // namespace
}  // namespace cpt::cli_testing
