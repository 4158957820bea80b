#include "core/order_statistics.h"

#include <algorithm>
#include <cmath>
#include <cstddef>

namespace cpt::core {

double median(std::vector<double> values) {
  if (values.empty()) return std::nan("");
  const auto n = values.size();
  const auto upper = values.begin() + static_cast<std::ptrdiff_t>(n / 2);
  std::nth_element(values.begin(), upper, values.end());
  if (n % 2 == 1) return *upper;
  // The lower middle is the largest of the half below.
  return 0.5 * (*std::max_element(values.begin(), upper) + *upper);
}

double nearest_rank_quantile(std::vector<double> values, double q) {
  if (values.empty()) return std::nan("");
  const auto n = values.size();
  const auto rank = static_cast<std::size_t>(std::ceil(std::clamp(q, 0.0, 1.0) * static_cast<double>(n)));
  const auto k = std::min(n - 1, rank == 0 ? std::size_t{0} : rank - 1);
  const auto nth = values.begin() + static_cast<std::ptrdiff_t>(k);
  std::nth_element(values.begin(), nth, values.end());
  return *nth;
}

double linear_quantile(std::vector<double> values, double q) {
  if (values.empty()) return std::nan("");
  std::sort(values.begin(), values.end());
  const double at = std::clamp(q, 0.0, 1.0) * static_cast<double>(values.size() - 1);
  const auto lo = static_cast<std::size_t>(std::floor(at)), hi = static_cast<std::size_t>(std::ceil(at));
  return values[lo] + (values[hi] - values[lo]) * (at - static_cast<double>(lo));
}

}  // namespace cpt::core
