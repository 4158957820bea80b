#pragma once
// `--config TRAIN.json` on the commands that price a plan (estimate, plan): the job cpt train will
// run (spec/train_config.h), so that the plan prices its continual recipe — KL distillation's
// teacher and EWC's state (cost::CostModelOptions::distill_teacher, ewc).
#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>

#include "costmodel/cost_options.h"
#include "spec/model_spec.h"
#include "spec/train_config.h"

namespace CLI {
class App;
class Option;
}  // namespace CLI

namespace cpt::cli {

CLI::Option* add_recipe_option(CLI::App& command, std::string& path);

// TRAIN.json at `path`, read as cpt train reads it; nullopt when `path` is empty. Throws
// core::ConfigError naming the file and key for a TRAIN.json cpt train would refuse.
std::optional<spec::TrainConfig> read_recipe(const std::string& path);
// The copy of TRAIN.json a cpt train output directory keeps (RUN_DIR/train_config.json); nullopt
// for a run without one.
std::optional<spec::TrainConfig> run_recipe(const std::filesystem::path& run_dir);

// `options` with the continual recipe `recipe` states (unchanged without one).
cost::CostModelOptions with_recipe(cost::CostModelOptions options, const std::optional<spec::TrainConfig>& recipe);

// The run's length in tokens as `recipe` states it ("tokens"; "steps" of `global_batch` sequences
// of `seq_len`; "epochs" over its prepared training sets' manifests, spec/token_budget.h); 0
// without a recipe or when it states none. ConfigError for "epochs" over a raw-text set (its
// tokens are known only once cpt train prepares it) or an unreadable manifest. With packing
// "padded" an epoch counts documents, and the steps cpt train will take come back as full-width
// steps' tokens; a "tokens" budget comes back as it is, with a warning (the steps depend on the
// documents' lengths, which only the shards hold).
std::int64_t recipe_tokens(const std::optional<spec::TrainConfig>& recipe, int global_batch, int seq_len);

// `model` as the job trains it. When TRAIN.json's init_from is a model this machine can read (a
// cpt checkpoint or a Hugging Face directory, spec::load_model_directory) with `model`'s layout but
// another vocabulary — one extended by `cpt checkpoint extend-vocab` — the result has init_from's
// vocabulary and `note` says so in one line; otherwise `model` unchanged and `note` empty.
// ConfigError when init_from is another model altogether (its parameters differ beyond the
// vocabulary's rows).
spec::ModelSpec model_of_recipe(spec::ModelSpec model, const std::optional<spec::TrainConfig>& recipe,
                                std::string& note);

// "KL teacher, EWC" or "none": what a report says was priced.
std::string describe_recipe(const cost::CostModelOptions& options);

}  // namespace cpt::cli
