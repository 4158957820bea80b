#pragma once
// Timing of repeated calls for the machine measurements (host_probe.h, calibration_probe.h).
#include <chrono>

namespace cpt::exec {

// Calls `fn` once to warm up, then until `budget` seconds pass and at least `min_calls` times;
// returns the mean seconds per timed call.
template <class Fn>
double time_per_call(Fn&& fn, double budget, int min_calls = 2) {
  using Clock = std::chrono::steady_clock;
  fn();
  int calls = 0;
  const auto t0 = Clock::now();
  double elapsed = 0;
  while (calls < min_calls || elapsed < budget) {
    fn();
    ++calls;
    elapsed = std::chrono::duration<double>(Clock::now() - t0).count();
  }
  return elapsed / calls;
}

}  // namespace cpt::exec
