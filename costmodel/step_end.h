#pragma once
// The step time by cause on the critical pipeline rank, from the priced microbatch
// (work_pricing.h), the pipeline's terms, and the step's end added to the inventory for that rank:
// the data-parallel reduction (overlapped with the last backward), the ZeRO-1/2 all-gather, the
// hybrid all-reduce, the executor's scalar all-reduces and the optimizer step. Also the folds
// Estimate::calls_per_step and Estimate::kernels_per_step over the same inventory.

#include "costmodel/step_estimator.h"
#include "costmodel/step_inventory.h"
#include "costmodel/work_pricing.h"

namespace cpt::cost {

// The pipeline rank that finishes last, and the pipeline's share of the step on it. (With uneven
// stages, DeepSeek's dense first layers, it may hold less work than the others and wait for them:
// its breakdown then shows that wait as its bubble.)
struct CriticalRank {
  RankShare share;
  double backward_s = 0;    // its backward over its stages, one microbatch
  core::Seconds pp_comm;    // transfers on the critical path
  core::Seconds pp_bubble;  // idle time in the schedule
  // Its wall-clock compute over its compute at the profile's rates: 1 unless ranks share CPU cores
  // and it computed while others waited (compute_sharing.h). Scales its per-microbatch terms.
  double compute_scale = 1;
};

// The step-end terms of StageDurations, and the step's counts on the critical rank.
struct StepEnd {
  core::Seconds dp_reduce;
  int dp_buckets = 1;
  int dp_reductions = 1;
  core::Seconds dp_after;
  core::Seconds optimizer;
  core::Seconds outside_schedule;  // StageDurations::outside_schedule
  double kernels = 0;              // dispatched by the critical rank in the step (kernel_dispatch.h)
  CallsPerStep calls;
  BytesPerStep bytes;
};

// Fills `time` (StepTimeBreakdown) for the critical rank. `inventory`: microbatch_work's, to which
// the critical rank's step end is added (add_step_end_work); `charges`: its price_microbatch;
// `groups`: the step end's group sizes.
StepEnd step_time(const spec::ModelSpec& model, const spec::ClusterSpec& cluster, const spec::ParallelConfig& parallel,
                  const CostModelOptions& options, StepInventory& inventory, const MicrobatchCharges& charges,
                  const PricingContext& context, const StepEndGroups& groups, const CriticalRank& critical,
                  StepTimeBreakdown& time);

}  // namespace cpt::cost
