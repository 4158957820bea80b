#include <cmath>

#include "costmodel/cost_options.h"

namespace cpt::cost {

double EfficiencyCurve::at(double flops) const {
  if (points.empty()) return 1.0;
  const double x = std::log10(std::max(flops, 1.0) / 1e9);
  if (x <= std::log10(points.front().gflops)) return points.front().efficiency;
  for (std::size_t i = 1; i < points.size(); ++i) {
    const double x1 = std::log10(points[i].gflops);
    if (x <= x1) {
      const double x0 = std::log10(points[i - 1].gflops);
      const double w = (x - x0) / (x1 - x0);
      return points[i - 1].efficiency + w * (points[i].efficiency - points[i - 1].efficiency);
    }
  }
  return points.back().efficiency;
}

}  // namespace cpt::cost
