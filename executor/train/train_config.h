#pragma once
// TRAIN.json as the executor reads it: spec/train_config.h (the planner prices the same file), its
// names brought into the executor's namespace.
#include "executor/train/lr_schedule.h"
#include "spec/train_config.h"

namespace cpt::exec {

using spec::CheckpointConfig;
using spec::DataSetConfig;
using spec::DistillConfig;
using spec::EwcConfig;
using spec::load_train_config;
using spec::TokenizerConfig;
using spec::TrainConfig;

}  // namespace cpt::exec
