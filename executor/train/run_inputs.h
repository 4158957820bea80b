#pragma once
// The tokenizer and data sets of a training run, made ready: an existing tokenizer is loaded or
// one is trained into OUT/tokenizer.model; raw-text data sets are prepared into OUT/data/<name>/
// (reused when already there for the same tokenizer and sources). Checks that the tokenizer, the
// data and the model agree on the vocabulary.
#include <filesystem>
#include <memory>
#include <optional>
#include <vector>

#include "executor/data/data_loader.h"
#include "executor/data/tokenizer.h"
#include "executor/train/train_config.h"
#include "spec/model_spec.h"

namespace cpt::exec {

struct RunInputs {
  std::optional<Tokenizer> tokenizer;
  std::vector<DataSource> train;
  std::vector<DataSource> eval;
  std::vector<std::int64_t> eval_sequences;  // per eval set
  std::optional<DataSource> ewc;             // the EWC Fisher estimate's data
};

// ConfigError naming the data set and both numbers when a vocabulary does not fit the model or
// a prepared data set was tokenized with another tokenizer.
RunInputs prepare_run_inputs(const TrainConfig& config, const spec::ModelSpec& model,
                             const std::filesystem::path& out_dir);

}  // namespace cpt::exec
