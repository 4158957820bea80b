#pragma once
// The learning-rate areas a continual-training loss law reads (Tissue et al. 2024, "Scaling Law
// with Learning Rate Annealing", arXiv 2408.11029; Wang et al. 2025, arXiv 2505.07796, use the
// same two areas for continual pre-training):
//
//   forward area    S1(k) = Σ_{s<k} η_s
//   annealing area  S2(k) = Σ_{s<k} m_s,   m_s = λ·m_{s−1} + max(0, η_{s−1} − η_s),  m_{−1} = 0
//
// η_s is the learning rate step s used (steps count from 0, as in metrics.jsonl), k the number of
// steps done (as eval.jsonl numbers its evaluations), λ the decay of the annealing momentum
// (0.999 in Tissue et al.). A warm-up (η rising) adds forward area and no annealing area.
#include <span>
#include <vector>

#include "spec/lr_schedule.h"

namespace cpt::forecast {

inline constexpr double kAnnealingMomentum = 0.999;

// Index k holds the areas after k steps, k = 0 .. lr_per_step.size().
struct LrAreas {
  std::vector<double> forward;
  std::vector<double> annealing;
};

LrAreas lr_areas(std::span<const double> lr_per_step, double momentum = kAnnealingMomentum);

// The learning rate of each of `schedule.total_steps` steps.
std::vector<double> lr_per_step(const spec::LrSchedule& schedule);

}  // namespace cpt::forecast
