#pragma once
// `--config TRAIN.json` on the commands that price a plan (estimate, plan): the job cpt train will
// run (spec/train_config.h), so that the plan prices its continual recipe — KL distillation's
// teacher and EWC's state (cost::CostModelOptions::distill_teacher, ewc).
#include <cstdint>
#include <string>

#include "costmodel/cost_options.h"

namespace CLI {
class App;
class Option;
}  // namespace CLI

namespace cpt::cli {

CLI::Option* add_recipe_option(CLI::App& command, std::string& path);

// `options` with the recipe of TRAIN.json at `path` (unchanged when `path` is empty). Throws
// core::ConfigError naming the file and key for a TRAIN.json cpt train would refuse.
cost::CostModelOptions with_recipe(cost::CostModelOptions options, const std::string& path);

// The run's length in tokens as TRAIN.json at `path` states it ("tokens", or "steps" of
// `global_batch` sequences of `seq_len`); 0 when `path` is empty or states neither.
std::int64_t recipe_tokens(const std::string& path, int global_batch, int seq_len);

// "KL teacher, EWC" or "none": what a report says was priced.
std::string describe_recipe(const cost::CostModelOptions& options);

}  // namespace cpt::cli
