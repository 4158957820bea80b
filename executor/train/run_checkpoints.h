#pragma once
// A training run's checkpoints (checkpoint/checkpoint.h) as the trainer writes and resumes them:
// whole tensors gathered to rank 0 from tensor shards, pipeline stages and ZeRO shards
// (full_state.h), with the loader's position, the CPU generator and the trainer's counters.
#include <cstdint>
#include <filesystem>

#include "executor/data/data_loader.h"
#include "executor/parallel/full_state.h"
#include "executor/train/lr_schedule.h"
#include "executor/train/optimizer_choice.h"
#include "executor/train/rank_model.h"
#include "executor/train/train_config.h"

namespace cpt::exec {

// What a checkpoint carries of the loop besides weights, optimizer state and the loader.
struct TrainerCounters {
  std::int64_t step = 0;     // steps completed
  std::int64_t tokens = 0;   // seen
  std::int64_t skipped = 0;  // non-finite updates skipped
  double lr_scale = 1.0;     // the KL guard's cut of the learning rate
  std::int64_t kl_steps_over_threshold = 0;
};

// The newest checkpoint under `root` that verifies, loaded into the model, the optimizer and the
// loader; zero counters when `root` holds no step directory yet. ConfigError for a checkpoint of
// another model or one without optimizer state; RuntimeError when step directories exist but none
// verifies (nothing is changed then).
TrainerCounters resume_from_latest(const std::filesystem::path& root, const spec::ModelSpec& model, RankModel& rank,
                                   const OptimizerChoice& choice, DataLoader& loader, const ParameterSplits& splits,
                                   const torch::Device& device);

// COLLECTIVE: every rank gathers; rank 0 writes root/step_N and prunes to TRAIN.json's keep_last.
// Returns the directory (on every rank).
std::filesystem::path save_run_checkpoint(const std::filesystem::path& root, const TrainerCounters& counters,
                                          const spec::ModelSpec& model, RankModel& rank, const OptimizerChoice& choice,
                                          const DataLoader& loader, const TrainConfig& config,
                                          const LrSchedule& schedule, const FullStateGroups& full_state_groups,
                                          bool rank0);

}  // namespace cpt::exec
