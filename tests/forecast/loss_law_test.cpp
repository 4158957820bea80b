#include "forecast/loss_law.h"

#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "core/error.h"
#include "forecast/lr_areas.h"

namespace cpt::forecast {
namespace {

TEST(LrAreas, ConstantRateAddsForwardAreaAndNoAnnealing) {
  const std::vector<double> lr(5, 0.5);
  const auto areas = lr_areas(lr);
  ASSERT_EQ(areas.forward.size(), 6u);
  EXPECT_DOUBLE_EQ(areas.forward[0], 0.0);
  EXPECT_DOUBLE_EQ(areas.forward[5], 2.5);
  for (const double a : areas.annealing) EXPECT_DOUBLE_EQ(a, 0.0);
}

TEST(LrAreas, AnnealingAccumulatesEachDecreaseWithMomentum) {
  // Rates 4, 3, 3, 1: decreases 0, 1, 0, 2; with momentum 0.5 the momenta are 0, 1, 0.5, 2.25 and
  // the annealing areas after k steps 0, 0, 1, 1.5, 3.75. Warm-up (rising) adds none.
  const auto areas = lr_areas(std::vector<double>{4, 3, 3, 1}, 0.5);
  EXPECT_DOUBLE_EQ(areas.annealing[1], 0.0);
  EXPECT_DOUBLE_EQ(areas.annealing[2], 1.0);
  EXPECT_DOUBLE_EQ(areas.annealing[3], 1.5);
  EXPECT_DOUBLE_EQ(areas.annealing[4], 3.75);
  EXPECT_DOUBLE_EQ(areas.forward[4], 11.0);
  const auto warmup = lr_areas(std::vector<double>{1, 2, 3}, 0.5);
  EXPECT_DOUBLE_EQ(warmup.annealing[3], 0.0);
}

TEST(LrAreas, ScheduleRatesAreTheSchedulesSteps) {
  spec::LrSchedule schedule;
  schedule.peak = 1e-3;
  schedule.warmup_steps = 10;
  schedule.total_steps = 100;
  const auto lr = lr_per_step(schedule);
  ASSERT_EQ(lr.size(), 100u);
  EXPECT_DOUBLE_EQ(lr[37], schedule.at(37));
}

LossLaw forgetting_law() {
  LossLaw law;
  law.start_loss = 2.3;
  law.shift = 1.2;
  law.replay_scale = 0.06;
  law.area_scale = 0.02;
  law.exponent = 0.8;
  law.annealing = 0.5;
  return law;
}

// A cosine run of `steps` at peak 1e-3 read every 10 steps up to `until`.
std::vector<Observation> observe(const LossLaw& law, double replay, int steps, int until, double noise,
                                 std::mt19937& random) {
  spec::LrSchedule schedule;
  schedule.peak = 1e-3;
  schedule.warmup_steps = 10;
  schedule.total_steps = steps;
  const auto areas = lr_areas(lr_per_step(schedule));
  std::normal_distribution<double> scatter(0.0, noise);
  std::vector<Observation> out;
  for (int k = 0; k <= until; k += 10) {
    const LawInput where{replay, areas.forward[static_cast<std::size_t>(k)],
                         areas.annealing[static_cast<std::size_t>(k)]};
    out.push_back({where, law.at(where) + (noise > 0 ? scatter(random) : 0.0)});
  }
  return out;
}

TEST(LossLaw, ReplayShrinksTheShiftAndSlowsIt) {
  const LossLaw law = forgetting_law();
  const LawInput none{0, 0.1, 0}, replayed{0.25, 0.1, 0};
  EXPECT_GT(law.at(none), law.at(replayed));
  EXPECT_NEAR(law.at({0, 0, 0}), law.start_loss, 1e-12);
  // Without a fitted replay scale the mixture factor is 1 and only the area shrinks.
  LossLaw one_share = law;
  one_share.replay_scale = 0;
  EXPECT_NEAR(one_share.at({0.5, 0.2, 0}), law.start_loss + law.shift * (1 - std::pow(1 + 0.1 / 0.02, -0.8)), 1e-12);
}

TEST(LossLawFit, RecoversALawFromTwoReplaySharesAndPredictsAThird) {
  std::mt19937 random(7);
  const LossLaw truth = forgetting_law();
  // Two complete 100-step pilots (their decay fits C), then a 300-step run at another share.
  auto observations = observe(truth, 0.0, 100, 100, 0.002, random);
  const auto replayed = observe(truth, 0.25, 100, 100, 0.002, random);
  observations.insert(observations.end(), replayed.begin(), replayed.end());
  const auto fit = fit_loss_law(observations, true, "synthetic");
  EXPECT_TRUE(fit.replay_fitted);
  EXPECT_FALSE(fit.recovery_fitted);  // the truth has none: Schwarz's criterion leaves it out
  EXPECT_EQ(fit.parameters, 6);
  EXPECT_LT(fit.residual_sd, 0.004);
  // The end of a 300-step run at replay 0.05, a share no pilot trained with.
  const auto held_out = observe(truth, 0.05, 300, 300, 0.0, random).back();
  const auto predicted = forecast_loss(fit, held_out.where);
  EXPECT_LE(predicted.low, held_out.loss);
  EXPECT_GE(predicted.high, held_out.loss);
  EXPECT_NEAR(predicted.loss, held_out.loss, 0.1);
}

TEST(LossLawFit, ReplayWinningForgettingBackIsFittedAndForecast) {
  std::mt19937 random(3);
  LossLaw truth = forgetting_law();
  truth.annealing = 0;
  truth.recovery = 0.7;
  truth.recovery_area = 0.01;
  truth.replay_scale = 0.3;  // the 25% pilot forgets, then wins most of it back
  // Pilots at 0 and 25% to step 150 of 300 (truncated: C is not fitted), forecast 10% at 300.
  auto observations = observe(truth, 0.0, 300, 150, 0.002, random);
  const auto replayed = observe(truth, 0.25, 300, 150, 0.002, random);
  observations.insert(observations.end(), replayed.begin(), replayed.end());
  const auto fit = fit_loss_law(observations, false, "synthetic");
  EXPECT_TRUE(fit.recovery_fitted);
  EXPECT_EQ(fit.parameters, 7);
  const auto held_out = observe(truth, 0.10, 300, 300, 0.0, random).back();
  const auto predicted = forecast_loss(fit, held_out.where);
  EXPECT_NEAR(predicted.loss, held_out.loss, 0.05);
  // Without replay in the fit there is nothing to win back.
  const auto no_replay = fit_loss_law(observe(truth, 0.0, 300, 150, 0.002, random), false, "synthetic");
  EXPECT_FALSE(no_replay.recovery_fitted);
}

TEST(LossLawFit, NoiseFreeDataIsFittedExactly) {
  std::mt19937 random(1);
  LossLaw truth = forgetting_law();
  truth.replay_scale = 0;  // one share: the mixture factor is part of the shift
  const auto observations = observe(truth, 0.25, 300, 300, 0.0, random);
  const auto fit = fit_loss_law(observations, true, "synthetic");
  EXPECT_FALSE(fit.replay_fitted);
  EXPECT_LT(fit.residual_sd, 1e-5);
  const auto end = forecast_loss(fit, observations.back().where);
  EXPECT_NEAR(end.loss, observations.back().loss, 1e-5);
}

TEST(LossLawFit, WithoutAnnealingTheLawHasNone) {
  std::mt19937 random(1);
  LossLaw truth = forgetting_law();
  truth.annealing = 0;
  truth.replay_scale = 0;
  const auto fit = fit_loss_law(observe(truth, 0.0, 300, 100, 0.0, random), false, "synthetic");
  EXPECT_FALSE(fit.annealing_fitted);
  EXPECT_EQ(fit.parameters, 4);
  EXPECT_EQ(fit.law.annealing, 0.0);
  EXPECT_LT(fit.residual_sd, 1e-5);
}

TEST(LossLawFit, TooFewEvaluationsAreAConfigErrorNamingTheSet) {
  std::mt19937 random(1);
  const auto observations = observe(forgetting_law(), 0.0, 300, 30, 0.0, random);  // 4 points, 4 parameters
  try {
    fit_loss_law(observations, false, "evaluation set \"english\"");
    FAIL() << "expected a ConfigError";
  } catch (const core::ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("evaluation set \"english\": 4 distinct evaluations are too few"),
              std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace cpt::forecast
