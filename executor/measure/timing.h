#pragma once
// Timing of repeated calls for the machine measurements (host_probe.h, calibration_probe.h).
#include <algorithm>
#include <chrono>

#include "executor/device.h"

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

// time_per_call for work on `device`: on a CUDA device, whose work is queued, the calls run
// back to back and the device is synchronised once at the end (each call's launch overlaps the
// previous call's kernels, as in training); the count comes from one synchronised call.
template <class Fn>
double time_per_call_on(const torch::Device& device, Fn&& fn, double budget, int min_calls = 2) {
  if (!device.is_cuda()) return time_per_call(fn, budget, min_calls);
  using Clock = std::chrono::steady_clock;
  fn();
  synchronize(device);
  const auto t0 = Clock::now();
  fn();
  synchronize(device);
  const double first = std::chrono::duration<double>(Clock::now() - t0).count();
  const int calls = std::max(min_calls, static_cast<int>(std::min(10000.0, budget / std::max(first, 1e-6))));
  const auto t1 = Clock::now();
  for (int i = 0; i < calls; ++i) fn();
  synchronize(device);
  return std::chrono::duration<double>(Clock::now() - t1).count() / calls;
}

}  // namespace cpt::exec
