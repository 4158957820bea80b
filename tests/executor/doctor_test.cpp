// cpt doctor's checks on a healthy run (every check passes) and on a broken one (each planted fault
// is caught: non-finite steps, a rising loss with spikes, a continual run without re-warming that
// starts at chance, text the tokenizer does not cover).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>

#include "core/directory_lock.h"
#include "core/error.h"
#include "executor/diagnose/run_doctor.h"
#include "executor/train/trainer.h"
#include "executor_test_support.h"
#include "spec/hardware_catalog.h"
#include "spec/model_catalog.h"
#include "spec/plan.h"

namespace cpt::exec {
namespace {

namespace fs = std::filesystem;
using testing::ScratchDir;

spec::Plan tiny_plan() {
  spec::ParallelConfig p;
  p.micro_batch = 2;
  p.global_batch = 4;
  const auto cluster = spec::HardwareCatalog::builtin().cluster_for_gpu("h100", 1, "--gpu");
  return spec::make_plan(spec::find_catalog_model("tiny")->spec, cluster, spec::Workload{64, 0}, p);
}

std::map<std::string, Verdict> by_check(const std::vector<Finding>& findings) {
  std::map<std::string, Verdict> m;
  for (const auto& f : findings) m[f.check] = f.verdict;
  return m;
}

void write_config(const fs::path& file, const fs::path& data, const nlohmann::json& patch) {
  nlohmann::json j{{"data", {{{"name", "py"}, {"path", data.string()}}}},
                   {"tokenizer", {{"model", testing::small_tokenizer().path().string()}}},
                   {"steps", 30},
                   {"lr", {{"schedule", "cosine"}, {"peak", 3e-3}, {"warmup_steps", 3}}},
                   {"seed", 3},
                   {"device", "cpu"},
                   {"log_interval_steps", 0}};
  j.merge_patch(patch);
  std::ofstream(file) << j.dump();
}

TEST(Doctor, AHealthyRunPassesEveryCheck) {
  ScratchDir dir("doctor-healthy");
  testing::prepare_small_dataset(dir.path() / "py");
  // Clipping at 5: the tiny model's gradient norm hovers near 1, where clipping at 1 would act on
  // half the steps (which the doctor rightly flags).
  write_config(dir.path() / "train.json", dir.path() / "py", {{"optimizer", {{"grad_clip", 5.0}}}});
  TrainOptions o;
  o.out_dir = dir.path() / "run";
  o.progress = false;
  train(tiny_plan(), load_train_config(dir.path() / "train.json"), o);
  const auto findings = diagnose_run(o.out_dir);
  for (const auto& f : findings) EXPECT_EQ(f.verdict, Verdict::kOk) << f.check << ": " << f.detail;
  const auto checks = by_check(findings);
  for (const char* c : {"metrics", "progress", "non-finite steps", "loss trend", "loss spikes", "learning rate",
                        "gradient norm", "data mixture", "data sample: py", "starting weights"}) {
    EXPECT_TRUE(checks.count(c)) << c;
  }
}

TEST(Doctor, PlantedFaultsAreCaught) {
  ScratchDir dir("doctor-broken");
  // Text the 512-piece Python tokenizer has never seen.
  fs::create_directories(dir.path() / "text");
  std::ofstream(dir.path() / "text/cjk.txt") << [] {
    std::string s;
    for (int i = 0; i < 400; ++i) s += "数据集的质量决定模型的质量。";
    return s;
  }();
  PrepareOptions po;
  prepare_dataset({dir.path() / "text"}, testing::small_tokenizer(), dir.path() / "cjk", po);
  // A continual run (init_from) with no warmup whose log starts at chance, has non-finite steps,
  // spikes and a rising loss.
  const auto run = dir.path() / "run";
  fs::create_directories(run);
  spec::save_plan(tiny_plan(), run / "plan.json");
  fs::create_directories(dir.path() / "base");
  write_config(dir.path() / "train.json", dir.path() / "cjk",
               {{"init_from", (dir.path() / "base").string()}, {"lr", {{"warmup_steps", 0}}}});
  std::ofstream(run / "run.json") << nlohmann::json{
      {"config", (dir.path() / "train.json").string()},
      {"total_steps", 100}}.dump();
  std::ofstream metrics(run / "metrics.jsonl");
  for (int s = 0; s < 100; ++s) {
    double loss = std::log(512.0) + 0.01 * s;  // at chance, rising
    if (s == 50 || s == 70) loss *= 1.5;       // spikes
    const bool nan = s % 20 == 7;              // 5% non-finite
    nlohmann::json row{{"step", s},      {"loss", nan ? nlohmann::json(nullptr) : nlohmann::json(loss)},
                       {"lr", 3e-3},     {"grad_norm", 2.0 + s},
                       {"skipped", nan}, {"samples_by_source", {{"py", 4 * (s + 1)}}}};
    metrics << row.dump() << "\n";
  }
  metrics.close();
  const auto checks = by_check(diagnose_run(run));
  EXPECT_EQ(checks.at("non-finite steps"), Verdict::kFail);
  EXPECT_EQ(checks.at("loss trend"), Verdict::kFail);
  EXPECT_NE(checks.at("loss spikes"), Verdict::kOk);
  EXPECT_EQ(checks.at("learning rate"), Verdict::kWarn);
  EXPECT_EQ(checks.at("gradient norm"), Verdict::kWarn);  // clipped (> 1) on every step, growing
  EXPECT_NE(checks.at("data sample: py"), Verdict::kOk);
  EXPECT_EQ(checks.at("starting weights"), Verdict::kFail);
}

// A mixture of experts' routing: the busiest expert's load drifting from balanced (1) past halfway
// to collapse (E/k = 2 for the tiny MoE: every token choosing it) is a warning; a steady one is not.
TEST(Doctor, ARouterDriftingOntoFewExpertsIsFlagged) {
  ScratchDir dir("doctor-experts");
  for (const auto& [name, late_load, verdict] :
       {std::tuple{"steady", 1.1, Verdict::kOk}, std::tuple{"collapsing", 1.8, Verdict::kWarn}}) {
    const auto run = dir.path() / name;
    fs::create_directories(run);
    auto plan = tiny_plan();
    plan.model = spec::find_catalog_model("tiny-moe")->spec;
    spec::save_plan(plan, run / "plan.json");
    std::ofstream metrics(run / "metrics.jsonl");
    for (int s = 0; s < 50; ++s) {
      const double load = 1.1 + (late_load - 1.1) * s / 49.0;
      metrics << nlohmann::json{{"step", s},
                                {"loss", 3.0 - 0.01 * s},
                                {"lr", 1e-3},
                                {"grad_norm", 0.5},
                                {"skipped", false},
                                {"expert_load", load},
                                {"router_aux_loss", 1.0},
                                {"dropped_pairs", 0.0}}
                     .dump()
              << "\n";
    }
    metrics.close();
    const auto findings = diagnose_run(run);
    const auto checks = by_check(findings);
    ASSERT_TRUE(checks.count("expert load")) << name;
    EXPECT_EQ(checks.at("expert load"), verdict) << name;
  }
}

// Numbers routing cannot produce (the busiest expert beyond every token's choice, more than all
// pairs dropped, less than the balanced share) fail the check instead of reading as a drift.
TEST(Doctor, ImpossibleExpertLoadsFail) {
  ScratchDir dir("doctor-impossible");
  auto plan = tiny_plan();
  plan.model = spec::find_catalog_model("tiny-moe")->spec;  // E/k = 2
  for (const auto& [name, load, dropped] :
       {std::tuple{"beyond-collapse", 7.5, 0.0}, std::tuple{"over-all-pairs", 1.2, 1.7},
        std::tuple{"below-balanced", 0.5, 0.0}}) {
    const auto run = dir.path() / name;
    fs::create_directories(run);
    spec::save_plan(plan, run / "plan.json");
    std::ofstream metrics(run / "metrics.jsonl");
    for (int s = 0; s < 20; ++s) {
      metrics << nlohmann::json{{"step", s},
                                {"loss", 3.0 - 0.01 * s},
                                {"lr", 1e-3},
                                {"grad_norm", 0.5},
                                {"skipped", false},
                                {"expert_load", s == 12 ? load : 1.1},
                                {"dropped_pairs", s == 12 ? dropped : 0.0}}
                     .dump()
              << "\n";
    }
    metrics.close();
    const auto findings = diagnose_run(run);
    const auto expert =
        std::find_if(findings.begin(), findings.end(), [](const Finding& f) { return f.check == "expert load"; });
    ASSERT_NE(expert, findings.end()) << name;
    EXPECT_EQ(expert->verdict, Verdict::kFail) << name << ": " << expert->detail;
    EXPECT_NE(expert->detail.find("1 logged value outside what routing allows"), std::string::npos) << expert->detail;
  }
}

// A run that ended early with no one writing it says so (and names its newest checkpoint); the
// same log while its writer holds the directory is a run in progress. Lines that are not steps are
// counted: one cut short at the end (a kill while writing), or others (an edit).
TEST(Doctor, ARunCutShortAndItsUnreadableLinesAreNamed) {
  ScratchDir dir("doctor-cut-short");
  const auto run = dir.path() / "run";
  fs::create_directories(run / "checkpoints/step_00000300");
  fs::create_directories(run / "checkpoints/step_00000200");
  spec::save_plan(tiny_plan(), run / "plan.json");
  std::ofstream(run / "run.json") << nlohmann::json{
      {"config", "/nonexistent/train.json"},
      {"total_steps", 100000}}.dump();
  const auto write_metrics = [&](const std::string& middle, const std::string& last) {
    std::ofstream metrics(run / "metrics.jsonl");
    for (int s = 0; s < 313; ++s) {
      if (s == 100) metrics << middle;
      metrics << nlohmann::json{{"step", s}, {"loss", 6.0 - 0.001 * s}, {"lr", 1e-3}, {"grad_norm", 0.5}}.dump()
              << "\n";
    }
    metrics << last;
  };
  const auto find = [](const std::vector<Finding>& findings, const std::string& check) {
    const auto it = std::find_if(findings.begin(), findings.end(), [&](const Finding& f) { return f.check == check; });
    EXPECT_NE(it, findings.end()) << check;
    return it == findings.end() ? Finding{} : *it;
  };
  write_metrics("", R"({"step": 313, "loss": 5.6)");
  auto findings = diagnose_run(run);
  const auto progress = find(findings, "progress");
  EXPECT_EQ(progress.verdict, Verdict::kWarn);
  EXPECT_NE(progress.detail.find("313 of 100000 steps (0.3%), and no process is writing the run"), std::string::npos)
      << progress.detail;
  EXPECT_NE(progress.detail.find("newest checkpoint step_00000300"), std::string::npos) << progress.detail;
  auto metrics = find(findings, "metrics");
  EXPECT_EQ(metrics.verdict, Verdict::kWarn);
  EXPECT_NE(metrics.detail.find("313 steps logged (0 to 312); 1 line is not a step record (line 314, the last)"),
            std::string::npos)
      << metrics.detail;
  EXPECT_NE(metrics.suggestion.find("killed while writing its last line"), std::string::npos) << metrics.suggestion;

  write_metrics("not json\n{\"step\": \"ten\"}\n", "");
  metrics = find(diagnose_run(run), "metrics");
  EXPECT_NE(metrics.detail.find("2 lines are not a step record (line 101 first)"), std::string::npos) << metrics.detail;
  EXPECT_NE(metrics.suggestion.find("written by another tool"), std::string::npos) << metrics.suggestion;
  // Rows that go back in steps (logs concatenated); progress counts the highest step.
  write_metrics("{\"step\": 5, \"loss\": 5.0}\n", "");
  findings = diagnose_run(run);
  EXPECT_NE(find(findings, "metrics").detail.find("1 row repeats or go back in steps"), std::string::npos)
      << find(findings, "metrics").detail;
  EXPECT_NE(find(findings, "progress").detail.find("313 of 100000 steps"), std::string::npos);
  // A run.json that is not cpt train's is named, not believed; nothing readable says so too.
  std::ofstream(run / "run.json") << R"({"config": 5, "total_steps": -5})";
  EXPECT_NE(find(diagnose_run(run), "progress").detail.find("run.json: "), std::string::npos);
  std::ofstream(run / "metrics.jsonl") << "NaN\nnot json\n";
  const auto nothing = find(diagnose_run(run), "metrics");
  EXPECT_EQ(nothing.verdict, Verdict::kFail);
  EXPECT_NE(nothing.detail.find("no step logged; 2 lines are not a step record (line 1 first)"), std::string::npos)
      << nothing.detail;

  std::ofstream(run / "run.json") << nlohmann::json{{"total_steps", 100000}}.dump();
  write_metrics("", "");
  const auto writer = core::DirectoryLock::acquire(run, "another cpt train");
  const auto running = find(diagnose_run(run), "progress");
  EXPECT_EQ(running.verdict, Verdict::kOk);
  EXPECT_NE(running.detail.find("still training (pid "), std::string::npos) << running.detail;
}

TEST(Doctor, ADirectoryThatIsNotARunIsAConfigError) {
  ScratchDir dir("doctor-empty");
  EXPECT_THROW(diagnose_run(dir.path()), core::ConfigError);
}

}  // namespace
}  // namespace cpt::exec
