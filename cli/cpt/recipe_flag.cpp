#include "cli/cpt/recipe_flag.h"

#include <CLI/CLI.hpp>
#include <vector>

#include "core/error.h"
#include "core/log.h"
#include "core/str_cat.h"
#include "spec/model_io.h"
#include "spec/token_budget.h"

namespace cpt::cli {

CLI::Option* add_recipe_option(CLI::App& command, std::string& path) {
  return command.add_option("--config", path,
                            "TRAIN.json of the job (the file cpt train takes): price its continual recipe, KL "
                            "distillation's teacher and EWC's Fisher and anchor");
}

std::optional<spec::TrainConfig> read_recipe(const std::string& path) {
  if (path.empty()) return std::nullopt;
  return spec::load_train_config(path);
}

std::optional<spec::TrainConfig> run_recipe(const std::filesystem::path& run_dir) {
  const auto path = run_dir / "train_config.json";
  if (!std::filesystem::exists(path)) return std::nullopt;
  return spec::load_train_config(path);
}

cost::CostModelOptions with_recipe(cost::CostModelOptions options, const std::optional<spec::TrainConfig>& recipe) {
  if (!recipe) return options;
  options.distill_teacher = recipe->distill.has_value();
  options.ewc = recipe->ewc.has_value();
  options.aux_loss_per_sequence = recipe->router_aux_loss_per_sequence;
  return options;
}

std::int64_t recipe_tokens(const std::optional<spec::TrainConfig>& recipe, int global_batch, int seq_len) {
  if (!recipe) return 0;
  const bool padded = recipe->packing == spec::Packing::kPadded;
  if (recipe->tokens) {
    if (padded) {
      core::warn(recipe->origin.string(), ": $.tokens: a padded run turns the budget into steps by its documents' ",
                 "mean length (cpt train prints it), more steps than this plan's ", global_batch, " x ", seq_len,
                 " tokens each; give \"epochs\" or \"steps\" to plan the run it trains");
    }
    return *recipe->tokens;
  }
  if (recipe->steps) return *recipe->steps * global_batch * seq_len;
  if (!recipe->epochs) return 0;
  std::vector<spec::MixtureShare> shares;
  for (std::size_t i = 0; i < recipe->data.size(); ++i) {
    const auto& set = recipe->data[i];
    if (!set.path) {
      throw core::ConfigError(core::str_cat(
          recipe->origin.string(), ": $.data[", i, "] (\"", set.name, "\"): expected a prepared data set (\"path\") ",
          "to count \"epochs\" in tokens, got raw text (\"sources\"); prepare it with cpt-exec data prepare, or give ",
          "--tokens"));
    }
    const auto key = padded ? "documents" : "tokens";
    shares.push_back(
        {set.name, padded ? spec::manifest_documents(*set.path) : spec::manifest_tokens(*set.path), set.weight});
    if (shares.back().tokens == 0) {
      throw core::ConfigError(core::str_cat(set.path->string(), "/manifest.json: $.", key, ": expected a data set ",
                                            "with ", key, " to count \"epochs\", got 0"));
    }
  }
  if (!padded) return spec::tokens_for_epochs(shares, *recipe->epochs);
  // A step of global_batch documents, priced as global_batch × seq_len tokens.
  const auto steps = spec::steps_for_epochs(shares, *recipe->epochs, global_batch, seq_len, recipe->packing);
  if (steps > (std::int64_t{1} << 62) / (std::int64_t{global_batch} * seq_len)) {
    throw core::ConfigError(core::str_cat(recipe->origin.string(), ": $.epochs: ", steps, " padded steps of ",
                                          global_batch, " x ", seq_len,
                                          " tokens are more than a run can count (2^62)"));
  }
  return steps * global_batch * seq_len;
}

spec::ModelSpec model_of_recipe(spec::ModelSpec model, const std::optional<spec::TrainConfig>& recipe,
                                std::string& note) {
  note.clear();
  if (!recipe || !recipe->init_from) return model;
  const auto start = spec::load_model_directory(*recipe->init_from);
  if (!start || (start->vocab == model.vocab && start->num_params() == model.num_params())) return model;
  spec::ModelSpec extended = model;
  extended.vocab = start->vocab;
  if (extended.num_params() != start->num_params()) {
    throw core::ConfigError(core::str_cat("--model: ", model.name, " (", model.num_params(),
                                          " parameters) is not the model TRAIN.json's init_from holds (",
                                          recipe->init_from->string(), ": ", start->num_params(),
                                          " parameters); plan the model training starts from: --model ",
                                          recipe->init_from->string()));
  }
  note = core::str_cat("vocabulary: ", start->vocab, " tokens, as TRAIN.json's init_from holds it (", model.name,
                       " has ", model.vocab, ")");
  return extended;
}

std::string describe_recipe(const cost::CostModelOptions& options) {
  if (options.distill_teacher && options.ewc) return "KL teacher, EWC";
  if (options.distill_teacher) return "KL teacher";
  if (options.ewc) return "EWC";
  return "none";
}

}  // namespace cpt::cli
