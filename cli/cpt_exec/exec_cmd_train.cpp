// cpt train --plan PLAN --config TRAIN.json [--out DIR] [--resume] [--steps N] [--device D]
#include <filesystem>
#include <optional>
#include <utility>
#include <vector>
#include <CLI/CLI.hpp>
#include <cstdint>
#include <cstdlib>
#include <iostream>

#include "cli/numeric_flags.h"
#include "cli/cpt_exec/exec_commands.h"
#include "cli/forwarded_flags.h"
#include "core/directory_lock.h"
#include "core/str_cat.h"
#include "core/error.h"
#include "executor/device.h"
#include "executor/dist/local_launcher.h"
#include "executor/dist/rank_board.h"
#include "executor/checkpoint/checkpoint_manifest.h"
#include "executor/io/model_weights.h"
#include "executor/train/run_inputs.h"
#include "executor/train/trainer.h"
#include "core/json_reader.h"
#include "spec/model_io.h"
#include "spec/plan.h"

namespace cpt::cli {

namespace {

// Set by cpt's launcher for its ranks: it holds OUT's lock for them.
constexpr const char* kOutLockedByLauncher = "CPT_OUT_LOCKED_BY_LAUNCHER";

struct TrainArgs {
  std::string plan, config, out = "runs/train", device;
  bool resume = false;
  std::int64_t steps = 0, stop_at = 0, profile_step = -1;
  exec::LocalLaunch launch;
};

// A new run (no --resume) into a directory that holds one would cut its metrics and leave its
// checkpoints for a later --resume to mix in: refused once OUT is locked, before training starts.
void refuse_another_runs_out(const TrainArgs& args) {
  if (args.resume) return;
  const std::filesystem::path out(args.out);
  std::error_code ec;
  const bool metrics = std::filesystem::exists(out / "metrics.jsonl", ec);
  const bool checkpoints =
      std::filesystem::is_directory(out / "checkpoints", ec) && !std::filesystem::is_empty(out / "checkpoints", ec);
  if (metrics || checkpoints) {
    throw core::ConfigError(core::str_cat("--out ", args.out, ": holds a training run (",
                                          metrics ? "metrics.jsonl" : "checkpoints/",
                                          "): --resume continues it; a new run needs another directory"));
  }
}

// The model a weight source holds, as its manifest or config.json states it; nullopt for a Hugging
// Face config cpt does not read (the ranks then load its tensors by name and shape alone).
std::optional<spec::ModelSpec> model_of_weights(const std::filesystem::path& source) {
  if (!exec::is_hf_directory(source)) {
    return exec::read_checkpoint_manifest(core::parse_json_file(source / "manifest.json"), source).model;
  }
  try {
    return exec::read_hf_model_spec(source);
  } catch (const core::ConfigError&) {
    return std::nullopt;
  }
}

// The weights the ranks start from and distil against, where every rank would fail to find or
// load them: checked once, by the launcher, on the model each source states. (Each rank verifies
// the files' checksums and every tensor's shape as it loads them.)
void check_weight_sources(const std::string& config_path, const spec::TrainConfig& config,
                          const spec::ModelSpec& planned) {
  std::vector<std::pair<const char*, std::filesystem::path>> sources;
  if (config.init_from) sources.emplace_back("init_from", *config.init_from);
  if (config.distill && config.distill->teacher) sources.emplace_back("distill.teacher", *config.distill->teacher);
  for (const auto& [key, source] : sources) {
    const auto refuse = [&, &key = key, &source = source](const char* problem) {
      throw core::ConfigError(core::str_cat(config_path, ": ", key, " ", source.string(), ": ", problem));
    };
    std::error_code ec;
    if (!std::filesystem::is_directory(source, ec)) refuse("no such directory");
    if (exec::is_hf_directory(source)) {
      if (!std::filesystem::exists(source / "model.safetensors", ec) &&
          !std::filesystem::exists(source / "model.safetensors.index.json", ec)) {
        refuse("a Hugging Face directory without weights (no model.safetensors or model.safetensors.index.json)");
      }
    } else if (!std::filesystem::exists(source / "manifest.json", ec)) {
      refuse("neither a cpt checkpoint (no manifest.json) nor a Hugging Face directory (no config.json)");
    }
    if (const auto held = model_of_weights(source)) {
      if (const auto difference = spec::first_shape_difference(*held, planned); !difference.empty()) {
        throw core::ConfigError(core::str_cat(config_path, ": ", key, " ", source.string(), ": weights of model ",
                                              held->name, ", which the plan's model ", planned.name, " cannot load (",
                                              difference, ", weights against plan)"));
      }
    }
  }
}

// The launcher: checks the input once, prepares the run's inputs on one node, and starts this
// node's ranks with its own arguments, minus the launch flags (cli/forwarded_flags.h).
void launch_ranks(const TrainArgs& args, const CLI::App& command) {
  const auto a =
      forwarded_arguments(command, {"--nproc-per-node", "--nnodes", "--node-rank", "--master-addr", "--master-port"});
  // Bad input is reported once, here, not by every rank.
  const auto plan = spec::load_plan(args.plan);
  const auto config = exec::load_train_config(args.config);
  const std::int64_t processes = std::int64_t{args.launch.nnodes} * args.launch.nproc_per_node;
  if (processes != plan.parallel.world_size()) {
    throw core::ConfigError(core::str_cat(
        "--nproc-per-node ", args.launch.nproc_per_node,
        args.launch.nnodes > 1 ? core::str_cat(" × --nnodes ", args.launch.nnodes) : std::string(), ": ", args.plan,
        " needs ", plan.parallel.world_size(), " processes (tp · cp · dp · pp), got ", processes));
  }
  exec::check_plan_runs(plan, args.plan);
  check_weight_sources(args.config, config, plan.model);
  exec::check_device(args.device.empty() ? config.device : args.device, args.launch.nproc_per_node);
  // On one node the tokenizer and data sets are made ready (trained, prepared, checked against
  // the model's vocabulary) here, once; the ranks find them in OUT and reuse them. (Several
  // nodes may share OUT's file system: their launchers must not prepare it at once.)
  // One job per OUT: node 0's launcher holds the lock for the job (its ranks know, below).
  std::optional<core::DirectoryLock> lock;
  if (args.launch.node_rank == 0) {
    lock.emplace(core::DirectoryLock::acquire(args.out, "another cpt train"));
    refuse_another_runs_out(args);
  }
  ::setenv(kOutLockedByLauncher, "1", 1);
  if (args.launch.nnodes == 1) (void)exec::prepare_run_inputs(config, plan.model, args.out);
  const int code = exec::run_local_ranks(a, args.launch);
  if (code != 0) throw ExitWith{code};
}

// One rank (or the only process): trains, and rank 0 prints the summary.
void train_rank(const TrainArgs& args) {
  (void)exec::RankReporter::of_this_process();  // a launched rank's heartbeat starts now (rank_board.h)
  const auto plan = spec::load_plan(args.plan);
  const auto config = exec::load_train_config(args.config);
  // One process, or rank 0 of a job that torchrun or Slurm started, holds OUT's lock.
  std::optional<core::DirectoryLock> lock;
  const char* rank = std::getenv("RANK");
  if (std::getenv(kOutLockedByLauncher) == nullptr && (rank == nullptr || std::string(rank) == "0")) {
    lock.emplace(core::DirectoryLock::acquire(args.out, "another cpt train"));
    refuse_another_runs_out(args);
  }
  exec::check_plan_runs(plan, args.plan);  // named once here; each rank checks again
  exec::TrainOptions o;
  o.out_dir = args.out;
  o.resume = args.resume;
  if (args.steps > 0) o.steps = args.steps;
  if (args.stop_at > 0) o.stop_at = args.stop_at;
  if (!args.device.empty()) o.device = args.device;
  if (args.profile_step >= 0) o.profile_step = args.profile_step;
  const auto s = exec::train(plan, config, o);
  if (rank != nullptr && std::string(rank) != "0") {
    if (s.stopped) throw ExitWith{core::kExitStopped};
    return;
  }
  if (s.last_step == s.first_step && !s.stopped) {
    std::cout << core::str_cat("nothing to train: the run is at step ", s.last_step,
                               ", the end of its schedule; checkpoint ", s.checkpoint.string(), "\n");
    return;
  }
  std::cout << core::str_cat("trained steps ", s.first_step, " -> ", s.last_step, ": final loss ", s.final_loss, ", ",
                             static_cast<long long>(s.tokens_per_s), " tokens/s",
                             s.skipped_steps > 0 ? core::str_cat(", ", s.skipped_steps, " steps skipped") : "",
                             "; checkpoint ", s.checkpoint.string(), "\n");
  if (s.stopped) throw ExitWith{core::kExitStopped};
}

}  // namespace

void register_exec_train_command(CLI::App& app) {
  auto args = std::make_shared<TrainArgs>();
  auto* cmd = app.add_subcommand("train",
                                 "Run one rank of the training job a plan describes (`cpt train` launches every rank)");
  cmd->add_option("--plan", args->plan, "plan.json (from `cpt plan --out`)")->required();
  cmd->add_option("--config", args->config, "TRAIN.json: data, tokenizer, steps, schedule (docs/train_config.md)")
      ->required();
  cmd->add_option("--out", args->out, "Output directory: metrics.jsonl, eval.jsonl, checkpoints/, measured.json")
      ->capture_default_str();
  cmd->add_flag("--resume", args->resume, "Continue from the newest valid checkpoint in OUT/checkpoints");
  cmd->add_option("--steps", args->steps, "Train this many steps in total (overrides TRAIN.json)")
      ->check(cli::positive_number());
  cmd->add_option("--stop-at", args->stop_at, "Stop with a checkpoint after this step (resume later with --resume)")
      ->check(cli::positive_number());
  cmd->add_option("--profile-step", args->profile_step,
                  "Profile this step (0-based) on every rank: OUT/profile/step_S.rank_R.trace.json (Perfetto) and "
                  ".ops.json (time by operator)")
      ->check(CLI::NonNegativeNumber);
  cmd->add_option("--device", args->device, "auto, cpu or cuda (overrides TRAIN.json)")
      ->check(CLI::IsMember({"auto", "cpu", "cuda"}));
  cmd->add_option("--nproc-per-node", args->launch.nproc_per_node,
                  "Start this many ranks on this node (the plan's tp · cp · dp · pp over all nodes)")
      ->check(cli::positive_number());
  cmd->add_option("--nnodes", args->launch.nnodes, "Nodes in the job (run the same command on each)")
      ->check(cli::positive_number());
  cmd->add_option("--node-rank", args->launch.node_rank, "This node's index in [0, nnodes)")
      ->check(CLI::NonNegativeNumber);
  cmd->add_option("--master-addr", args->launch.master_addr, "Address of node 0 (rendezvous)")->capture_default_str();
  cmd->add_option("--master-port", args->launch.master_port,
                  "Rendezvous port on node 0 (default: a free port, one node)")
      ->check(cli::whole_number_in(1, 65535));
  cmd->callback([args, cmd] {
    const bool inside_job = std::getenv("RANK") != nullptr || std::getenv("SLURM_PROCID") != nullptr;
    if (!inside_job && (args->launch.nproc_per_node > 1 || args->launch.nnodes > 1)) {
      launch_ranks(*args, *cmd);
    } else {
      train_rank(*args);
    }
  });
}

}  // namespace cpt::cli
