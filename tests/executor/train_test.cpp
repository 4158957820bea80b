#include <gtest/gtest.h>

#include <algorithm>
#include <fstream>
#include <iterator>
#include <map>
#include <vector>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "executor/checkpoint/checkpoint.h"
#include "executor/data/token_shards.h"
#include "executor/model/llama_model.h"
#include "executor/train/train_config.h"
#include "executor/train/trainer.h"
#include "executor_test_support.h"
#include "spec/hardware_catalog.h"
#include "spec/model_catalog.h"

namespace cpt::exec {
namespace {

// Options of a test run: output into `dir`, no progress bar.
TrainOptions quiet_options(const std::filesystem::path& dir) {
  TrainOptions o;
  o.out_dir = dir;
  o.progress = false;
  return o;
}

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
  // Prepared by the first test rather than in SetUpTestSuite, whose failure gtest reports as every
  // test skipped (which ctest counts as a pass).
  void SetUp() override {
    if (data_ == nullptr) {
      data_ = new ScratchDir("train-data");
      testing::prepare_small_dataset(data_->path() / "py");
    }
  }
  static void TearDownTestSuite() {
    delete data_;
    data_ = nullptr;
  }

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
  auto o = quiet_options(out.path());
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
  for (const char* k :
       {"step", "loss", "lr", "grad_norm", "tokens", "tokens_per_s", "step_time_s", "peak_memory_bytes"}) {
    EXPECT_TRUE(row.contains(k)) << k;
  }
  EXPECT_EQ(row.at("tokens").get<std::int64_t>(), 8 * 64);
  EXPECT_TRUE(fs::exists(out.path() / "eval.jsonl"));
  EXPECT_TRUE(fs::exists(out.path() / "measured.json"));
  EXPECT_EQ(Checkpoint::open(s.checkpoint).step(), 12);
  // measured.json's spread of the timed steps (all but the first): the nearest-rank median and
  // 90th percentile of metrics.jsonl's step times, beside their mean.
  std::vector<double> timed;
  std::ifstream rows(out.path() / "metrics.jsonl");
  for (std::string r; std::getline(rows, r);) {
    const auto j = nlohmann::json::parse(r);
    if (j.at("step").get<int>() > 0) timed.push_back(j.at("step_time_s").get<double>());
  }
  ASSERT_EQ(timed.size(), 11u);
  double sum = 0;
  for (const double t : timed) sum += t;
  std::sort(timed.begin(), timed.end());
  const auto measured = nlohmann::json::parse(std::ifstream(out.path() / "measured.json"));
  EXPECT_NEAR(measured.at("step_time_s").get<double>(), sum / 11, 1e-9);
  EXPECT_DOUBLE_EQ(measured.at("step_time_median_s").get<double>(), timed[5]);
  EXPECT_DOUBLE_EQ(measured.at("step_time_p90_s").get<double>(), timed[9]);
}

// "epochs" counts the run in passes over the set the mixture exhausts first (spec/token_budget.h):
// with weights 1 and 3 over one data set of T tokens, the weight-3 copy, one epoch every T / 0.75
// tokens; 2.5 · 512 · 0.75 / T epochs are 1,280 tokens, three steps of 8 x 64.
TEST_F(TrainTest, EpochsCountTheRunOverTheScarcestSetOfTheMixture) {
  ScratchDir out("train-epochs");
  auto c = config(1);
  c.steps.reset();
  c.eval.clear();
  DataSetConfig heavy = c.data.front();
  heavy.name = "py-again";
  heavy.weight = 3;
  c.data.push_back(heavy);
  const auto tokens = static_cast<double>(TokenDataset::open(data_->path() / "py").tokens());
  c.epochs = 2.5 * 512 * 0.75 / tokens;
  const auto s = train(tiny_plan(8, 4, 64), c, quiet_options(out.path()));
  EXPECT_EQ(s.last_step, 3);
  const auto run = nlohmann::json::parse(std::ifstream(out.path() / "run.json"));
  EXPECT_EQ(run.at("total_steps").get<int>(), 3);
}

std::string slurp(const fs::path& file) {
  std::ifstream in(file, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
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
  // Resuming the finished run trains nothing and leaves its record as it was.
  const auto measured = slurp(resumed.path() / "measured.json");
  const auto third = train(plan, config(10), o);
  EXPECT_EQ(third.first_step, 10);
  EXPECT_EQ(third.last_step, 10);
  EXPECT_EQ(slurp(resumed.path() / "measured.json"), measured);
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

// --resume when every checkpoint is corrupt fails (exit 3) and changes nothing: the run's
// metrics stay as they were (it used to restart at step 0 and truncate them). Directories a killed
// checkpoint write left behind are cleared when the next run starts.
TEST_F(TrainTest, ResumeWithNoValidCheckpointFailsAndKeepsTheHistory) {
  const auto plan = tiny_plan(8, 2, 64);
  ScratchDir run("train-no-valid");
  TrainOptions o;
  o.progress = false;
  o.out_dir = run.path();
  o.stop_at = 2;
  train(plan, config(4), o);
  const auto checkpoints = run.path() / "checkpoints";
  for (const auto& e : fs::directory_iterator(checkpoints)) fs::remove(e.path() / "manifest.json");
  fs::create_directories(checkpoints / ".tmp-step_00000003-999");
  const auto metrics = slurp(run.path() / "metrics.jsonl");
  o.stop_at.reset();
  o.resume = true;
  try {
    train(plan, config(4), o);
    FAIL() << "resumed without a valid checkpoint";
  } catch (const core::RuntimeError& e) {
    EXPECT_NE(std::string(e.what()).find("no checkpoint in " + checkpoints.string() + " verifies"), std::string::npos)
        << e.what();
  }
  EXPECT_EQ(slurp(run.path() / "metrics.jsonl"), metrics);
  EXPECT_FALSE(fs::exists(checkpoints / ".tmp-step_00000003-999"));
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
  auto o = quiet_options(out.path() / "run");
  const auto s = train(tiny_plan(4, 4, 32), cfg, o);
  EXPECT_EQ(s.skipped_steps, 3);
  const auto w = Checkpoint::open(s.checkpoint).weights();
  for (const auto& [name, t] : c.weights) {
    EXPECT_TRUE(torch::equal(w.load(name, torch::kFloat32).nan_to_num(), t.nan_to_num())) << name;
  }
}

// train() of `plan` throws a ConfigError whose message contains `expected`.
void expect_config_error(const spec::Plan& plan, const TrainConfig& config, const std::string& dir,
                         const std::string& expected) {
  ScratchDir out(dir);
  TrainOptions o;
  o.out_dir = out.path();
  try {
    train(plan, config, o);
    ADD_FAILURE() << "no ConfigError; expected one with \"" << expected << "\"";
  } catch (const core::ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find(expected), std::string::npos) << e.what();
  }
}

TEST_F(TrainTest, VocabularyThatDoesNotFitTheModelIsAConfigError) {
  auto plan = tiny_plan(4, 4, 32);
  plan.model.vocab = 256;  // the data was tokenized with 512 pieces
  expect_config_error(plan, config(1), "train-vocab", "512-token vocabulary");
}

TEST_F(TrainTest, MultiProcessPlansNeedALaunchAndUnbuiltLayoutsAreRefused) {
  auto plan = tiny_plan(8, 2, 32);
  plan.parallel.dp = 2;
  expect_config_error(plan, config(1), "train-dp", "the plan needs 2 processes");
  plan.parallel.dp = 1;
  plan.parallel.offload = spec::Offload::kOptimizer;
  expect_config_error(plan, config(1), "train-offload", "offload optimizer");
}

}  // namespace
}  // namespace cpt::exec

