#include "cli/cpt/run_demo_summary.h"

#include <cmath>
#include <fstream>
#include <iostream>
#include <map>
#include <nlohmann/json.hpp>

#include "cli/output.h"
#include "core/atomic_file.h"
#include "core/error.h"
#include "core/str_cat.h"
#include "core/text_table.h"
#include "forecast/continual_forecast.h"
#include "spec/measured_run.h"

namespace cpt::cli {
namespace {

using core::str_cat;
namespace fs = std::filesystem;
using Json = nlohmann::ordered_json;

// {set: perplexity} of the evaluations at `step` (the last one when step < 0).
std::map<std::string, double> perplexities(const fs::path& eval_jsonl, std::int64_t step) {
  std::vector<Json> rows;
  std::ifstream in(eval_jsonl);
  for (std::string line; std::getline(in, line);) rows.push_back(Json::parse(line));
  if (step < 0) {
    for (const auto& r : rows) step = std::max(step, r["step"].get<std::int64_t>());
  }
  std::map<std::string, double> out;
  for (const auto& r : rows) {
    if (r["step"].get<std::int64_t>() == step) out[r["set"].get<std::string>()] = r["perplexity"].get<double>();
  }
  return out;
}

// What `cpt forecast` predicts for the run's end from its first third, beside what the run
// measured: {set: {forecast, low, high, measured}} in perplexity; empty (with the reason printed)
// when the first third has too few evaluations to fit.
Json forecast_from_first_third(const fs::path& run_dir, int steps) {
  Json out = Json::object();
  try {
    const auto run = forecast::read_pilot_run(run_dir);
    const auto fitted = forecast::fit_pilots({run}, {"python"}, steps / 3);
    const auto target = forecast::target_of(fitted, run);
    for (const auto& [set, fit] : fitted.fits) {
      const auto f = forecast::forecast_set(fitted, set, target);
      out[set] = {{"forecast", std::exp(f.loss)},
                  {"low", std::exp(f.low)},
                  {"high", std::exp(f.high)},
                  {"measured", std::exp(run.evaluations.at(set).back().loss)}};
    }
  } catch (const core::ConfigError& e) {
    std::cout << "  no forecast from the first third: " << e.what() << "\n";
    return Json::object();
  }
  return out;
}

// The forecast beside the outcome, as a table.
std::string forecast_table(const Json& forecast) {
  core::TextTable t({"held-out set", "forecast from the first third [±2 se]", "measured", "error"});
  for (const auto& [set, f] : forecast.items()) {
    const double predicted = f["forecast"].get<double>(), measured = f["measured"].get<double>();
    t.add_row({set,
               str_cat(fixed(predicted, 2), " [", fixed(f["low"].get<double>(), 2), ", ",
                       fixed(f["high"].get<double>(), 2), "]"),
               fixed(measured, 2),
               str_cat(predicted >= measured ? "+" : "", fixed(100 * (predicted / measured - 1), 1), "%")});
  }
  return t.render();
}

}  // namespace

void summarize_demo(const DemoOutcome& outcome) {
  const fs::path& out = outcome.out;
  const spec::ModelSpec& base_model = outcome.base_model;
  const spec::ModelSpec& extended = outcome.extended;
  const spec::Plan& plan = outcome.plan;
  const auto before = perplexities(out / "train/eval.jsonl", 0);
  const auto after = perplexities(out / "train/eval.jsonl", -1);
  const auto measured = spec::load_measured_run(out / "train/measured.json");
  const double forgetting = 100 * (after.at("english-heldout") / before.at("english-heldout") - 1);
  const double adaptation = 100 * (1 - after.at("python-heldout") / before.at("python-heldout"));
  const auto added = extended.vocab - base_model.vocab;
  Json summary{{"base_ppl_original", before.at("english-heldout")},
               {"final_ppl_original", after.at("english-heldout")},
               {"base_ppl_new", before.at("python-heldout")},
               {"final_ppl_new", after.at("python-heldout")},
               {"forgetting_pct", forgetting},
               {"adaptation_pct", adaptation},
               {"added_tokens", added},
               {"mitigations", {"replay 25% English", "KL distillation lambda 0.1", "vocabulary extension"}},
               {"continual_steps", outcome.steps},
               {"predicted_tokens_per_s", plan.predicted ? plan.predicted->tokens_per_s_per_gpu : 0.0},
               {"measured_tokens_per_s", measured.tokens_per_s},
               {"base_model", outcome.base_dir.string()},
               {"forecast_from_first_third", forecast_from_first_third(out / "train", outcome.steps)},
               {"wall_s", std::chrono::duration<double>(std::chrono::steady_clock::now() - outcome.started).count()}};
  core::write_file_atomic(out / "summary.json", summary.dump(2) + "\n");
  core::TextTable t({"held-out set", "base perplexity", "after", "change"});
  t.add_row({"English (original domain)", fixed(before.at("english-heldout"), 2), fixed(after.at("english-heldout"), 2),
             str_cat(forgetting >= 0 ? "+" : "", fixed(forgetting, 1), "% (forgetting)")});
  t.add_row({"Python (new domain)", fixed(before.at("python-heldout"), 2), fixed(after.at("python-heldout"), 2),
             str_cat("-", fixed(adaptation, 1), "% (adaptation)")});
  std::cout << "\n[6/6] summary (" << added << " tokens added; replay + KL)\n\n" << t.render() << "\n";
  if (!summary["forecast_from_first_third"].empty()) {
    std::cout << "perplexity at the end, as cpt forecast predicts it from the first " << outcome.steps / 3
              << " steps (docs/continual.md):\n"
              << forecast_table(summary["forecast_from_first_third"]) << "\n";
  }
  std::cout << str_cat("throughput: predicted ",
                       static_cast<long long>(summary["predicted_tokens_per_s"].get<double>()), " tokens/s, measured ",
                       static_cast<long long>(summary["measured_tokens_per_s"].get<double>()), " tokens/s; ",
                       fixed(summary["wall_s"].get<double>(), 0), " s in all\n")
            << "wrote " << (out / "summary.json").string() << "\n";
}

}  // namespace cpt::cli
