#pragma once
// Order statistics of a sample (the fit's bins, a run's step times, the doctor's windows).
#include <vector>

namespace cpt::core {

// The median: the middle value, or the mean of the two middle values of an even count; NaN for
// none.
double median(std::vector<double> values);

// The q-quantile by nearest rank (the ⌈q·n⌉-th smallest, the smallest for q = 0), q in [0, 1];
// NaN for none.
double nearest_rank_quantile(std::vector<double> values, double q);

// The q-quantile interpolated linearly between the closest ranks (numpy's default: position
// q·(n − 1) in the sorted values), q in [0, 1]; NaN for none.
double linear_quantile(std::vector<double> values, double q);

}  // namespace cpt::core
