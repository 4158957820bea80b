#include "executor/train/run_log.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "core/error.h"
#include "executor/train/kl_guard.h"

namespace cpt::exec {
namespace {

namespace fs = std::filesystem;

std::vector<nlohmann::json> rows_of(const fs::path& path) {
  std::vector<nlohmann::json> rows;
  std::ifstream in(path);
  for (std::string line; std::getline(in, line);) rows.push_back(nlohmann::json::parse(line));
  return rows;
}

fs::path fresh_dir(const char* name) {
  const auto dir = fs::temp_directory_path() / (std::string(name) + "." + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  return dir;
}

// A resumed run keeps the metrics rows before the step it resumes at, and the evaluations up to it
// (the one at that step saw the checkpoint's weights and is not repeated), and appends its own;
// only the writing rank touches the files.
TEST(RunLog, AResumedRunReplacesTheRowsFromItsFirstStep) {
  const auto dir = fresh_dir("cpt_run_log_test");
  std::ofstream(dir / "metrics.jsonl") << R"({"step": 0, "loss": 3})"
                                          "\n"
                                          R"({"step": 1, "loss": 2.5})"
                                          "\n"
                                       << R"({"step": 2, "loss": 9})"
                                          "\n";
  std::ofstream(dir / "eval.jsonl") << R"({"step": 2, "set": "old", "loss": 1})"
                                       "\n"
                                       R"({"step": 3, "set": "old", "loss": 0.5})"
                                       "\n";
  {
    RunLog silent(dir, 2, 10, /*writes=*/false, false, 0);
    StepRecord ignored;
    ignored.step = 2;
    ignored.seconds = 1;
    silent.step(ignored, 0);
  }
  EXPECT_EQ(rows_of(dir / "metrics.jsonl").size(), 3u);
  RunLog log(dir, 2, 10, /*writes=*/true, /*bar=*/false, /*log_interval=*/0);
  StepRecord record{.step = 2,
                    .loss = 2.25,
                    .lr = 1e-3,
                    .grad_norm = 0.5,
                    .tokens_seen = 300,
                    .step_tokens = 100,
                    .seconds = 0.5,
                    .peak_memory_bytes = 7,
                    .skipped = false,
                    .kl = 0.125,
                    .ewc_penalty = std::nullopt,
                    .experts = ExpertLoad{.busiest = 1.5, .aux_loss = 1.25, .dropped = 0.0, .pairs = {}},
                    .samples_by_source = {{"web", 4}}};
  log.step(record, 4);
  log.eval(3, "held_out", 2.0, 64);
  const auto metrics = rows_of(dir / "metrics.jsonl");
  ASSERT_EQ(metrics.size(), 3u);
  EXPECT_EQ(metrics[1]["step"], 1);
  EXPECT_EQ(metrics[2]["step"], 2);
  EXPECT_EQ(metrics[2]["loss"], 2.25);
  EXPECT_EQ(metrics[2]["tokens_per_s"], 200);
  EXPECT_EQ(metrics[2]["kl"], 0.125);
  EXPECT_FALSE(metrics[2].contains("ewc_penalty"));
  EXPECT_EQ(metrics[2]["expert_load"], 1.5);
  EXPECT_EQ(metrics[2]["router_aux_loss"], 1.25);
  EXPECT_EQ(metrics[2]["dropped_pairs"], 0.0);
  EXPECT_EQ(metrics[2]["samples_by_source"]["web"], 4);
  const auto eval = rows_of(dir / "eval.jsonl");
  ASSERT_EQ(eval.size(), 2u);  // the old step-3 row is gone, the step-2 one (the checkpoint's) kept
  EXPECT_EQ(eval[0]["step"], 2);
  EXPECT_EQ(eval[0]["set"], "old");
  EXPECT_EQ(eval[1]["set"], "held_out");
  EXPECT_DOUBLE_EQ(eval[1]["perplexity"].get<double>(), std::exp(2.0));
  fs::remove_all(dir);
}

TEST(RunLog, DurationsReadAsHoursMinutesSeconds) {
  EXPECT_EQ(duration_text(5.4), "5s");
  EXPECT_EQ(duration_text(125), "2m5s");
  EXPECT_EQ(duration_text(3725), "1h2m");
  EXPECT_EQ(duration_text(-3), "0s");
  EXPECT_THROW(JsonlWriter(fs::path("/nonexistent/dir/metrics.jsonl")), core::RuntimeError);
}

// The guard cuts the learning rate after `patience` consecutive steps above the threshold, then
// counts again; a step below resets the count; without a threshold it does nothing.
TEST(KlGuard, CutsTheLearningRateAfterPatienceStepsAbove) {
  DistillConfig distill;
  distill.guard_threshold = 1.0;
  distill.guard_patience = 3;
  distill.guard_lr_factor = 0.5;
  KlGuard guard;
  EXPECT_FALSE(guard.observe(0, 2.0, distill));
  EXPECT_FALSE(guard.observe(1, 2.0, distill));
  EXPECT_FALSE(guard.observe(2, 0.5, distill));  // below: the count starts again
  EXPECT_EQ(guard.steps_over, 0);
  EXPECT_FALSE(guard.observe(3, 2.0, distill));
  EXPECT_FALSE(guard.observe(4, 2.0, distill));
  EXPECT_TRUE(guard.observe(5, 2.0, distill));
  EXPECT_EQ(guard.lr_scale, 0.5);
  EXPECT_EQ(guard.steps_over, 0);
  for (int step = 6; step < 9; ++step) guard.observe(step, 3.0, distill);
  EXPECT_EQ(guard.lr_scale, 0.25);
  distill.guard_threshold.reset();
  KlGuard off;
  for (int step = 0; step < 10; ++step) EXPECT_FALSE(off.observe(step, 100.0, distill));
  EXPECT_EQ(off.lr_scale, 1.0);
}

}  // namespace
}  // namespace cpt::exec
