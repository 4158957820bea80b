#pragma once
// The hand-off: a plan written as the inputs of the frameworks people already run, so that a plan
// made by cpt can be executed by Megatron-LM, DeepSpeed or torchtitan as well as by cpt's own
// executor. Each function is a pure rendering of spec::Plan; what a framework cannot express is
// said in a comment at the top of the file it writes (e.g. ZeRO-3 in Megatron-LM, context
// parallelism in DeepSpeed). Names follow the frameworks' documented options (versions in
// docs/planner.md, "Hand-off").

#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "core/json_reader.h"
#include "spec/plan.h"
#include "spec/runtime.h"

namespace cpt::planner {

// Megatron-LM (pretrain_gpt.py) arguments, one per line, as a sourceable bash array MEGATRON_ARGS.
std::string megatron_args(const spec::Plan& plan);
// DeepSpeed ds_config.json (planner/deepspeed_export.cpp).
core::Json deepspeed_config(const spec::Plan& plan);
// Whether the exports train `plan` in bf16.
bool trains_in_bf16(const spec::Plan& plan);
// A torchrun launcher for one node (multi-node: set NNODES, NODE_RANK, MASTER_ADDR) and a Slurm
// batch script, both taking the job's TRAIN.json as their first argument and starting
// `cpt train --plan PLAN_DIR/plan.json --config TRAIN.json [their other arguments]` on every GPU.
// torchrun.sh finds plan.json beside itself; Slurm runs a copy of its script, so slurm.sbatch
// carries `plan_dir` (made absolute) and refuses to start when plan.json is not there.
std::string torchrun_script(const spec::Plan& plan);
std::string slurm_script(const spec::Plan& plan, const std::filesystem::path& plan_dir);

// Why the framework reading the export for `runtime` cannot run `parallel` of `model` (cpt's
// executor: spec::find_executor_gap; DeepSpeed-MoE refuses ZeRO-3; torchtitan's expert tensor
// parallelism is 1 or tp), or nullopt.
std::optional<std::string> export_cannot_run(const spec::ModelSpec& model, const spec::ParallelConfig& parallel,
                                             int seq_len, spec::Runtime runtime);

// Writes megatron_args.sh, ds_config.json, torchtitan.toml, torchtitan_config.py (torchtitan 0.3),
// torchrun.sh and slurm.sbatch into `dir`
// (atomically each); returns the file names.
std::vector<std::string> write_handoff(const spec::Plan& plan, const std::filesystem::path& dir);

}  // namespace cpt::planner
