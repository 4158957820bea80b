#pragma once
// Learning-rate schedules as pure functions of the step (so a resumed run needs no schedule state).
//   cosine    linear warmup 0 -> peak over warmup_steps, then cosine decay to min_ratio·peak at
//             total_steps (Gupta et al. 2023 re-warm then re-decay; Ibrahim et al. 2024)
//   constant  linear warmup, then peak
//   wsd       warmup-stable-decay (Hu et al. 2024, MiniCPM): warmup, peak until decay starts at
//             total_steps·(1 - decay_fraction), then linear decay to min_ratio·peak
// Steps count from 0; step s uses lr(s).
#include <cstdint>
#include <string>

namespace cpt::spec {

enum class LrScheduleKind { kCosine, kConstant, kWsd };

struct LrSchedule {
  LrScheduleKind kind = LrScheduleKind::kCosine;
  double peak = 3e-4;
  std::int64_t warmup_steps = 0;
  double min_ratio = 0.1;       // floor as a fraction of peak (cosine, wsd)
  double decay_fraction = 0.2;  // wsd: share of total_steps spent decaying
  std::int64_t total_steps = 1;

  [[nodiscard]] double at(std::int64_t step) const;
};

std::string to_string(LrScheduleKind k);

}  // namespace cpt::spec
