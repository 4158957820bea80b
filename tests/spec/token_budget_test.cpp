#include "spec/token_budget.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <fstream>
#include <string>

#include "core/error.h"
#include "core/json_reader.h"
#include "spec/train_config.h"

namespace cpt::spec {
namespace {

namespace fs = std::filesystem;

// A fresh directory of this process, removed with the test.
class ManifestDir {
 public:
  explicit ManifestDir(const std::string& manifest) {
    path_ = fs::temp_directory_path() / ("cpt_token_budget_" + std::to_string(::getpid()));
    fs::remove_all(path_);
    fs::create_directories(path_);
    std::ofstream(path_ / "manifest.json") << manifest;
  }
  ~ManifestDir() { fs::remove_all(path_); }
  ManifestDir(const ManifestDir&) = delete;
  ManifestDir& operator=(const ManifestDir&) = delete;
  [[nodiscard]] const fs::path& path() const { return path_; }

 private:
  fs::path path_;
};

// The header's example: 95% of a 10 B-token new domain, 5% of a 2 T-token replay set. The new
// domain runs out first: one epoch is 10e9 / 0.95 = 10,526,315,789.47 tokens, rounded up.
TEST(TokenBudget, AnEpochIsAPassOverTheSetTheMixtureExhaustsFirst) {
  const MixtureShare mix[] = {{"new", 10'000'000'000, 0.95}, {"replay", 2'000'000'000'000, 0.05}};
  EXPECT_EQ(tokens_for_epochs(mix, 1), 10'526'315'790);
  EXPECT_EQ(tokens_for_epochs(mix, 2), 21'052'631'579);
  // Weights on any scale: 19 and 1 are 0.95 and 0.05.
  const MixtureShare scaled[] = {{"new", 10'000'000'000, 19}, {"replay", 2'000'000'000'000, 1}};
  EXPECT_EQ(tokens_for_epochs(scaled, 1), 10'526'315'790);
  // A small replay set binds instead: 1e9 tokens at 5% last 2e10 tokens of the run.
  const MixtureShare small_replay[] = {{"new", 10'000'000'000, 0.95}, {"replay", 100'000'000, 0.05}};
  EXPECT_EQ(tokens_for_epochs(small_replay, 1), 2'000'000'000);
  const MixtureShare huge[] = {{"a", 1'000'000'000'000'000, 1e-9}, {"b", 1, 1}};
  EXPECT_EQ(tokens_for_epochs(huge, 1), 2);
  const MixtureShare too_many[] = {{"a", 4'000'000'000'000'000'000, 1}};
  EXPECT_THROW(tokens_for_epochs(too_many, 2), core::ConfigError);
}

TEST(TokenBudget, StepsRoundTheBudgetUp) {
  EXPECT_EQ(steps_for_tokens(1, 512), 1);
  EXPECT_EQ(steps_for_tokens(512, 512), 1);
  EXPECT_EQ(steps_for_tokens(513, 512), 2);
}

TEST(TokenBudget, TheManifestStatesTheTokensAndNothingElseIsRead) {
  {
    const ManifestDir dir(R"({"format": "cpt-tokens-v1", "tokens": 123456, "shards": ["missing"]})");
    EXPECT_EQ(manifest_tokens(dir.path()), 123456);
  }
  {
    const ManifestDir dir(R"({"format": "megatron", "tokens": 5})");
    try {
      manifest_tokens(dir.path());
      FAIL() << "another format was read";
    } catch (const core::ConfigError& e) {
      EXPECT_NE(std::string(e.what()).find("manifest.json"), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find("format"), std::string::npos) << e.what();
    }
  }
  {
    const ManifestDir dir(R"({"format": "cpt-tokens-v1", "tokens": -3})");
    EXPECT_THROW(manifest_tokens(dir.path()), core::ConfigError);
  }
  EXPECT_THROW(manifest_tokens("/nonexistent/cpt/data"), core::ConfigError);
}

TrainConfig parse(const std::string& text) {
  const auto doc = core::parse_json_text(text, "TRAIN.json");
  auto reader = core::JsonObjectReader::root_of(doc);
  return train_config_from_json(reader, "/data", "TRAIN.json");
}

TEST(TokenBudget, TrainJsonStatesOneOfStepsTokensAndEpochs) {
  const std::string data = R"("data": [{"name": "web", "path": "web"}])";
  EXPECT_DOUBLE_EQ(parse("{" + data + R"(, "epochs": 1.5})").epochs.value(), 1.5);
  for (const char* both : {R"(, "epochs": 1, "tokens": 100)", R"(, "epochs": 1, "steps": 10)"}) {
    try {
      parse("{" + data + both + "}");
      FAIL() << both;
    } catch (const core::ConfigError& e) {
      EXPECT_NE(std::string(e.what()).find("\"epochs\""), std::string::npos) << e.what();
    }
  }
  EXPECT_THROW(parse("{" + data + R"(, "epochs": 0})"), core::ConfigError);
}

}  // namespace
}  // namespace cpt::spec
