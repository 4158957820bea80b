// `cpt run`, the demo behind `make run` (cli/cpt/cmd_run.cpp), end to end and shortened.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

#include "cli_test_support.h"

namespace cpt {
namespace {

// `cpt run --out DIR/out` with `steps` continual steps, 24 base steps and its cache in DIR/cache.
cli_testing::Run run_demo(const std::filesystem::path& dir, const std::string& out, int steps) {
  return cli_testing::sh("CPT_DEPS_DIR=" + (dir / "cache").string() + " " + std::string(CPT_BINARY) + " run --out " +
                             (dir / out).string() + " --steps " + std::to_string(steps) +
                             " --base-steps 24 --add-tokens 16",
                         dir);
}

// The demo behind `make run`, shortened: every stage runs (probe, base model into a fresh cache,
// vocabulary extension, plan written and read back, continual run with replay and KL) and the
// summary holds the keys with sane values.
TEST(CliSmoke, RunDemoEndToEnd) {
  const auto dir = std::filesystem::temp_directory_path() / "cpt_cli_run_demo";
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  const auto r = run_demo(dir, "out", 12);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  for (const char* stage : {"[1/6]", "[2/6]", "[3/6]", "[4/6]", "[5/6]", "[6/6]"}) {
    EXPECT_NE(r.out.find(stage), std::string::npos) << stage;
  }
  const auto s = nlohmann::json::parse(cli_testing::slurp(dir / "out/summary.json"));
  for (const char* k : {"base_ppl_original", "final_ppl_original", "base_ppl_new", "final_ppl_new", "forgetting_pct",
                        "adaptation_pct", "added_tokens", "mitigations"}) {
    EXPECT_TRUE(s.contains(k)) << k;
  }
  EXPECT_GT(s["added_tokens"].get<int>(), 0);
  EXPECT_LT(s["final_ppl_new"].get<double>(), s["base_ppl_new"].get<double>());  // it learned Python
  EXPECT_TRUE(std::filesystem::exists(dir / "out/plan.json"));
  // A second run reuses the cached base model.
  const auto again = run_demo(dir, "out2", 4);
  ASSERT_EQ(again.exit_code, 0) << again.err;
  EXPECT_NE(again.out.find("reusing"), std::string::npos);
  // A step that refuses its input (here the cached base's tokenizer, damaged) is the demo's one
  // line and exit 2, not a second line and exit 3.
  for (const auto& entry : std::filesystem::directory_iterator(dir / "cache")) {
    if (entry.path().filename().string().starts_with("run-base-")) {
      std::ofstream(entry.path() / "tokenizer.model") << "not a model";
    }
  }
  const auto damaged = run_demo(dir, "out3", 4);
  EXPECT_EQ(damaged.exit_code, 2) << damaged.err;
  EXPECT_EQ(std::count(damaged.err.begin(), damaged.err.end(), '\n'), 1) << damaged.err;
  EXPECT_NE(damaged.err.find("tokenizer.model: not a SentencePiece model"), std::string::npos) << damaged.err;
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace cpt
