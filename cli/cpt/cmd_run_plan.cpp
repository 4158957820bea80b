#include "cli/cpt/cmd_run_plan.h"

#include <chrono>
#include <ctime>
#include <filesystem>
#include <iostream>

#include "cli/executor_process.h"
#include "cli/cpt/local_profile.h"
#include "core/error.h"
#include "core/output_directory.h"
#include "core/str_cat.h"
#include "planner/planner.h"
#include "spec/model_io.h"
#include "spec/plan.h"

namespace cpt::cli {

namespace {

using core::str_cat;
namespace fs = std::filesystem;

void step(const std::vector<std::string>& args) {
  check_step_exit(run_self_passthrough(args), args);
}

}  // namespace

fs::path default_run_dir() {
  char stamp[32];
  const std::time_t now = std::time(nullptr);
  std::strftime(stamp, sizeof stamp, "%Y%m%d-%H%M%S", std::localtime(&now));
  return fs::path("runs") / str_cat("run-", stamp);
}

void run_planned(const PlannedRunOptions& o) {
  if (o.cpu == !o.gpu.empty())
    throw core::ConfigError("cpt run --model: expected one of --gpu G or --cpu, got " +
                            std::string(o.cpu ? "both" : "neither"));
  if (o.config.empty())
    throw core::ConfigError("cpt run --model: --config TRAIN.json is required (data, steps, schedule)");
  if (o.gpus < 1 || o.global_batch < 1 || o.seq_len < 1) {
    throw core::ConfigError("cpt run --model: --gpus, --global-batch and --seq-len are required (>= 1)");
  }
  if (!find_executor())
    throw core::RuntimeError("`cpt run` trains, and this build has no executor (run scripts/setup)");
  // What the plan step would refuse, refused before this machine is calibrated (a minute).
  planner::SearchOptions search;
  search.global_batch = o.global_batch;
  search.seq_len = o.seq_len;
  planner::check_options(spec::load_model(o.model, "--model"), search);
  const fs::path out = o.out.empty() ? default_run_dir() : fs::path(o.out);
  core::create_output_directory(out);
  std::string gpu = o.gpu;
  if (o.cpu) {
    gpu = "local";
    if (!fs::exists(local_profile_path())) {
      std::cout << "[0/3] no calibration of this machine yet: cpt calibrate\n" << std::flush;
      step({"calibrate", "--ranks", std::to_string(std::max(2, o.gpus))});
    }
  }
  std::cout << "[1/3] plan: " << o.model << " on " << o.gpus << " x " << gpu << "\n" << std::flush;
  std::vector<std::string> plan_args{"plan",
                                     "--model",
                                     o.model,
                                     "--gpu",
                                     gpu,
                                     "--gpus",
                                     std::to_string(o.gpus),
                                     "--global-batch",
                                     std::to_string(o.global_batch),
                                     "--seq-len",
                                     std::to_string(o.seq_len),
                                     "--out",
                                     (out / "plan").string(),
                                     "--for-executor"};
  if (!o.fix.empty()) plan_args.insert(plan_args.end(), {"--fix", o.fix});
  step(plan_args);
  if (!fs::exists(out / "plan" / "plan.json")) {
    throw core::ConfigError(str_cat("cpt run --model: no configuration of ", o.model, " fits ", o.gpus, " x ", gpu,
                                    (o.fix.empty() ? std::string() : str_cat(" with --fix ", o.fix)),
                                    " (cpt plan's lines above say why)"));
  }
  // The contract: what train reads is the file the planner wrote.
  const auto plan = spec::load_plan(out / "plan" / "plan.json");
  const auto& p = plan.parallel;
  std::cout << str_cat("[2/3] train: tp ", p.tp, ", cp ", p.cp, ", pp ", p.pp, ", dp ", p.dp,
                       plan.model.moe.present() ? str_cat(", ep ", p.ep) : std::string(), ", ZeRO ", p.zero_stage,
                       ", micro-batch ", p.micro_batch, " x ", p.grad_accum(), " on ", p.world_size(), " local rank",
                       p.world_size() == 1 ? "" : "s", "\n")
            << std::flush;
  std::vector<std::string> train{"train",
                                 "--plan",
                                 (out / "plan" / "plan.json").string(),
                                 "--config",
                                 o.config,
                                 "--out",
                                 (out / "train").string()};
  if (p.world_size() > 1) train.insert(train.end(), {"--nproc-per-node", std::to_string(p.world_size())});
  step(train);
  std::cout << "[3/3] predicted vs measured\n" << std::flush;
  if (o.cpu) {
    step({"compare", (out / "train").string()});
  } else {
    std::cout << "  (planned for " << gpu << ", trained on this machine: the prediction is for " << gpu
              << "; cpt compare applies to runs on the planned hardware)\n";
  }
  std::cout << "done: " << out.string() << "\n";
}

}  // namespace cpt::cli
