#pragma once
// A plan as a torchtitan 0.3 config module (torchtitan_config.py): torchtitan 0.3 reads no TOML
// files; its ConfigManager imports `--module M` (a module on the Python path, or M.config_registry)
// and calls its function `--config F`, which returns a Trainer.Config. The module's `cpt_plan()`
// starts from the config of the model's family in torchtitan's own registry (llama3_8b or
// qwen3_30b_a3b), puts the plan's model flavour in it (model_registry), and sets what the plan
// chose, as the 0.2.x TOML does (torchtitan_export.h): the data-parallel replicate and shard
// degrees (HSDP, FSDP without resharding for ZeRO 0-2 beside other parallelism), tp, cp, pp with
// its schedule, microbatch and even split, ep (torchtitan 0.3 folds ep over dp_shard × cp × tp, its
// experts whole, and without ep shards them over tp: an etp other than that is named in a
// comment), activation
// checkpointing, offload, and the base model's Hugging Face weights as the initial checkpoint.
// A model torchtitan has no flavour of makes cpt_plan() raise, naming its dimensions, rather than
// train another model.
//
// The base model's Hugging Face directory and the data come from CPT_BASE_MODEL_HF_DIR and
// CPT_DATA_DIR (torchtitan 0.3 wants absolute paths; absolute placeholders without them).
// Run: PYTHONPATH=<plan dir> torchrun ... -m torchtitan.train --module torchtitan_config --config cpt_plan
#include <string>

#include "spec/plan.h"

namespace cpt::planner {

std::string torchtitan_module(const spec::Plan& plan);

}  // namespace cpt::planner
