// cpt train --plan PLAN --config TRAIN.json [--out DIR] [--resume] [--steps N] [--device D]
#include <CLI/CLI.hpp>
#include <iostream>

#include "cli/exec_commands.h"
#include "core/str_cat.h"
#include "executor/train/trainer.h"
#include "spec/plan.h"

namespace cpt::cli {

void register_exec_train_command(CLI::App& app) {
  struct Args {
    std::string plan, config, out = "runs/train", device;
    bool resume = false;
    std::int64_t steps = 0, stop_at = 0;
  };
  auto args = std::make_shared<Args>();
  auto* cmd = app.add_subcommand("train", "Run the training job a plan describes (single process; see issue #7)");
  cmd->add_option("--plan", args->plan, "plan.json (from `cpt plan --out`)")->required();
  cmd->add_option("--config", args->config, "TRAIN.json: data, tokenizer, steps, schedule (docs/train_config.md)")
      ->required();
  cmd->add_option("--out", args->out, "Output directory: metrics.jsonl, eval.jsonl, checkpoints/, measured.json")
      ->capture_default_str();
  cmd->add_flag("--resume", args->resume, "Continue from the newest valid checkpoint in OUT/checkpoints");
  cmd->add_option("--steps", args->steps, "Train this many steps in total (overrides TRAIN.json)")
      ->check(CLI::PositiveNumber);
  cmd->add_option("--stop-at", args->stop_at, "Stop with a checkpoint after this step (resume later with --resume)")
      ->check(CLI::PositiveNumber);
  cmd->add_option("--device", args->device, "auto, cpu or cuda (overrides TRAIN.json)")
      ->check(CLI::IsMember({"auto", "cpu", "cuda"}));
  cmd->callback([args] {
    const auto plan = spec::load_plan(args->plan);
    const auto config = exec::load_train_config(args->config);
    exec::TrainOptions o;
    o.out_dir = args->out;
    o.resume = args->resume;
    if (args->steps > 0) o.steps = args->steps;
    if (args->stop_at > 0) o.stop_at = args->stop_at;
    if (!args->device.empty()) o.device = args->device;
    const auto s = exec::train(plan, config, o);
    std::cout << core::str_cat("trained steps ", s.first_step, " -> ", s.last_step, ": final loss ", s.final_loss, ", ",
                               static_cast<long long>(s.tokens_per_s), " tokens/s",
                               s.skipped_steps > 0 ? core::str_cat(", ", s.skipped_steps, " steps skipped") : "",
                               "; checkpoint ", s.checkpoint.string(), "\n");
  });
}

}  // namespace cpt::cli
