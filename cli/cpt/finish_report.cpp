#include "cli/cpt/finish_report.h"

#include <CLI/CLI.hpp>
#include <cmath>
#include <string>
#include <vector>
#include <nlohmann/json.hpp>

#include "cli/numeric_flags.h"
#include "core/str_cat.h"

namespace cpt::cli {

using core::fixed;
using core::str_cat;

void add_failure_options(CLI::App& command, planner::FailureOptions& failures) {
  command
      .add_option("--mtbf-gpu-hours", failures.mtbf_gpu_hours,
                  "Mean time between failures of one GPU, hours (0: no failures; the default is Llama 3's "
                  "interruption rate)")
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber);
  command
      .add_option("--checkpoint-write-GBps", failures.checkpoint_write_GBps,
                  "Aggregate checkpoint write bandwidth of the storage, GB/s")
      ->capture_default_str()
      ->check(cli::positive_number());
  command.add_option("--restart-minutes", failures.restart_minutes, "Time to detect a failure, restart and reload")
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber);
}

namespace {

// "42 s", "12.5 min", "3.2 h".
std::string duration(double seconds) {
  if (!std::isfinite(seconds)) return "forever";
  if (seconds < 120) return str_cat(fixed(seconds, 0), " s");
  if (seconds < 7200) return str_cat(fixed(seconds / 60, 1), " min");
  return str_cat(fixed(seconds / 3600, 1), " h");
}

std::string hours(double seconds) {
  return std::isfinite(seconds) ? str_cat(fixed(seconds / 3600, seconds < 36000 ? 2 : 1), " h") : "forever";
}

}  // namespace

std::string describe_finish(const planner::TimeToFinish& t, const FinishFacts& facts, const std::string& indent) {
  const double step_s = t.training_s / static_cast<double>(t.steps);
  std::string out =
      str_cat("time to finish ", facts.tokens, " tokens with #1 (", t.steps, " steps): ", hours(t.wall_s),
              " expected, ", std::isfinite(t.gpu_hours) ? fixed(t.gpu_hours, 0) : "unbounded", " GPU-hours");
  if (facts.price_per_gpu_hour > 0 && std::isfinite(t.gpu_hours)) {
    out += str_cat(", ", fixed(t.gpu_hours * facts.price_per_gpu_hour, 0), " USD");
  }
  out += str_cat("\n", indent, "the steps ", hours(t.training_s));
  if (facts.with_recipe) {
    std::vector<std::string> besides;  // what TRAIN.json runs besides its steps, where it runs anything
    if (t.recipe.evaluations > 0) {
      besides.push_back(
          str_cat("TRAIN.json's ", t.recipe.evaluations, " evaluation(s) ", hours(t.recipe.evaluation_s)));
    }
    if (t.recipe.fisher_s > 0) besides.push_back(str_cat("EWC's Fisher estimate ", hours(t.recipe.fisher_s)));
    if (!besides.empty()) out += "; " + core::join(besides, " and ");
  }
  const double every_steps = t.interval_s / step_s;
  out += str_cat("\n", indent, "checkpoints of ", fixed(t.checkpoint_write_s * facts.failures.checkpoint_write_GBps, 1),
                 " GB at ", fixed(facts.failures.checkpoint_write_GBps, 0), " GB/s (", duration(t.checkpoint_write_s),
                 " each) every ", duration(t.interval_s), " (", fixed(every_steps, 0), " steps, ",
                 t.interval_from_recipe ? "TRAIN.json's" : "the best interval", "): ", hours(t.checkpoints_s));
  if (facts.failures.mtbf_gpu_hours <= 0)
    return out + str_cat("\n", indent, "failures not priced (--mtbf-gpu-hours 0)");
  out +=
      str_cat("\n", indent, "failures: job MTBF ", duration(facts.failures.mtbf_gpu_hours * 3600 / facts.gpus), " (",
              fixed(facts.failures.mtbf_gpu_hours, 0), " GPU-hours / ", facts.gpus, " GPUs), ",
              fixed(facts.failures.restart_minutes, 0), " min to restart: ", hours(t.failure_loss_s), " expected lost");
  if (t.interval_from_recipe && t.best_wall_s < 0.99 * t.wall_s) {
    out += str_cat("\n", indent, "checkpointing every ", duration(t.best_interval_s), " (",
                   fixed(t.best_interval_s / step_s, 0), " steps) instead: ", hours(t.best_wall_s), " expected");
  }
  return out;
}

core::Json finish_json(const planner::TimeToFinish& t, const FinishFacts& facts) {
  // JSON has no infinity: an unbounded expectation is null.
  auto finite = [](double v) { return std::isfinite(v) ? core::Json(v) : core::Json(nullptr); };
  core::Json j = {{"tokens", facts.tokens},
                  {"steps", t.steps},
                  {"expected_hours", finite(t.wall_s / 3600)},
                  {"gpu_hours", finite(t.gpu_hours)},
                  {"steps_hours", t.training_s / 3600},
                  {"evaluations", t.recipe.evaluations},
                  {"evaluation_hours", t.recipe.evaluation_s / 3600},
                  {"fisher_hours", t.recipe.fisher_s / 3600},
                  {"checkpoint_GB", t.checkpoint_write_s * facts.failures.checkpoint_write_GBps},
                  {"checkpoint_write_s", t.checkpoint_write_s},
                  {"checkpoint_interval_hours", t.interval_s / 3600},
                  {"checkpoint_interval_from_config", t.interval_from_recipe},
                  {"checkpoints_hours", t.checkpoints_s / 3600},
                  {"mtbf_gpu_hours", facts.failures.mtbf_gpu_hours},
                  {"restart_minutes", facts.failures.restart_minutes},
                  {"failure_loss_hours", finite(t.failure_loss_s / 3600)},
                  {"best_checkpoint_interval_hours", t.best_interval_s / 3600},
                  {"best_expected_hours", finite(t.best_wall_s / 3600)}};
  if (facts.price_per_gpu_hour > 0) j["cost_usd"] = finite(t.gpu_hours * facts.price_per_gpu_hour);
  return j;
}

}  // namespace cpt::cli
