#include "costmodel/sim/failures.h"

#include <algorithm>
#include <cmath>

#include "core/check.h"

namespace cpt::cost::sim {

core::Seconds expected_wall_time(core::Seconds solve, core::Seconds interval, const FailureModel& f) {
  const double M = f.mtbf_job.value();
  const double tau = interval.value();
  CPT_CHECK(M > 0 && tau > 0, "MTBF ", M, " s, interval ", tau, " s");
  const double d = f.checkpoint_write.value();
  const double R = f.restart.value();
  return core::Seconds(M * std::exp(R / M) * std::expm1((tau + d) / M) * solve.value() / tau);
}

CheckpointPlan optimal_checkpoint_interval(core::Seconds solve, const FailureModel& f) {
  const double M = f.mtbf_job.value();
  const double d = f.checkpoint_write.value();
  CheckpointPlan p;
  p.daly_first_order = core::Seconds(d < M / 2 ? std::sqrt(2 * d * M) - d : M);
  // T_wall(τ)/T is convex in τ > 0: golden-section search in log τ over a wide bracket.
  double lo = std::log(std::max(1e-3, M * 1e-6)), hi = std::log(M * 20);
  const double g = (std::sqrt(5.0) - 1) / 2;
  auto cost = [&](double log_tau) { return expected_wall_time(solve, core::Seconds(std::exp(log_tau)), f).value(); };
  double a = hi - g * (hi - lo), b = lo + g * (hi - lo);
  double fa = cost(a), fb = cost(b);
  for (int i = 0; i < 200; ++i) {
    if (fa < fb) {
      hi = b;
      b = a;
      fb = fa;
      a = hi - g * (hi - lo);
      fa = cost(a);
    } else {
      lo = a;
      a = b;
      fa = fb;
      b = lo + g * (hi - lo);
      fb = cost(b);
    }
  }
  p.interval = core::Seconds(std::exp((lo + hi) / 2));
  p.wall_time = expected_wall_time(solve, p.interval, f);
  p.overhead = p.wall_time / solve - 1;
  return p;
}

}  // namespace cpt::cost::sim
