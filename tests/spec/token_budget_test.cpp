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

// Weights on a scale that binary fractions do not hold (0.1, 0.2) give the counts of 1 and 2: the
// round-off of computing them is not one more epoch's unit or one more step.
TEST(TokenBudget, RoundOffIsNotOneMoreUnit) {
  const MixtureShare tenths[] = {{"a", 40, 0.1}, {"b", 16, 0.2}};  // 16 · 0.3 / 0.2 = 24.000000000000004
  const MixtureShare whole[] = {{"a", 40, 1}, {"b", 16, 2}};
  EXPECT_EQ(tokens_for_epochs(tenths, 1), 24);
  EXPECT_EQ(tokens_for_epochs(whole, 1), 24);
  // Padded: 40 documents of 19 inputs at 0.1, 10 of 64 at 0.2: a mean sample of 49 (48.99999999999999
  // computed), so 392 tokens are one step of 8 samples, 393 two.
  const PaddedShare padded_tenths[] = {{40, 40 * 19, 0.1}, {10, 10 * 64, 0.2}};
  const PaddedShare padded_whole[] = {{40, 40 * 19, 1}, {10, 10 * 64, 2}};
  const double mean = mean_padded_sample(padded_tenths);
  EXPECT_NEAR(mean, 49, 1e-12);
  EXPECT_DOUBLE_EQ(mean_padded_sample(padded_whole), 49);
  EXPECT_EQ(steps_for_padded_tokens(392, 8, mean, 2, "t"), 1);
  EXPECT_EQ(steps_for_padded_tokens(393, 8, mean, 2, "t"), 2);
  EXPECT_EQ(steps_for_padded_tokens(392 * 1000 + 1, 8, mean, 2, "t"), 1001);
  EXPECT_EQ(ceil_of_computed(3.0000000000000004, 2, "x"), 3);  // one ulp above 3
  EXPECT_EQ(ceil_of_computed(3.000001, 2, "x"), 4);
  // Only a part above an integer is forgiven: large exact counts stay as they are.
  const MixtureShare large[] = {{"a", 10'000'000'000, 1}};
  EXPECT_EQ(tokens_for_epochs(large, 1e6), 10'000'000'000'000'000);
  EXPECT_EQ(ceil_of_computed(9'999'990'121'999'878.0, 4, "x"), 9'999'990'121'999'878);
}

// A padded sample of no input (documents of one token) cannot reach a budget; a budget past 2^62
// steps cannot be counted: both are the user's input, named.
TEST(TokenBudget, PaddedBudgetsARunCannotReachAreRefused) {
  try {
    (void)steps_for_padded_tokens(100, 8, 0.0, 1, "TRAIN.json: $.tokens");
    FAIL();
  } catch (const core::ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("TRAIN.json: $.tokens: expected documents of at least two tokens"),
              std::string::npos)
        << e.what();
  }
  EXPECT_THROW((void)steps_for_padded_tokens(9'000'000'000'000'000'000, 8, 2e-6, 1, "t"), core::ConfigError);
}

// An epoch's steps: packed, the tokens over global_batch × seq_len; padded, the documents over
// global_batch (one sample each), whatever their lengths.
TEST(TokenBudget, AnEpochsStepsCountTokensPackedAndDocumentsPadded) {
  const MixtureShare tokens[] = {{"web", 10'000, 1}};
  EXPECT_EQ(steps_for_epochs(tokens, 1, 8, 64, Packing::kPacked), 20);  // ⌈10,000 / 512⌉
  const MixtureShare documents[] = {{"web", 81, 1}};
  EXPECT_EQ(steps_for_epochs(documents, 1, 8, 64, Packing::kPadded), 11);  // ⌈81 / 8⌉
  EXPECT_EQ(steps_for_epochs(documents, 2, 8, 64, Packing::kPadded), 21);  // ⌈162 / 8⌉
  EXPECT_NO_THROW(require_padded_input(0.5, "t"));
  EXPECT_THROW(require_padded_input(0.0, "t"), core::ConfigError);
}

TEST(TokenBudget, StepsRoundTheBudgetUp) {
  EXPECT_EQ(steps_for_tokens(1, 512), 1);
  EXPECT_EQ(steps_for_tokens(512, 512), 1);
  EXPECT_EQ(steps_for_tokens(513, 512), 2);
}

TEST(TokenBudget, TheManifestStatesTheTokensAndNothingElseIsRead) {
  {
    const ManifestDir dir(R"({"format": "cpt-tokens-v1", "tokens": 123456, "documents": 78, "shards": ["missing"]})");
    EXPECT_EQ(manifest_tokens(dir.path()), 123456);
    EXPECT_EQ(manifest_documents(dir.path()), 78);
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
