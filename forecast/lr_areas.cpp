#include "forecast/lr_areas.h"

#include <algorithm>

namespace cpt::forecast {

LrAreas lr_areas(std::span<const double> lr_per_step, double momentum) {
  LrAreas areas;
  areas.forward.assign(lr_per_step.size() + 1, 0.0);
  areas.annealing.assign(lr_per_step.size() + 1, 0.0);
  double annealing_momentum = 0;
  for (std::size_t step = 0; step < lr_per_step.size(); ++step) {
    const double decrease = step == 0 ? 0.0 : std::max(0.0, lr_per_step[step - 1] - lr_per_step[step]);
    annealing_momentum = momentum * annealing_momentum + decrease;
    areas.forward[step + 1] = areas.forward[step] + lr_per_step[step];
    areas.annealing[step + 1] = areas.annealing[step] + annealing_momentum;
  }
  return areas;
}

std::vector<double> lr_per_step(const spec::LrSchedule& schedule) {
  std::vector<double> lr(static_cast<std::size_t>(std::max<std::int64_t>(schedule.total_steps, 0)));
  for (std::size_t step = 0; step < lr.size(); ++step) lr[step] = schedule.at(static_cast<std::int64_t>(step));
  return lr;
}

}  // namespace cpt::forecast
