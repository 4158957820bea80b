#include "forecast/pilot_run.h"

#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "forecast/continual_forecast.h"
#include "forecast/lr_areas.h"
#include "spec/hardware_catalog.h"
#include "spec/model_catalog.h"
#include "spec/plan.h"

namespace cpt::forecast {
namespace {

namespace fs = std::filesystem;

void write(const fs::path& path, const std::string& text) {
  std::ofstream(path) << text;
}

// A run directory as `cpt train` leaves it: `steps` of a cosine schedule (peak 1e-3, warm-up 10,
// floor 0.1), evaluated every 10 steps on two sets whose losses follow `law_of(set, where)`.
template <typename Law>
fs::path fake_run(const std::string& name, double replay, int steps, Law law_of, const std::string& lr_key) {
  const fs::path dir = fs::path(::testing::TempDir()) / "forecast" / name;
  fs::remove_all(dir);
  fs::create_directories(dir);
  const auto model = spec::find_catalog_model("tiny")->spec;
  const auto cluster = spec::HardwareCatalog::builtin().cluster_for_gpu("h100", 1, "--gpu");
  spec::save_plan(spec::make_plan(model, cluster, spec::Workload{128, 0},
                                  spec::ParallelConfig{.micro_batch = 16, .global_batch = 16}),
                  dir / "plan.json");
  const std::string data = replay > 0
                               ? "{\"name\": \"python\", \"path\": \"p\", \"weight\": " + std::to_string(1 - replay) +
                                     "}, {\"name\": \"english\", \"path\": \"e\", "
                                     "\"weight\": " +
                                     std::to_string(replay) + "}"
                               : "{\"name\": \"python\", \"path\": \"p\"}";
  write(dir / "train_config.json", "{\"init_from\": \"base\", \"data\": [" + data + "], \"steps\": " +
                                       std::to_string(steps) + ", \"lr\": {\"schedule\": \"cosine\", \"" + lr_key +
                                       "\": " + (lr_key == "peak" ? "0.001" : "0.33") + ", \"warmup_steps\": 10}}");
  write(dir / "run.json", "{\"config\": \"x.json\", \"total_steps\": " + std::to_string(steps) + "}");
  spec::LrSchedule schedule;
  schedule.peak = 1e-3;
  schedule.warmup_steps = 10;
  schedule.total_steps = steps;
  std::ofstream metrics(dir / "metrics.jsonl"), eval(dir / "eval.jsonl");
  for (int s = 0; s < steps; ++s) metrics << "{\"step\": " << s << ", \"lr\": " << schedule.at(s) << "}\n";
  const auto areas = lr_areas(lr_per_step(schedule));
  for (int k = 0; k <= steps; k += 10) {
    const LawInput where{replay, areas.forward[static_cast<std::size_t>(k)],
                         areas.annealing[static_cast<std::size_t>(k)]};
    for (const char* set : {"english-heldout", "python-heldout"}) {
      eval << "{\"step\": " << k << ", \"set\": \"" << set << "\", \"loss\": " << law_of(set, where) << "}\n";
    }
  }
  return dir;
}

// The law's own form (its fidelity on real runs is docs/continual.md's): English is forgotten,
// less with replay; Python is learned, barely slower with replay.
double synthetic_loss(const std::string& set, const LawInput& where) {
  LossLaw law;
  const bool english = set == "english-heldout";
  law.start_loss = english ? 2.3 : 5.2;
  law.shift = english ? 1.2 : -2.4;
  law.replay_scale = english ? 0.07 : 5.0;
  law.area_scale = english ? 0.02 : 0.01;
  law.exponent = english ? 0.7 : 0.9;
  return law.at(where);
}

TEST(PilotRun, ReadsTheRatesEvaluationsMixtureAndBatch) {
  const auto dir = fake_run("replay", 0.25, 60, synthetic_loss, "peak");
  const auto run = read_pilot_run(dir);
  EXPECT_EQ(run.lr.size(), 60u);
  EXPECT_EQ(run.tokens_per_step, 16 * 128);
  EXPECT_EQ(run.schedule.total_steps, 60);
  EXPECT_DOUBLE_EQ(run.schedule.peak, 1e-3);
  ASSERT_EQ(run.evaluations.at("python-heldout").size(), 7u);
  EXPECT_EQ(run.evaluations.at("python-heldout").back().step, 60);
  EXPECT_NEAR(replay_share(run, {"python"}), 0.25, 1e-6);
  EXPECT_THROW(replay_share(run, {"pyhton"}), core::ConfigError);
}

TEST(PilotRun, APeakGivenAsAFractionIsTheOneTheStepsRanAt) {
  const auto dir = fake_run("fraction", 0.0, 40, synthetic_loss, "peak_fraction");
  EXPECT_NEAR(read_pilot_run(dir).schedule.peak, 1e-3, 1e-9);
}

// A padded pilot's steps hold its documents' tokens, not global_batch x seq_len: refused, named.
TEST(PilotRun, APaddedPilotIsRefused) {
  const auto dir = fake_run("padded", 0.0, 20, synthetic_loss, "peak");
  auto config = nlohmann::json::parse(std::ifstream(dir / "train_config.json"));
  config["packing"] = "padded";
  std::ofstream(dir / "train_config.json") << config.dump();
  try {
    read_pilot_run(dir);
    FAIL() << "expected a ConfigError";
  } catch (const core::ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("train_config.json: $.packing: expected \"packed\""), std::string::npos)
        << e.what();
  }
}

TEST(PilotRun, AMalformedLineNamesTheFileAndLine) {
  const auto dir = fake_run("malformed", 0.0, 20, synthetic_loss, "peak");
  std::ofstream(dir / "eval.jsonl", std::ios::app) << "{\"step\": 3, \"set\": \"x\"}\n";
  try {
    read_pilot_run(dir);
    FAIL() << "expected a ConfigError";
  } catch (const core::ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("eval.jsonl:7:"), std::string::npos) << e.what();
  }
}

