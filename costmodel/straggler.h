#pragma once
// Waiting for the slowest rank. A blocking collective completes when the last rank of its group
// arrives; when the ranks' compute between two calls varies independently with standard deviation
// σ, each rank waits on average E[max of n] − E[own] = σ · e_n for the others, with e_n the
// expected maximum of n standard normal variables (e_2 = 1/√π ≈ 0.564, e_8 ≈ 1.424). The
// device's compute jitter j gives σ = j · √T over T seconds of compute (independent per-operator
// noise adds in variance); `cpt calibrate` measures j on a CPU, where it is large (other processes,
// the ranks' own Gloo threads); a GPU profile without it keeps pace (j = 0).
#include "core/units.h"

namespace cpt::cost {

// e_n: E[max of n independent standard normals]; 0 for n <= 1. Tabulated for n <= 16, Blom's
// approximation beyond.
double expected_max_of_normals(int n);

// What one rank waits, on average, at a blocking call of a group of `group` ranks after `segment`
// of compute since the group's previous call.
core::Seconds straggler_wait(double jitter_sqrt_s, core::Seconds segment, int group);

}  // namespace cpt::cost
