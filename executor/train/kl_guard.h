#pragma once
// The KL guard of distillation (DistillConfig::guard_*): when the step's KL stays above the
// threshold for `guard_patience` consecutive steps, the learning rate is multiplied by
// `guard_lr_factor`, and counting starts again. Its state is checkpointed (TrainerCounters).
#include <cstdint>

#include "executor/train/train_config.h"

namespace cpt::exec {

struct KlGuard {
  double lr_scale = 1.0;          // the cut of the learning rate so far
  std::int64_t steps_over = 0;    // consecutive steps with KL above the threshold

  // After step `step` with KL `kl`. Returns true when it cut the learning rate (and warns).
  // No-op without a threshold.
  bool observe(std::int64_t step, double kl, const DistillConfig& distill);
};

}  // namespace cpt::exec
