// cpt forecast PILOT... : fit the continual loss law (forecast/loss_law.h) to short pilot runs'
// evaluations and predict each evaluation set's loss and perplexity at a full token budget, for
// replay shares and peak learning rates, with intervals; --check compares the forecast with runs
// it did not see (docs/continual.md, "Forecasting forgetting").
#include <CLI/CLI.hpp>
#include <algorithm>
#include <cmath>
#include <iostream>
#include <memory>
#include <nlohmann/json.hpp>

#include "cli/numeric_flags.h"
#include "cli/cpt/commands.h"
#include "cli/output.h"
#include "core/error.h"
#include "core/str_cat.h"
#include "core/text_table.h"
#include "forecast/continual_forecast.h"

namespace cpt::cli {
namespace {

using core::fixed;
using core::significant;
using core::str_cat;
using Json = nlohmann::ordered_json;

struct ForecastOptions {
  std::vector<std::string> pilots;
  std::vector<double> replay;
  std::vector<double> peak_lr;
  std::int64_t tokens = 0;
  std::int64_t steps = 0;
  std::int64_t fit_until_step = -1;
  std::vector<std::string> check;
  std::vector<std::string> new_data;
  bool json = false;
};

std::string interval(double low, double high, int decimals) {
  return str_cat("[", fixed(low, decimals), ", ", fixed(high, decimals), "]");
}

std::string signed_percent(double fraction) {
  return str_cat(fraction >= 0 ? "+" : "", fixed(100 * fraction, 1), "%");
}

Json law_json(const forecast::LawFit& fit) {
  const auto& law = fit.law;
  return Json{{"annealing_fitted", fit.annealing_fitted},
              {"start_loss", law.start_loss},
              {"shift", law.shift},
              {"replay_scale", law.replay_scale},
              {"area_scale", law.area_scale},
              {"exponent", law.exponent},
              {"annealing", law.annealing},
              {"recovery_fitted", fit.recovery_fitted},
              {"recovery", fit.recovery_fitted ? law.recovery : 0.0},
              {"recovery_area", law.recovery_area},
              {"observations", fit.observations},
              {"residual_sd", fit.residual_sd}};
}

void print_fits(const forecast::FittedPilots& fitted) {
  std::cout << "forecast: the continual loss law fitted to " << fitted.pilots.size() << " pilot run(s)";
  if (fitted.fit_until_step >= 0) std::cout << ", their evaluations up to step " << fitted.fit_until_step;
  std::cout << "\n";
  for (std::size_t i = 0; i < fitted.pilots.size(); ++i) {
    std::cout << "  " << fitted.pilots[i].dir.string() << ": replay " << fixed(fitted.replay_shares[i], 3) << "\n";
  }
  core::TextTable t({"set", "evals", "L0", "A", "rho", "sigma", "beta", "q", "tau", "C", "fit sd"},
                    {core::Align::kLeft, core::Align::kRight, core::Align::kRight, core::Align::kRight,
                     core::Align::kRight, core::Align::kRight, core::Align::kRight, core::Align::kRight,
                     core::Align::kRight, core::Align::kRight, core::Align::kRight});
  for (const auto& [set, fit] : fitted.fits) {
    const auto& law = fit.law;
    t.add_row({set, std::to_string(fit.observations), fixed(law.start_loss, 3), fixed(law.shift, 3),
               fit.replay_fitted ? significant(law.replay_scale, 3) : "-", significant(law.area_scale, 3),
               significant(law.exponent, 3), fit.recovery_fitted ? significant(law.recovery, 3) : "-",
               fit.recovery_fitted ? significant(law.recovery_area, 3) : "-",
               fit.annealing_fitted ? significant(law.annealing, 3) : "-", fixed(fit.residual_sd, 4)});
  }
  std::cout << t.render();
  if (!fitted.annealing_fitted) {
    std::cout << "C (annealing) not fitted: no pilot's fitted evaluations reach its schedule's end, so the "
                 "forecast leaves out what the rest of a decay gains\n";
  }
  std::cout << "\n";
}

// A section of the report: its rows for --json and its text.
struct Section {
  Json rows = Json::array();
  std::string text;
};

// The targets asked for: every replay share × peak at the budget.
Section forecast_targets(const forecast::FittedPilots& fitted, const ForecastOptions& o, std::int64_t steps) {
  const auto& pilot = fitted.pilots.front();
  auto replays = o.replay;
  if (replays.empty()) {
    replays = fitted.replay_shares;
    std::sort(replays.begin(), replays.end());
    replays.erase(std::unique(replays.begin(), replays.end()), replays.end());
  }
  const auto peaks = o.peak_lr.empty() ? std::vector<double>{pilot.schedule.peak} : o.peak_lr;
  Section section;
  core::TextTable t({"replay", "peak lr", "set", "loss [interval]", "perplexity [interval]", "vs step 0"},
                    {core::Align::kRight, core::Align::kRight});
  for (const double replay : replays) {
    for (const double peak : peaks) {
      const auto target = forecast::target_like_pilots(fitted, replay, peak, steps);
      const bool extrapolated = forecast::outside_pilots(fitted, target);
      for (const auto& [set, fit] : fitted.fits) {
        const auto f = forecast::forecast_set(fitted, set, target);
        const auto start = fitted.start_loss.find(set);
        const std::string change =
            start == fitted.start_loss.end() ? "-" : signed_percent(std::exp(f.loss - start->second) - 1);
        t.add_row({str_cat(fixed(replay, 3), extrapolated ? " (extrapolated)" : ""), significant(peak, 3), set,
                   str_cat(fixed(f.loss, 3), " ", interval(f.low, f.high, 3)),
                   str_cat(fixed(std::exp(f.loss), 2), " ", interval(std::exp(f.low), std::exp(f.high), 2)), change});
        section.rows.push_back({{"replay", replay},
                                {"peak_lr", peak},
                                {"steps", steps},
                                {"set", set},
                                {"loss", f.loss},
                                {"loss_low", f.low},
                                {"loss_high", f.high},
                                {"extrapolated_replay", extrapolated}});
      }
    }
  }
  section.text = str_cat("at ", steps, " steps (", steps * pilot.tokens_per_step,
                         " tokens), the first pilot's schedule; interval: ±2 standard errors\n", t.render(), "\n");
  return section;
}

// Runs and evaluations the fit did not see: the pilots' evaluations after --fit-until-step, and
// the --check runs, each at its own replay share and learning rates.
Section check_runs(const forecast::FittedPilots& fitted, const ForecastOptions& o) {
  std::vector<forecast::PilotRun> runs;
  if (o.fit_until_step >= 0) runs = fitted.pilots;
  for (const auto& dir : o.check) runs.push_back(forecast::read_pilot_run(dir));
  Section section;
  core::TextTable t({"run", "set", "step", "forecast ppl [interval]", "measured ppl", "error", "inside"},
                    {core::Align::kLeft, core::Align::kLeft, core::Align::kRight});
  for (const auto& run : runs) {
    const auto target = forecast::target_of(fitted, run);
    const auto step = target.steps;
    if (o.fit_until_step >= 0 && step <= o.fit_until_step) continue;
    for (const auto& [set, fit] : fitted.fits) {
      const auto found = run.evaluations.find(set);
      if (found == run.evaluations.end() || found->second.back().step != step) continue;
      const double measured = found->second.back().loss;
      forecast::LossForecast f;
      try {
        f = forecast::forecast_set(fitted, set, target);
      } catch (const core::ConfigError& e) {
        throw core::ConfigError(str_cat("--check ", run.dir.string(), ": ", e.what()));
      }
      const bool inside = measured >= f.low && measured <= f.high;
      t.add_row({run.dir.string(), set, std::to_string(step),
                 str_cat(fixed(std::exp(f.loss), 2), " ", interval(std::exp(f.low), std::exp(f.high), 2)),
                 fixed(std::exp(measured), 2), signed_percent(std::exp(f.loss - measured) - 1), inside ? "yes" : "no"});
      section.rows.push_back({{"run", run.dir.string()},
                              {"set", set},
                              {"step", step},
                              {"replay", target.replay_share},
                              {"loss", f.loss},
                              {"loss_low", f.low},
                              {"loss_high", f.high},
                              {"measured_loss", measured}});
    }
  }
  if (!section.rows.empty()) {
    section.text = str_cat("checked against evaluations the fit did not see (error: forecast perplexity vs measured)\n",
                           t.render());
  }
  return section;
}

void run(const ForecastOptions& o) {
  if (o.tokens > 0 && o.steps > 0) throw core::ConfigError("--tokens and --steps: give one budget, not both");
  std::vector<forecast::PilotRun> pilots;
  for (const auto& dir : o.pilots) pilots.push_back(forecast::read_pilot_run(dir));
  const auto fitted = forecast::fit_pilots(std::move(pilots), o.new_data, o.fit_until_step);
  const auto per_step = fitted.pilots.front().tokens_per_step;
  const std::int64_t steps = o.steps > 0    ? o.steps
                             : o.tokens > 0 ? o.tokens / per_step + (o.tokens % per_step != 0 ? 1 : 0)
                                            : fitted.pilots.front().schedule.total_steps;
  // Everything is computed before anything is printed: an error is the only output.
  const Section forecasts = forecast_targets(fitted, o, steps);
  const Section checks = check_runs(fitted, o);
  if (!o.json) {
    print_fits(fitted);
    std::cout << forecasts.text << checks.text;
    return;
  }
  Json out{{"pilots", Json::array()}, {"new_data", fitted.new_data}, {"fits", Json::object()}};
  for (std::size_t i = 0; i < fitted.pilots.size(); ++i) {
    out["pilots"].push_back({{"dir", fitted.pilots[i].dir.string()}, {"replay", fitted.replay_shares[i]}});
  }
  for (const auto& [set, fit] : fitted.fits) out["fits"][set] = law_json(fit);
  out["forecasts"] = forecasts.rows;
  out["checks"] = checks.rows;
  print_json(out);
}

}  // namespace

void register_forecast_command(CLI::App& app) {
  auto o = std::make_shared<ForecastOptions>();
  auto* cmd = app.add_subcommand(
      "forecast", "Forecast forgetting and adaptation: fit a continual loss law to pilot runs, predict the full run");
  cmd->add_option("PILOT", o->pilots,
                  "`cpt train` output directories of short pilot runs (eval.jsonl with evaluations)")
      ->required();
  cmd->add_option("--replay", o->replay, "Replay shares to forecast, comma-separated (default: the pilots')")
      ->delimiter(',')
      ->check(CLI::Range(0.0, 0.999));
  cmd->add_option("--peak-lr", o->peak_lr,
                  "Peak learning rates to forecast, comma-separated (default: the first pilot's)")
      ->delimiter(',')
      ->check(cli::positive_number());
  cmd->add_option("--tokens", o->tokens, "Token budget of the full run (default: the first pilot's scheduled length)")
      ->check(cli::positive_number());
  cmd->add_option("--steps", o->steps, "Steps of the full run instead of --tokens")->check(cli::positive_number());
  cmd->add_option("--fit-until-step", o->fit_until_step,
                  "Fit only evaluations up to this step; the pilots' later ones are checked against the forecast")
      ->check(CLI::NonNegativeNumber);
  cmd->add_option("--check", o->check, "Runs not fitted whose last evaluations are compared with the forecast")
      ->check(CLI::ExistingDirectory);
  cmd->add_option(
         "--new-data", o->new_data,
         "The new domain's training data sets by name (default: those every pilot trains on); the rest is replay")
      ->delimiter(',');
  cmd->add_flag("--json", o->json, "Print the fits, forecasts and checks as JSON");
  cmd->callback([o] { run(*o); });
}

}  // namespace cpt::cli