namespace cpt::exec {
namespace {

class ContinualTest : public TrainTest {
 protected:
  // A short base run whose final checkpoint the continual runs start from.
  static fs::path base_checkpoint() {
    static const fs::path ckpt = [] {
      static ScratchDir base("continual-base");
      auto o = quiet_options(base.path());
      return train(tiny_plan(8, 4, 32), config(6), o).checkpoint;
    }();
    return ckpt;
  }
  static std::vector<nlohmann::json> rows(const fs::path& out) {
    std::vector<nlohmann::json> v;
    std::ifstream in(out / "metrics.jsonl");
    std::string line;
    while (std::getline(in, line)) v.push_back(nlohmann::json::parse(line));
    return v;
  }
  static TrainConfig continual(std::int64_t steps) {
    auto c = config(steps);
    c.init_from = base_checkpoint();
    c.eval.clear();
    c.lr.peak = 1e-2;  // large steps, so that the regularizers have something to hold back
    return c;
  }
};

// "init_optimizer": "keep" continues the base run's AdamW state (its step count goes on from the
// base's 6), "reset" starts it anew; the first update differs accordingly.
TEST_F(ContinualTest, OptimizerStateIsKeptOrReset) {
  std::map<bool, float> step_count;
  std::map<bool, double> first_loss_after;
  for (const bool keep : {false, true}) {
    ScratchDir out(keep ? "continual-keep" : "continual-reset");
    auto c = continual(2);
    c.keep_optimizer_state = keep;
    auto o = quiet_options(out.path());
    const auto summary = train(tiny_plan(8, 4, 32), c, o);
    const auto ckpt = Checkpoint::open(summary.checkpoint);
    step_count[keep] = ckpt.optimizer().load("embed_tokens.weight/step", torch::kFloat32).item<float>();
    first_loss_after[keep] = rows(out.path()).at(1)["loss"].get<double>();
  }
  EXPECT_EQ(step_count[false], 2.0f);
  EXPECT_EQ(step_count[true], 8.0f);
  EXPECT_NE(first_loss_after[false], first_loss_after[true]);
}

// Re-warming as recipes state it: the peak a fraction of the base run's (its checkpoint records
// it), the warm-up a fraction of the run. Without a recorded peak the run says what to give.
TEST_F(ContinualTest, PeakAndWarmupAsFractionsOfTheBaseRun) {
  EXPECT_EQ(Checkpoint::open(base_checkpoint()).trainer_state().at("lr_peak").get<double>(), 3e-3);
  ScratchDir out("continual-fraction");
  auto c = continual(10);
  c.lr_peak_fraction = 0.1;
  c.lr_warmup_fraction = 0.3;
  c.lr.peak = 1.0;  // ignored: the fraction decides
  auto o = quiet_options(out.path());
  train(tiny_plan(8, 4, 32), c, o);
  const auto r = rows(out.path());
  ASSERT_EQ(r.size(), 10u);
  LrSchedule expected = c.lr;
  expected.peak = 3e-4;
  expected.warmup_steps = 3;
  expected.total_steps = 10;
  for (std::size_t i = 0; i < r.size(); ++i)
    EXPECT_DOUBLE_EQ(r[i]["lr"].get<double>(), expected.at(static_cast<std::int64_t>(i)));
  EXPECT_NEAR(r[3]["lr"].get<double>(), 3e-4, 1e-12);  // the end of the warm-up is the peak
  EXPECT_EQ(Checkpoint::open(out.path() / "checkpoints/step_00000010").trainer_state().at("lr_peak").get<double>(),
            0.1 * 3e-3);

  // TRAIN.json: one of peak and peak_fraction; peak_fraction needs init_from.
  ScratchDir files("continual-fraction-config");
  const auto write = [&](const std::string& name, const std::string& lr, const std::string& extra) {
    std::ofstream(files.path() / name) << R"({"data": [{"name": "py", "path": ")" << (data_->path() / "py").string()
                                       << R"("}], "steps": 2, "lr": )" << lr << extra << "}";
    return files.path() / name;
  };
  try {
    load_train_config(write("both.json", R"({"schedule": "cosine", "peak": 1e-3, "peak_fraction": 0.1})", ""));
    ADD_FAILURE() << "both accepted";
  } catch (const core::ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("one of \"peak\" or \"peak_fraction\""), std::string::npos) << e.what();
  }
  try {
    load_train_config(write("alone.json", R"({"schedule": "cosine", "peak_fraction": 0.1})", ""));
    ADD_FAILURE() << "peak_fraction without init_from accepted";
  } catch (const core::ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("init_from"), std::string::npos) << e.what();
  }
  const auto cfg =
      load_train_config(write("ok.json", R"({"schedule": "cosine", "peak_fraction": 0.1, "warmup_fraction": 0.01})",
                              R"(, "init_from": ")" + base_checkpoint().string() + "\""));
  EXPECT_EQ(*cfg.lr_peak_fraction, 0.1);
  EXPECT_EQ(*cfg.lr_warmup_fraction, 0.01);
}

