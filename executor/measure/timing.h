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

// As time_per_call, but `evict` runs before every call, untimed: for work whose inputs come from
// memory in training rather than from the caches a tight loop keeps them in.
template <class Fn, class Evict>
double time_per_cold_call(Fn&& fn, Evict&& evict, double budget, int min_calls = 2) {
  using Clock = std::chrono::steady_clock;
  fn();
  int calls = 0;
  double timed = 0;
  const auto start = Clock::now();
  while (calls < min_calls || std::chrono::duration<double>(Clock::now() - start).count() < budget) {
    evict();
    const auto t0 = Clock::now();
    fn();
    timed += std::chrono::duration<double>(Clock::now() - t0).count();
    ++calls;
  }
  return timed / calls;
}

}  // namespace cpt::exec
