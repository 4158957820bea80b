#include "cli/recipe_flag.h"

#include <CLI/CLI.hpp>

#include "spec/train_config.h"

namespace cpt::cli {

CLI::Option* add_recipe_option(CLI::App& command, std::string& path) {
  return command.add_option("--config", path,
                            "TRAIN.json of the job (the file cpt train takes): price its continual recipe, KL "
                            "distillation's teacher and EWC's Fisher and anchor");
}

cost::CostModelOptions with_recipe(cost::CostModelOptions options, const std::string& path) {
  if (path.empty()) return options;
  const spec::TrainConfig config = spec::load_train_config(path);
  options.distill_teacher = config.distill.has_value();
  options.ewc = config.ewc.has_value();
  return options;
}

std::int64_t recipe_tokens(const std::string& path, int global_batch, int seq_len) {
  if (path.empty()) return 0;
  const spec::TrainConfig config = spec::load_train_config(path);
  if (config.tokens) return *config.tokens;
  if (config.steps) return *config.steps * global_batch * seq_len;
  return 0;
}

std::string describe_recipe(const cost::CostModelOptions& options) {
  if (options.distill_teacher && options.ewc) return "KL teacher, EWC";
  if (options.distill_teacher) return "KL teacher";
  if (options.ewc) return "EWC";
  return "none";
}

}  // namespace cpt::cli
