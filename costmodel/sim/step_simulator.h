#pragma once
// simulate_step(): a discrete-event replay of one training step of one data-parallel replica's
// pipeline (tensor and context parallelism are folded into the durations; every replica is the same,
// so one replica stands for all: a 1,024-GPU plan simulates in milliseconds).
//
// Each pipeline rank has a compute stream, which runs its schedule's actions in order, a
// point-to-point stream for its sends and a collective stream for the data-parallel gradient
// buckets. A send is queued on the sender's point-to-point stream when its forward (backward) ends;
// the receiver's compute stream waits in its receive action until the transfer has finished. The
// gradients of a reduction become ready bucket by bucket during the backward that produces them
// (the last microbatch's, or every microbatch's for ZeRO-2) and are reduced on the collective
// stream while compute continues. After the last reduction come the all-gather (ZeRO-1/2) or the
// cross-node all-reduce (HSDP), then the optimizer step on the compute stream.
//
// Every duration comes from the cost model (cost::StageDurations): the simulator adds the order,
// the waiting and the overlap, never a second formula. Computing beside communication costs what
// the estimate's `other` charges: a compute task is lengthened by StageDurations::overlap_slowdown
// times the ZeRO-3 communication hidden in it and times the time a data-parallel bucket runs beside
// it. Not simulated: bandwidth shared between the p2p and collective streams. Failures are a
// separate model (failures.h).

#include <string>
#include <vector>

#include "core/units.h"
#include "costmodel/pipeline_replay.h"
#include "costmodel/step_estimator.h"
#include "spec/pipeline_schedule.h"

namespace cpt::cost::sim {

// kP2p carries pipeline sends, kCollective the data-parallel buckets and the step-end collective:
// separate NCCL communicators and streams, as in Megatron-LM and DDP (the link bandwidth they share
// is not modelled).
enum class Stream { kCompute = 0, kP2p = 1, kCollective = 2 };

struct Interval {
  int pp_rank = 0;
  Stream stream = Stream::kCompute;
  double start_s = 0;
  double end_s = 0;
  std::string name;  // "F2.5", "B2.5", "send act 2.5", "dp bucket 3/12", "optimizer"
  int replica = 0;   // data-parallel replica (always 0 in the symmetric mode)
};

struct MemorySample {
  int pp_rank = 0;
  double time_s = 0;
  double bytes = 0;  // static model state + live activations
  int replica = 0;
};

struct SimulationResult {
  core::Seconds step_time;
  int critical_rank = 0;               // the pipeline rank that finishes last
  int critical_replica = 0;            // and its data-parallel replica
  double bubble_fraction = 0;          // the busiest rank's idle share of the step (waiting on the pipeline)
  core::Seconds exposed_comm;          // the critical rank waiting on communication after its last backward
  std::vector<double> compute_busy_s;  // per pipeline rank (the largest over replicas)
  // Per pipeline rank: the step less its compute and its communication after its last backward,
  // the time it waits on the pipeline (the smallest over replicas).
  std::vector<double> idle_s;
  std::vector<double> peak_bytes;    // per pipeline rank: static + peak live activations (largest over replicas)
  std::vector<Interval> intervals;   // every task, in completion order
  std::vector<MemorySample> memory;  // every change of a rank's memory
  std::uint64_t events = 0;
};

// `activation_bytes_per_stage[s]`: activations one microbatch leaves on stage s until its backward;
// `static_bytes_per_rank[r]`: everything else on pp rank r (weights, gradients, optimizer, other).
// REQUIRES: find_schedule_error(schedule) is empty; per-stage vectors have num_stages() entries.
//
// `speed` (empty: every rank at the profile's rates): ranks sharing CPU cores (compute_sharing.h),
// pipeline rank r computing at speed(computing, r) while the ranks with computing[q] != 0 compute,
// re-evaluated whenever one starts or ends a task (the estimate's exact replay does the same,
// pipeline_replay.h's replay_schedule_at_speeds).
SimulationResult simulate_step(const spec::PipelineSchedule& schedule, const StageDurations& durations,
                               const std::vector<double>& activation_bytes_per_stage,
                               const std::vector<double>& static_bytes_per_rank, const RankSpeed& speed = {});

// The full per-rank mode: every data-parallel replica's pipeline, each with its own durations (a
// straggler slows one replica's stages, a degraded link one replica's transfers or one pipeline
// rank's data-parallel collective). A gradient bucket's reduction and the step-end collective span
// all replicas of a pipeline rank: they start when the last replica reaches them and take the
// longest of the replicas' durations. With identical replicas it equals simulate_step.
// REQUIRES: as simulate_step, for every replica; all replicas have the same dp_reductions.
SimulationResult simulate_replicas(const spec::PipelineSchedule& schedule, const std::vector<StageDurations>& replicas,
                                   const std::vector<double>& activation_bytes_per_stage,
                                   const std::vector<double>& static_bytes_per_rank, const RankSpeed& speed = {});

}  // namespace cpt::cost::sim
