#pragma once
// Training under failures: checkpoint/restart with a first-order exponential failure model
// (Daly 2006, "A higher order estimate of the optimum checkpoint interval for restart dumps",
// FGCS 22(3)). With solve time T (failure-free), checkpoint interval τ (compute between
// checkpoints), checkpoint write time δ, restart time R and job MTBF M (GPU MTBF / GPUs):
//   T_wall(τ) = M · e^(R/M) · (e^((τ+δ)/M) − 1) · T / τ
// and the optimum interval is found numerically (Daly's closed form √(2δM) − δ is its
// first-order approximation, reported beside it).

#include "core/units.h"

namespace cpt::cost::sim {

struct FailureModel {
  core::Seconds mtbf_job;         // mean time between failures of the whole job
  core::Seconds checkpoint_write; // δ
  core::Seconds restart;          // R: detect, reschedule, reload the checkpoint
};

// REQUIRES: interval, mtbf_job > 0.
core::Seconds expected_wall_time(core::Seconds solve_time, core::Seconds interval, const FailureModel& f);

struct CheckpointPlan {
  core::Seconds interval;          // the τ that minimises the expected wall time
  core::Seconds daly_first_order;  // √(2δM) − δ (or M when δ >= M/2)
  core::Seconds wall_time;         // at the optimum
  double overhead = 0;             // wall_time / solve_time − 1
};
CheckpointPlan optimal_checkpoint_interval(core::Seconds solve_time, const FailureModel& f);

}  // namespace cpt::cost::sim
