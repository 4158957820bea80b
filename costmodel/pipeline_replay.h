#pragma once
// Replays a spec::PipelineSchedule with per-stage durations and returns when each rank finishes:
// the list scheduling that makes the bubble exact for any (pp, v, m), uneven stages and heavier
// first and last stages, where closed forms such as (p−1)/(m+p−1) only hold for uniform stages.
//
// Each rank runs its actions in order on one compute stream. A forward (backward) starts when the
// rank is free and its input activation (output gradient) has arrived; a send is asynchronous and
// its data arrives `p2p_after[s]` after the producing compute ends (stage s -> s+1, and back).

#include <functional>
#include <span>
#include <vector>

#include "core/units.h"
#include "spec/pipeline_schedule.h"

namespace cpt::cost {

struct ReplayResult {
  core::Seconds makespan;             // last action of any rank
  std::vector<core::Seconds> busy;    // wall-clock time each rank computes
  std::vector<core::Seconds> finish;  // finish time of each rank
  std::vector<core::Seconds> work;    // each rank's compute at the given durations (= busy at speed 1)
};

// A split backward (zero-bubble schedules) runs as I, taking backward_s − weight_grad_s and
// sending the input gradient when it ends, and W, taking weight_grad_s.
// REQUIRES: find_schedule_error(schedule) is empty; one entry per stage in each span (seconds);
// weight_grad_s has one entry per stage when the schedule has split backwards (else may be empty).
ReplayResult replay_schedule(const spec::PipelineSchedule& schedule, std::span<const double> forward_s,
                             std::span<const double> backward_s, std::span<const double> p2p_after_s,
                             std::span<const double> weight_grad_s = {});

// The replay on ranks whose speed depends on which of them compute at the moment (ranks sharing CPU
// cores: costmodel/compute_sharing.h): `speed(computing, r)` is rank r's rate, relative to the
// durations given, while the ranks with computing[q] != 0 compute. A fluid replay: between two
// events (a compute ending, a transfer arriving) every computing rank progresses at its rate; at
// each event the set and the rates are renewed. With speed ≡ 1 it equals replay_schedule (for
// schedules whose sends follow their compute, as spec::make_schedule's do).
// REQUIRES: as replay_schedule; speed(...) > 0.
using RankSpeed = std::function<double(std::span<const char> computing, int pp_rank)>;
ReplayResult replay_schedule_at_speeds(const spec::PipelineSchedule& schedule, std::span<const double> forward_s,
                                       std::span<const double> backward_s, std::span<const double> p2p_after_s,
                                       std::span<const double> weight_grad_s, const RankSpeed& speed);

// The closed form of the replay, for fast evaluation in a search: with W_r the forward + backward
// time of pipeline rank r over its chunks (one microbatch) and r* the busiest rank,
//   makespan = m·W_{r*} + Σ_{r ≠ r*} W_r / v + 2·Σ_s p2p_after[s] / v
// which is exact for uniform stages without transfers ((m + p − 1)·W for 1F1B, the bubble divided
// by v when interleaved; Narayanan et al. 2021 §2.2) and approximates uneven stages
// (pipeline_replay_test.cpp bounds the difference). busy and finish have one entry per rank:
// m·W_r and, for r*, the makespan (others: their busy time; the closed form does not place them).
// Zero bubble (ZB-H1, `weight_grad_s` non-empty): each other rank's term is W_r − 2·Wgrad_r (its
// weight-gradient parts fill the bubble; Qi et al. 2024: (p − 1)(F + B − 2W)), floored at the
// forward time; exact for uniform stages without transfers (pipeline_replay_test.cpp).
// REQUIRES: pp·virtual_stages entries in each span; stage s runs on rank s mod pp.
ReplayResult closed_form_makespan(int pp, int virtual_stages, int num_microbatches, std::span<const double> forward_s,
                                  std::span<const double> backward_s, std::span<const double> p2p_after_s,
                                  std::span<const double> weight_grad_s = {});

// The two parts of the closed form, for callers that sum the ranks themselves (the search's O(1)
// evaluation, step_estimator.cpp): a non-critical rank's term in the bubble from its forward,
// backward and weight-gradient time over its chunks (f + b; under zero bubble max(f + b − 2w, f)),
// and the makespan from the critical rank's work W, the sum of the other ranks' terms and the sum
// of the transfers after each stage.
double bubble_fill(double forward_s, double backward_s, double weight_grad_s, bool zero_bubble);
struct PipelineTerms {
  double makespan_s = 0;   // m·W + others / v + 2·transfers / v
  double bubble_s = 0;     // others / v
  double transfers_s = 0;  // 2·transfers / v
};
PipelineTerms closed_form_terms(int virtual_stages, int num_microbatches, double critical_work_s, double others_s,
                                double transfers_s);

}  // namespace cpt::cost
