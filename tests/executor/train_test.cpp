#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "executor/checkpoint/checkpoint.h"
#include "executor/model/llama_model.h"
#include "executor/train/trainer.h"
#include "executor_test_support.h"
#include "spec/hardware_catalog.h"
#include "spec/model_catalog.h"

namespace cpt::exec {
namespace {

namespace fs = std::filesystem;
using testing::ScratchDir;

spec::Plan tiny_plan(int global_batch, int micro_batch, int seq_len) {
  const auto model = spec::find_catalog_model("tiny").value().spec;
  const auto cluster = spec::HardwareCatalog::builtin().cluster_for_gpu("h100", 1, "--gpu");
  spec::ParallelConfig p;
  p.micro_batch = micro_batch;
  p.global_batch = global_batch;
  return spec::make_plan(model, cluster, spec::Workload{seq_len, 0}, p);
}

// Shared data: one prepared dataset for the whole suite.
class TrainTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    data_ = new ScratchDir("train-data");
    testing::prepare_small_dataset(data_->path() / "py");
  }
  static void TearDownTestSuite() { delete data_; }

  static TrainConfig config(std::int64_t steps) {
    TrainConfig c;
    c.origin = "test";
    DataSetConfig d;
    d.name = "py";
    d.path = data_->path() / "py";
    c.data = {d};
    DataSetConfig e = d;
    e.name = "py-eval";
    e.eval_sequences = 8;
    c.eval = {e};
    c.steps = steps;
    c.lr = LrSchedule{LrScheduleKind::kCosine, 3e-3, 2, 0.1, 0.2, 1};
    c.seed = 11;
    c.device = "cpu";
    c.log_interval_steps = 0;
    return c;
  }

  static std::vector<double> losses(const fs::path& out) {
    std::vector<double> v;
    std::ifstream in(out / "metrics.jsonl");
    std::string line;
    while (std::getline(in, line)) v.push_back(nlohmann::json::parse(line).at("loss").get<double>());
    return v;
  }

  static ScratchDir* data_;
};
ScratchDir* TrainTest::data_ = nullptr;

TEST_F(TrainTest, LossFallsAndEveryOutputIsWritten) {
  ScratchDir out("train-basic");
  TrainOptions o;
  o.out_dir = out.path();
  o.progress = false;
  const auto s = train(tiny_plan(8, 4, 64), config(12), o);
  EXPECT_EQ(s.last_step, 12);
  const auto l = losses(out.path());
  ASSERT_EQ(l.size(), 12u);
  EXPECT_NEAR(l.front(), std::log(512.0), 0.3);
  EXPECT_LT(l.back(), l.front() - 0.5);
  std::ifstream in(out.path() / "metrics.jsonl");
  std::string line;
  std::getline(in, line);
  const auto row = nlohmann::json::parse(line);
  for (const char* k : {"step", "loss", "lr", "grad_norm", "tokens", "tokens_per_s", "step_time_s", "peak_memory_bytes"}) {
    EXPECT_TRUE(row.contains(k)) << k;
  }
  EXPECT_EQ(row.at("tokens").get<std::int64_t>(), 8 * 64);
  EXPECT_TRUE(fs::exists(out.path() / "eval.jsonl"));
  EXPECT_TRUE(fs::exists(out.path() / "measured.json"));
  EXPECT_EQ(Checkpoint::open(s.checkpoint).step(), 12);
}

TEST_F(TrainTest, StoppingAndResumingGivesExactlyTheUninterruptedLosses) {
  const auto plan = tiny_plan(8, 2, 64);  // 4 microbatches per step: accumulation is exercised too
  ScratchDir straight("train-straight"), resumed("train-resumed");
  TrainOptions o;
  o.progress = false;
  o.out_dir = straight.path();
  train(plan, config(10), o);
  o.out_dir = resumed.path();
  o.stop_at = 5;
  const auto first = train(plan, config(10), o);
  EXPECT_EQ(first.last_step, 5);
  o.stop_at.reset();
  o.resume = true;
  const auto second = train(plan, config(10), o);
  EXPECT_EQ(second.first_step, 5);
  const auto a = losses(straight.path());
  const auto b = losses(resumed.path());
  ASSERT_EQ(a.size(), 10u);
  ASSERT_EQ(b.size(), 10u);
  for (std::size_t i = 0; i < a.size(); ++i) EXPECT_EQ(a[i], b[i]) << "step " << i;
  // And the final weights are identical.
  const auto wa = Checkpoint::open(straight.path() / "checkpoints/step_00000010").weights();
  const auto wb = Checkpoint::open(resumed.path() / "checkpoints/step_00000010").weights();
  for (const auto& name : wa.names()) {
    EXPECT_TRUE(torch::equal(wa.load(name, torch::kFloat32), wb.load(name, torch::kFloat32))) << name;
  }
}

TEST_F(TrainTest, NonFiniteStepsAreSkippedAndCounted) {
  ScratchDir out("train-nan");
  // A starting point with one NaN weight: every loss is NaN, so no update may happen.
  const auto spec = spec::find_catalog_model("tiny").value().spec;
  LlamaModel model(spec);
  model->init_weights(1);
  CheckpointContents c;
  c.model = spec;
  for (const auto& p : model->named_parameters()) {
    auto t = p.value().detach().clone();
    if (p.key() == "norm.weight") t[0] = std::numeric_limits<float>::quiet_NaN();
    c.weights.emplace_back(p.key(), t);
  }
  write_checkpoint_dir(out.path() / "init", c);
  auto cfg = config(3);
  cfg.init_from = out.path() / "init";
  cfg.eval.clear();
  TrainOptions o;
  o.out_dir = out.path() / "run";
  o.progress = false;
  const auto s = train(tiny_plan(4, 4, 32), cfg, o);
  EXPECT_EQ(s.skipped_steps, 3);
  const auto w = Checkpoint::open(s.checkpoint).weights();
  for (const auto& [name, t] : c.weights) {
    EXPECT_TRUE(torch::equal(w.load(name, torch::kFloat32).nan_to_num(), t.nan_to_num())) << name;
  }
}

TEST_F(TrainTest, VocabularyThatDoesNotFitTheModelIsAConfigError) {
  auto plan = tiny_plan(4, 4, 32);
  plan.model.vocab = 256;  // the data was tokenized with 512 pieces
  ScratchDir out("train-vocab");
  TrainOptions o;
  o.out_dir = out.path();
  try {
    train(plan, config(1), o);
    FAIL();
  } catch (const core::ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("512-token vocabulary"), std::string::npos) << e.what();
  }
}

TEST_F(TrainTest, MultiProcessPlansNeedALaunchAndUnbuiltLayoutsAreRefused) {
  auto plan = tiny_plan(8, 2, 32);
  plan.parallel.dp = 2;
  ScratchDir out("train-dp");
  TrainOptions o;
  o.out_dir = out.path();
  try {
    train(plan, config(1), o);
    FAIL();
  } catch (const core::ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("the plan needs 2 processes"), std::string::npos) << e.what();
  }
  plan.parallel.dp = 1;
  plan.parallel.tp = 2;
  EXPECT_THROW(train(plan, config(1), o), core::ConfigError);
}

}  // namespace
}  // namespace cpt::exec