// KL(student ‖ teacher) is zero while the student is the teacher, grows as it moves, and a larger
// λ keeps it smaller.
TEST_F(ContinualTest, KlDistillationStartsAtZeroAndHoldsTheStudentBack) {
  double final_kl[2] = {0, 0};
  int i = 0;
  for (const double lambda : {0.001, 20.0}) {
    ScratchDir out("continual-kl");
    auto c = continual(8);
    c.distill = DistillConfig{};
    c.distill->lambda = lambda;
    auto o = quiet_options(out.path());
    train(tiny_plan(8, 4, 32), c, o);
    const auto r = rows(out.path());
    ASSERT_EQ(r.size(), 8u);
    EXPECT_NEAR(r.front()["kl"].get<double>(), 0.0, 1e-6);
    EXPECT_GT(r.back()["kl"].get<double>(), 0.0);
    final_kl[i++] = r.back()["kl"].get<double>();
  }
  EXPECT_LT(final_kl[1], final_kl[0] * 0.5);
}

// The guard cuts the learning rate once KL has stayed above its threshold for `patience` steps.
TEST_F(ContinualTest, KlGuardLowersTheLearningRate) {
  ScratchDir out("continual-guard");
  auto c = continual(8);
  c.distill = DistillConfig{};
  c.distill->guard_threshold = 1e-9;
  c.distill->guard_patience = 2;
  c.distill->guard_lr_factor = 0.5;
  auto o = quiet_options(out.path());
  train(tiny_plan(8, 4, 32), c, o);
  const auto r = rows(out.path());
  // Step 0 has KL 0 (not above); steps 1 and 2 are: from step 3 on the rate is halved.
  LrSchedule s = c.lr;
  s.total_steps = 8;
  EXPECT_DOUBLE_EQ(r[2]["lr"].get<double>(), s.at(2));
  EXPECT_DOUBLE_EQ(r[3]["lr"].get<double>(), s.at(3) * 0.5);
}

