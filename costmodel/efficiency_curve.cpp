#include "costmodel/cost_options.h"

namespace cpt::cost {

double EfficiencyCurve::at(double flops) const {
  return interpolate_efficiency(points, flops);
}

}  // namespace cpt::cost
