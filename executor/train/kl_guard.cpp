#include "executor/train/kl_guard.h"

#include "core/log.h"

namespace cpt::exec {

bool KlGuard::observe(std::int64_t step, double kl, const DistillConfig& distill) {
  if (!distill.guard_threshold) return false;
  steps_over = kl > *distill.guard_threshold ? steps_over + 1 : 0;
  if (steps_over < distill.guard_patience) return false;
  lr_scale *= distill.guard_lr_factor;
  steps_over = 0;
  core::warn("step ", step, ": KL ", kl, " above ", *distill.guard_threshold, " for ", distill.guard_patience,
             " steps; learning rate now x", lr_scale, " of the schedule");
  return true;
}

}  // namespace cpt::exec