// EWC: the Fisher estimate is saved, the penalty starts at zero, and a large λ keeps the weights
// near the starting ones in the Fisher metric Σ F (θ − θ*)², the distance EWC penalises. (Not in
// plain L2: under Adam every parameter with a nonzero penalty gradient takes steps of about lr.)
TEST_F(ContinualTest, EwcStartsAtZeroAndAnchorsTheWeights) {
  double moved[2] = {0, 0};
  int i = 0;
  const auto anchor = Checkpoint::open(base_checkpoint()).weights();
  for (const double lambda : {1e-6, 1e3}) {
    ScratchDir out("continual-ewc");
    auto c = continual(8);
    c.ewc = EwcConfig{};
    c.ewc->lambda = lambda;
    c.ewc->data = c.data.front();
    c.ewc->sequences = 8;
    auto o = quiet_options(out.path());
    const auto s = train(tiny_plan(8, 4, 32), c, o);
    EXPECT_TRUE(fs::exists(out.path() / "ewc_fisher.safetensors"));
    const auto r = rows(out.path());
    EXPECT_NEAR(r.front()["ewc_penalty"].get<double>(), 0.0, 1e-12);
    const auto w = Checkpoint::open(s.checkpoint).weights();
    const auto fisher = SafetensorsFile::open(out.path() / "ewc_fisher.safetensors");
    double d = 0;
    for (const auto& name : w.names()) {
      d += (fisher.load("fisher/" + name, torch::kFloat32) *
            (w.load(name, torch::kFloat32) - anchor.load(name, torch::kFloat32)).pow(2))
               .sum()
               .item<double>();
    }
    moved[i++] = d;
  }
  EXPECT_LT(moved[1], moved[0] * 0.5);
}

}  // namespace
}  // namespace cpt::exec
