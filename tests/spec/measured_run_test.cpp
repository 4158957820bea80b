#include "spec/measured_run.h"

#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>

#include "core/error.h"

namespace cpt::spec {
namespace {

// Two ranks of a pp2 run on the CPU; rank 1 did not count its dispatch.
MeasuredRun sample_run() {
  MeasuredRun run;
  run.device = "cpu";
  run.processes = 2;
  run.steps = 20;
  run.skipped_steps = 1;
  run.step_time_s = 0.125;
  run.step_time_median_s = 0.12;
  run.step_time_p90_s = 0.15;
  run.tokens_per_s = 4096;
  run.tokens_per_s_per_gpu = 2048;
  run.padded = true;
  run.final_loss = 3.5;
  run.dp_bucket_bytes = 104'857;
  // tp, cp, dp, ep comm, pp comm and bubble, compute and other.
  MeasuredRank first{0, 0, 0, 0, 0, {1000, 1000, 2000, 8, 50'000}, {0.0, 0.0, 0.0, 0.004, 0.025, 0.1}, std::nullopt};
  // tp, cp, dp, pp, ep calls and bytes.
  first.dispatch = MeasuredDispatch{300, 200, 40, {0, 0, 0, 26, 12}, {0, 0, 0, 53'248, 393'224}};
  // The second rank holds a KL teacher and EWC's Fisher and anchor.
  MeasuredRank second{
      1, 0, 0, 0, 1, {900, 900, 1800, 8, 40'000, 900, 1800}, {0.0, 0.0, 0.0, 0.0, 0.03, 0.095}, std::nullopt};
  run.ranks = {first, second};
  return run;
}

std::string error_of(const nlohmann::ordered_json& json) {
  try {
    (void)measured_run_from_json(json, "run/measured.json");
  } catch (const core::ConfigError& e) {
    return e.what();
  }
  return "";
}

TEST(MeasuredRun, RoundTripsThroughJsonAndAFile) {
  const auto run = sample_run();
  EXPECT_EQ(measured_run_from_json(measured_run_to_json(run), "memory"), run);
  const auto file = std::filesystem::temp_directory_path() / "cpt_measured_run_test.json";
  save_measured_run(file, run);
  EXPECT_EQ(load_measured_run(file), run);
  std::filesystem::remove(file);
  EXPECT_EQ(run.ranks[0].dispatch->kernels_per_step(), 500);
}

// The names are the prediction's where both measure the same quantity.
TEST(MeasuredRun, KeysAreThePredictionsWhereTheyNameTheSameQuantity) {
  const auto json = measured_run_to_json(sample_run());
  const auto& rank = json["ranks"][0];
  for (const char* key : {"tp_comm", "cp_comm", "dp_comm"})
    EXPECT_TRUE(rank["step_time_breakdown_s"].contains(key)) << key;
  for (const char* key : {"weights", "grads", "optimizer"}) EXPECT_TRUE(rank["memory_bytes"].contains(key)) << key;
  EXPECT_EQ(rank["dispatch"]["calls_per_step"]["pp"], 26);
  EXPECT_EQ(rank["dispatch"]["calls_per_step"]["ep"], 12);
  EXPECT_EQ(rank["step_time_breakdown_s"]["ep_comm"], 0.004);
  EXPECT_FALSE(json["ranks"][1].contains("dispatch"));
}

// Files written before expert parallelism ran have no ep_comm and no ep calls, and before the
// executor counted its bytes no bytes_per_step: they read as 0.
TEST(MeasuredRun, FilesWithoutTheExpertGroupReadItAsZero) {
  auto json = measured_run_to_json(sample_run());
  json["ranks"][0]["step_time_breakdown_s"].erase("ep_comm");
  json["ranks"][0]["dispatch"]["calls_per_step"].erase("ep");
  json["ranks"][0]["dispatch"].erase("bytes_per_step");
  const auto run = measured_run_from_json(json, "run/measured.json");
  EXPECT_EQ(run.ranks[0].step_time_breakdown_s.ep_comm, 0.0);
  EXPECT_EQ(run.ranks[0].dispatch->calls_per_step[4], 0);
  EXPECT_EQ(run.ranks[0].dispatch->calls_per_step[3], 26);
  EXPECT_EQ(run.ranks[0].dispatch->bytes_per_step[4], 0);
}

// Version 1 had no packing key and ran packed; version 2 names it, one of two words.
TEST(MeasuredRun, PackingIsReadFromVersionTwoAndPackedBefore) {
  auto json = measured_run_to_json(sample_run());
  EXPECT_EQ(json["packing"], "padded");
  auto version_one = json;
  version_one["schema_version"] = 1;
  version_one.erase("packing");
  EXPECT_FALSE(measured_run_from_json(version_one, "run/measured.json").padded);
  auto missing = json;
  missing.erase("packing");
  EXPECT_NE(error_of(missing).find("$.packing"), std::string::npos) << error_of(missing);
  auto misspelt = json;
  misspelt["packing"] = "pad";
  EXPECT_NE(error_of(misspelt).find("$.packing"), std::string::npos) << error_of(misspelt);
}

// A misspelt, missing or out-of-range key is an error naming the file and the key, never a 0.
TEST(MeasuredRun, ReadingIsStrict) {
  auto json = measured_run_to_json(sample_run());
  auto misspelt = json;
  misspelt["ranks"][0]["step_time_breakdown_s"]["tp_comm_wait"] = 0.1;
  EXPECT_NE(error_of(misspelt).find("run/measured.json: $.ranks[0].step_time_breakdown_s.tp_comm_wait: unknown key"),
            std::string::npos)
      << error_of(misspelt);
  auto missing = json;
  missing.erase("step_time_s");
  EXPECT_NE(error_of(missing).find("$.step_time_s"), std::string::npos) << error_of(missing);
  auto too_few = json;
  too_few["ranks"].erase(1);
  EXPECT_NE(error_of(too_few).find("$.ranks: expected an array of one object per process (2)"), std::string::npos)
      << error_of(too_few);
  auto out_of_order = json;
  std::swap(out_of_order["ranks"][0], out_of_order["ranks"][1]);
  EXPECT_NE(error_of(out_of_order).find("$.ranks[0].rank: expected 0, got 1"), std::string::npos)
      << error_of(out_of_order);
  auto negative = json;
  negative["ranks"][1]["memory_bytes"]["grads"] = -4;
  EXPECT_NE(error_of(negative).find("$.ranks[1].memory_bytes.grads"), std::string::npos) << error_of(negative);
}

// A measured.json of an earlier cpt (untyped, no schema_version) is refused in one line; a newer
// schema than this cpt knows too.
TEST(MeasuredRun, EarlierAndLaterFilesAreRefusedInOneLine) {
  const nlohmann::ordered_json earlier = {
      {"steps", 20}, {"step_time_s", 0.1}, {"memory_per_rank", nlohmann::json::array()}};
  const auto message = error_of(earlier);
  EXPECT_NE(message.find("run/measured.json: written by an earlier cpt (no schema_version)"), std::string::npos)
      << message;
  EXPECT_EQ(message.find('\n'), std::string::npos);
  auto later = measured_run_to_json(sample_run());
  later["schema_version"] = kMeasuredRunSchemaVersion + 1;
  EXPECT_NE(error_of(later).find("$.schema_version"), std::string::npos);
}

// A last loss that was not finite is written as null (JSON has no NaN) and read back as NaN.
TEST(MeasuredRun, ANonFiniteFinalLossIsNull) {
  auto run = sample_run();
  run.final_loss = std::nan("");
  const auto json = measured_run_to_json(run);
  EXPECT_TRUE(json["final_loss"].is_null());
  EXPECT_TRUE(std::isnan(measured_run_from_json(json, "memory").final_loss));
}

}  // namespace
}  // namespace cpt::spec
