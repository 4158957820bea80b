#pragma once
// PipelineSchedule: one training step's pipeline work as data — for each pipeline rank, the
// ordered list of actions it performs (torchtitan's custom_schedule.csv and
// torch.distributed.pipelining's action lists). The simulator replays it, the executor interprets
// it, and the cost model counts its bubble and in-flight microbatches from it.
//
// Conventions for one (stage s, microbatch m):
//   kRecvActivation(s, m)  receive the input of stage s from stage s−1          (s > 0)
//   kForward(s, m)         forward pass of stage s
//   kSendActivation(s, m)  send the output of stage s to stage s+1             (s < S−1)
//   kRecvGrad(s, m)        receive the gradient of stage s's output from s+1   (s < S−1)
//   kBackward(s, m)        full backward of stage s; or, split (zero-bubble schedules):
//   kBackwardInput(s, m)   input-gradient part, then kBackwardWeight(s, m) the weight-gradient part
//   kSendGrad(s, m)        send the gradient of stage s's input to stage s−1   (s > 0)
// Stage s runs on pipeline rank s mod pp (spec/stage_partition.h).
//
// Communication semantics (what find_schedule_error proves deadlock freedom under): a send is
// posted without blocking (isend) and completes when its receive runs; a receive blocks until the
// matching send has been posted.

#include <optional>
#include <span>
#include <string>
#include <vector>

#include "spec/parallel_config.h"

namespace cpt::spec {

// DO NOT CHANGE the letters: they appear in CSV schedules ("F", "B", "I", "W", "SA", "RA", "SG", "RG").
enum class ActionKind {
  kForward,
  kBackward,
  kBackwardInput,
  kBackwardWeight,
  kSendActivation,
  kRecvActivation,
  kSendGrad,
  kRecvGrad
};

struct Action {
  ActionKind kind = ActionKind::kForward;
  int stage = 0;
  int microbatch = 0;
  bool operator==(const Action&) const = default;
};

std::string to_string(ActionKind k);
std::string to_string(const Action& a);  // "F2.5" = forward of stage 2, microbatch 5

struct PipelineSchedule {
  ScheduleKind kind = ScheduleKind::k1F1B;
  int pp = 1;
  int virtual_stages = 1;
  int num_microbatches = 0;
  std::vector<std::vector<Action>> per_rank;  // per_rank[pp_rank] = ordered actions

  [[nodiscard]] int num_stages() const { return pp * virtual_stages; }
  bool operator==(const PipelineSchedule&) const = default;
};

// The schedule of `kind` for `pp` ranks, `virtual_stages` chunks per rank and `num_microbatches`.
//   GPipe            all forwards, then all backwards.
//   1F1B             warm-up of min(pp − rank − 1, m) forwards, then one forward / one backward,
//                    then the remaining backwards (Narayanan et al. 2021, §2.2; PipeDream-Flush).
//   interleaved 1F1B Megatron's schedule: microbatches in rounds of pp, each round through every
//                    chunk; warm-up of (pp − rank − 1)·2 + (v − 1)·pp (Narayanan et al. 2021, §2.2).
//   ZB-H1            1F1B with split backward (I, W): at step x rank r runs F(x), I(x − (pp − 1 − r)),
//                    W(x − (pp − 1)) (Qi et al. 2024, ZB-H1); bubble (pp − 1)(F + B − 2W) instead
//                    of (pp − 1)(F + B), every rank holding pp microbatches as 1F1B's rank 0 does.
// REQUIRES: pp >= 1, num_microbatches >= 1; virtual_stages == 1 unless kInterleaved1F1B; for
// kInterleaved1F1B pp >= 2, virtual_stages >= 2 and num_microbatches % pp == 0.
PipelineSchedule make_schedule(ScheduleKind kind, int pp, int virtual_stages, int num_microbatches);

// Proves the schedule is executable, or says why not: every (stage, microbatch) is run forward and
// backward exactly once on the rank that owns the stage; each rank's order respects the data
// dependencies (receive before forward, forward before backward, ...); every send has exactly one
// matching receive on the neighbouring stage's rank and vice versa; and executing all ranks under
// the semantics above completes (no deadlock). Returns std::nullopt when all hold.
std::optional<std::string> find_schedule_error(const PipelineSchedule& schedule);

// The largest number of microbatches whose activations a pipeline rank holds at once (forwards
// done whose backward has not yet run, over all its chunks). 1F1B: min(pp − rank, m).
int max_in_flight(const PipelineSchedule& schedule, int pp_rank);

// The largest total weight of live microbatches on a pipeline rank, where a (stage, microbatch)
// is live from its forward to its backward (or, split, to its weight-gradient part) and weighs
// weight_of_stage[stage] (e.g. the activation bytes of that stage's layers). With all weights 1 this
// is max_in_flight. REQUIRES: weight_of_stage.size() == num_stages().
double max_live_weight(const PipelineSchedule& schedule, int pp_rank, std::span<const double> weight_of_stage);

// max_in_flight without building the schedule, for fast evaluation: GPipe m; 1F1B min(pp − rank,
// m); ZB-H1 min(pp, m); interleaved 1F1B its warm-up (pp − rank − 1)·2 + (v − 1)·pp (all m·v when m == pp) plus one,
// capped at m·v. Equal to max_in_flight(make_schedule(...), rank) (pipeline_schedule_test.cpp).
int in_flight_closed_form(ScheduleKind kind, int pp, int virtual_stages, int num_microbatches, int pp_rank);

// Point-to-point transfers stage `stage` of `num_stages` takes part in per microbatch and pass: a
// receive from the stage before and a send to the stage after (forward: activations; backward:
// their gradients, the other way), none into the first stage or out of the last.
inline int stage_transfers_per_pass(int stage, int num_stages) {
  return (stage > 0 ? 1 : 0) + (stage < num_stages - 1 ? 1 : 0);
}
// Of pipeline rank `pp_rank`'s stages (stage s on rank s mod pp), per microbatch and forward pass:
// the sends out of each but the last stage, and the receives into each but the first (backward the
// other way round); 0 without a pipeline.
inline int rank_sends_per_pass(int pp, int virtual_stages, int pp_rank) {
  return pp <= 1 ? 0 : virtual_stages - (pp_rank == pp - 1 ? 1 : 0);
}
inline int rank_receives_per_pass(int pp, int virtual_stages, int pp_rank) {
  return pp <= 1 ? 0 : virtual_stages - (pp_rank == 0 ? 1 : 0);
}
// Both together: 2v, less one on the first rank and one on the last.
// Inline: the planner's search calls it per candidate.
inline int rank_transfers_per_pass(int pp, int virtual_stages, int pp_rank) {
  return rank_sends_per_pass(pp, virtual_stages, pp_rank) + rank_receives_per_pass(pp, virtual_stages, pp_rank);
}

// Compute actions only, one CSV row per rank: "F0.0,F0.1,B0.0,...".
std::string to_csv(const PipelineSchedule& schedule);

}  // namespace cpt::spec
