#include "executor/train/run_checkpoints.h"

#include "core/error.h"
#include "core/log.h"
#include "core/str_cat.h"
#include "executor/checkpoint/checkpoint.h"
#include "executor/io/model_weights.h"
#include "spec/model_io.h"

namespace cpt::exec {

using core::str_cat;
namespace fs = std::filesystem;

TrainerCounters resume_from_latest(const fs::path& root, const spec::ModelSpec& model, RankModel& rank,
                                   const OptimizerChoice& choice, DataLoader& loader, const ParameterSplits& splits,
                                   const torch::Device& device) {
  TrainerCounters counters;
  const auto ckpt = latest_valid_checkpoint(root);
  if (!ckpt) {
    // Starting over would overwrite the run's history with a run it did not ask for.
    if (has_step_directories(root)) {
      throw core::RuntimeError(str_cat("--resume: no checkpoint in ", root.string(),
                                       " verifies (each is named above); nothing was changed"));
    }
    core::info0("resume: no checkpoint in ", root.string(), " yet; starting at step 0");
    return counters;
  }
  if (!(ckpt->model() == model)) {
    const auto difference = spec::first_model_difference(ckpt->model(), model);
    throw core::ConfigError(str_cat(ckpt->dir().string(), ": a checkpoint of model ", ckpt->model().name,
                                    ", which differs from the plan's model ", model.name,
                                    difference.empty() ? "" : str_cat(" (", difference, ", checkpoint against plan)")));
  }
  if (choice.zero3 != nullptr) choice.zero3->gather_all();
  for (auto& chunk : rank.chunks) load_model_weights(*chunk, ckpt->dir());
  if (choice.zero3 != nullptr) choice.zero3->reshard_from_params();
  if (!ckpt->has_optimizer()) throw core::ConfigError(str_cat(ckpt->dir().string(), ": no optimizer state to resume"));
  const auto opt = ckpt->optimizer();
  choice.optimizer->load_full_state(
      [&](const std::string& n) {
        return shard_of_full_tensor(n, opt.load(n, torch::kFloat32), model.vocab, splits).contiguous().to(device);
      },
      ckpt->dir().string());
  const auto& st = ckpt->trainer_state();
  counters.step = st.at("step").get<std::int64_t>();
  counters.tokens = st.at("tokens").get<std::int64_t>();
  counters.skipped = st.value("skipped_steps", std::int64_t{0});
  counters.lr_scale = st.value("lr_scale", 1.0);
  counters.kl_steps_over_threshold = st.value("kl_steps_over_threshold", std::int64_t{0});
  loader.restore(st.at("data"), ckpt->dir().string());
  if (auto rng = ckpt->rng(); rng && rng->contains("cpu")) {
    auto gen = at::detail::getDefaultCPUGenerator();
    gen.set_state(rng->load("cpu", torch::kUInt8));
  }
  core::info0("resume: from ", ckpt->dir().string(), " at step ", counters.step);
  return counters;
}

fs::path save_run_checkpoint(const fs::path& root, const TrainerCounters& counters, const spec::ModelSpec& model,
                             RankModel& rank, const OptimizerChoice& choice, const DataLoader& loader,
                             const TrainConfig& config, const LrSchedule& schedule,
                             const FullStateGroups& full_state_groups, bool rank0) {
  auto state = gather_full_tensors(choice.optimizer->full_state(), model.vocab, full_state_groups);
  if (choice.zero3 != nullptr) choice.zero3->gather_all();
  NamedParams tensors = rank.named;
  tensors.insert(tensors.end(), rank.buffers.begin(), rank.buffers.end());
  auto weights = gather_full_tensors(tensors, model.vocab, full_state_groups);
  if (choice.zero3 != nullptr) {
    for (auto& [name, t] : weights) t = t.detach().clone();  // released next: keep a copy
    choice.zero3->release_all();
  }
  if (!rank0) return root / checkpoint_dir_name(counters.step);
  CheckpointContents c;
  c.step = counters.step;
  c.model = model;
  c.weights = std::move(weights);
  c.optimizer = std::move(state);
  c.rng.emplace_back("cpu", at::detail::getDefaultCPUGenerator().get_state());
  c.trainer_state = {{"step", counters.step},
                     {"tokens", counters.tokens},
                     {"skipped_steps", counters.skipped},
                     {"data", loader.state()},
                     {"seed", config.seed},
                     {"lr_schedule", to_string(schedule.kind)},
                     {"lr_peak", schedule.peak},
                     {"lr_scale", counters.lr_scale},
                     {"kl_steps_over_threshold", counters.kl_steps_over_threshold}};
  const auto dir = write_checkpoint(root, c);
  prune_checkpoints(root, config.checkpoint.keep_last, dir);
  return dir;
}

}  // namespace cpt::exec
