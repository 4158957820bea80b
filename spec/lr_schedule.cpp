#include "spec/lr_schedule.h"

#include <algorithm>
#include <cmath>
#include <numbers>

namespace cpt::spec {

double LrSchedule::at(std::int64_t step) const {
  if (step < warmup_steps) return peak * static_cast<double>(step + 1) / static_cast<double>(warmup_steps);
  const double floor = peak * min_ratio;
  switch (kind) {
    case LrScheduleKind::kConstant:
      return peak;
    case LrScheduleKind::kCosine: {
      const auto span = std::max<std::int64_t>(1, total_steps - warmup_steps);
      const double progress = std::min(1.0, static_cast<double>(step - warmup_steps) / static_cast<double>(span));
      return floor + (peak - floor) * 0.5 * (1.0 + std::cos(std::numbers::pi * progress));
    }
    case LrScheduleKind::kWsd: {
      const auto decay_steps = std::max<std::int64_t>(
          1, static_cast<std::int64_t>(std::llround(static_cast<double>(total_steps) * decay_fraction)));
      const auto decay_start = total_steps - decay_steps;
      if (step < decay_start) return peak;
      const double progress = std::min(1.0, static_cast<double>(step - decay_start) / static_cast<double>(decay_steps));
      return peak + (floor - peak) * progress;
    }
  }
  return peak;
}

std::string to_string(LrScheduleKind k) {
  switch (k) {
    case LrScheduleKind::kCosine:
      return "cosine";
    case LrScheduleKind::kConstant:
      return "constant";
    case LrScheduleKind::kWsd:
      return "wsd";
  }
  return "?";
}

}  // namespace cpt::spec