TEST(ContinualForecast, PilotsAtTwoReplaySharesForecastAThirdAndCheckIt) {
  const auto none = read_pilot_run(fake_run("none", 0.0, 300, synthetic_loss, "peak"));
  const auto replayed = read_pilot_run(fake_run("replay25", 0.25, 300, synthetic_loss, "peak"));
  const auto held_out = read_pilot_run(fake_run("replay5", 0.05, 300, synthetic_loss, "peak"));
  const auto fitted = fit_pilots({none, replayed}, {}, 100);
  ASSERT_EQ(fitted.new_data, std::vector<std::string>{"python"});
  EXPECT_FALSE(fitted.annealing_fitted);  // no pilot's fitted evaluations reach its decay's end
  EXPECT_TRUE(fit_pilots({none, replayed}, {}, -1).annealing_fitted);
  EXPECT_EQ(fitted.fits.at("english-heldout").observations, 22);
  const auto target = target_of(fitted, held_out);
  EXPECT_EQ(target.steps, 300);
  for (const auto& set : {"english-heldout", "python-heldout"}) {
    const auto f = forecast_set(fitted, set, target);
    const double measured = held_out.evaluations.at(set).back().loss;
    EXPECT_NEAR(f.loss, measured, 0.05) << set;
  }
  EXPECT_FALSE(outside_pilots(fitted, target));
  EXPECT_TRUE(outside_pilots(fitted, target_like_pilots(fitted, 0.5, 1e-3, 300)));
}

TEST(ContinualForecast, OnePilotShareCannotSpeakForAnother) {
  const auto replayed = read_pilot_run(fake_run("only25", 0.25, 100, synthetic_loss, "peak"));
  const auto fitted = fit_pilots({replayed}, {"python"}, -1);
  EXPECT_NO_THROW(forecast_set(fitted, "python-heldout", target_like_pilots(fitted, 0.25, 1e-3, 300)));
  EXPECT_THROW(forecast_set(fitted, "python-heldout", target_like_pilots(fitted, 0.05, 1e-3, 300)), core::ConfigError);
}

}  // namespace
}  // namespace cpt::forecast
