#include "costmodel/straggler.h"

#include <array>
#include <cmath>
#include <numbers>

namespace cpt::cost {

double expected_max_of_normals(int n) {
  // E[max of n] for n = 0..16 (Tippett 1925; Harter 1961).
  static constexpr std::array<double, 17> kTable{0,      0,      0.5642, 0.8463, 1.0294, 1.1630, 1.2672, 1.3522, 1.4236,
                                                 1.4850, 1.5388, 1.5864, 1.6292, 1.6680, 1.7034, 1.7359, 1.7660};
  if (n <= 1) return 0;
  if (n < static_cast<int>(kTable.size())) return kTable[static_cast<std::size_t>(n)];
  // Blom's approximation, Φ⁻¹((n − 0.375) / (n + 0.25)) (within 1% here), by Newton's method.
  const double p = (n - 0.375) / (n + 0.25);
  double x = std::sqrt(2 * std::log(static_cast<double>(n)));
  for (int i = 0; i < 50; ++i) {
    const double cdf = 0.5 * std::erfc(-x / std::numbers::sqrt2);
    const double pdf = std::exp(-x * x / 2) / std::sqrt(2 * std::numbers::pi);
    const double step = (cdf - p) / pdf;
    x -= step;
    if (std::abs(step) < 1e-12) break;
  }
  return x;
}

core::Seconds straggler_wait(double jitter_sqrt_s, core::Seconds segment, int group) {
  if (jitter_sqrt_s <= 0 || group <= 1 || segment.value() <= 0) return core::Seconds(0);
  return core::Seconds(jitter_sqrt_s * std::sqrt(segment.value()) * expected_max_of_normals(group));
}

}  // namespace cpt::cost
