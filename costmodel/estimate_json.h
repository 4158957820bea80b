#pragma once
// The JSON of an evaluation: the keys of `cpt estimate --json` (a stable contract; other tools and
// plan.predicted read them). Memory in GiB, time in seconds, rates per GPU.

#include "core/json_reader.h"
#include "costmodel/step_estimator.h"
#include "spec/plan.h"

namespace cpt::cost {

// {feasible, infeasible_reason, infeasible_detail, step_time_s, tokens_per_s_per_gpu,
//  model_tflops_per_gpu, mfu, hfu, flop_convention, peak_memory_GiB, worst_pp_rank,
//  memory_GiB {weights, grads, optimizer, activations, other}, memory_GiB_per_pp_rank [...],
//  kernels_per_step, calls_per_step {tp, cp, dp, pp, ep}, bytes_per_step {the same groups},
//  time_s {compute, recompute, tp_comm, cp_comm, ep_comm, pp_comm, pp_bubble, dp_comm, optimizer,
//  continual, other}, time_by_kind_s {gemm, attention, loss, optimizer, communication, other}}
core::Json evaluation_to_json(const Evaluation& evaluation);
core::Json memory_to_json(const MemoryBreakdown& m);
core::Json time_to_json(const StepTimeBreakdown& t);
core::Json time_by_kind_to_json(const StepTimeByKind& k);
// The prediction a plan file carries (spec::Prediction: step_time_s, tokens_per_s_per_gpu, mfu,
// time_s as step_time_breakdown_s, memory_GiB as peak_memory_GiB_per_rank).
// plan.json's "predicted": the estimate and the regime it was priced in (`options`).
// `gpu`: what it was priced on, for the band of its step time (error_band.h).
spec::Prediction prediction_of(const Estimate& e, const CostModelOptions& options, const spec::GpuSpec& gpu);
// {"shortest", "longest", "validation_rows", "source"} of the band error_band.h gives a step of
// `predicted` seconds for `runtime` on `gpu`, or null where none covers them.
core::Json step_time_band_to_json(core::Seconds predicted, spec::Runtime runtime, const spec::GpuSpec& gpu);
// The options a prediction was priced with: the defaults with its precision, attention kernel and
// runtime (for_runtime).
CostModelOptions options_of(const spec::Prediction& p);

}  // namespace cpt::cost
