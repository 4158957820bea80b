#include "costmodel/step_end.h"

#include <algorithm>

#include "costmodel/kernel_dispatch.h"
#include "costmodel/layer_costs.h"
#include "costmodel/memory_model.h"
#include "costmodel/straggler.h"
#include "costmodel/token_dispatch.h"
#include "spec/pipeline_schedule.h"

namespace cpt::cost {

using core::Seconds;

namespace {

// Time to move `bytes` over PCIe for CPU offload (Gen4 x16, per direction).
constexpr double kPcieBytesPerSecond = 25e9;
// Adam on the host: parameters updated per second by a vectorised CPU optimizer (DeepSpeed's
// CPU Adam reports ~1e9 parameters/s per socket).
constexpr double kCpuAdamParamsPerSecond = 1e9;

// What the step's end needs of the inventory's entries, in one pass over them.
struct StepEndSums {
  double transfer_resumes = 0;  // the pipeline's blocking calls
  Seconds behind_backward;      // one gradient reduction
  double reduced_bytes = 0;     // of that reduction
  Seconds after_backward;
  Seconds scalars_tp, scalars_pp, scalars_dp;
  double kernels_dp = 0, kernels_pp = 0, kernels_scalars = 0;  // around calls outside the passes
  CallsPerStep calls;
  BytesPerStep bytes;
};

void add_for_group(CommGroup group, double calls, PerCommGroup& out) {
  switch (group) {
    case CommGroup::kTp:
      out.tp += calls;
      break;
    case CommGroup::kCp:
      out.cp += calls;
      break;
    case CommGroup::kPp:
      out.pp += calls;
      break;
    case CommGroup::kExpert:
    case CommGroup::kExpertTp:
      out.ep += calls;
      break;
    default:
      out.dp += calls;
  }
}

// The kernels around the rank's pipeline transfers of `pass` in one microbatch (forward and the
// teacher's: its sends and receives; backward the other way round).
double transfer_kernels(WorkPass pass, const spec::ParallelConfig& p, const RankShare& share,
                        const CostModelOptions& o) {
  const double sends = spec::rank_sends_per_pass(p.pp, p.virtual_stages, share.pp_rank);
  const double receives = spec::rank_receives_per_pass(p.pp, p.virtual_stages, share.pp_rank);
  if (pass == WorkPass::kBackward) {
    const TransferKernels k = gradient_transfer_kernels(o);
    return receives * k.send + sends * k.receive;
  }
  const TransferKernels k = pass == WorkPass::kTeacher ? teacher_transfer_kernels(o) : activation_transfer_kernels(o);
  return sends * k.send + receives * k.receive;
}

StepEndSums sum_step_end(const StepInventory& inv, const spec::ParallelConfig& p, const RankShare& share,
                         double microbatches, const PricingContext& context) {
  StepEndSums sums;
  for (const WorkItem& item : inv.items()) {
    const double times = times_per_step(item.scope, share, microbatches, inv);
    add_for_group(item.group, item.calls * times, sums.calls);
    // A sequence-parallel pair moves its bytes twice: gathered, then reduce-scattered; a flex
    // dispatch its tokens once to each node and rank that needs them (token_dispatch.h).
    double moved = item.kind == WorkKind::kReduceScatterAllGather ? 2.0 : 1.0;
    if (item.kind == WorkKind::kFlexDispatch && context.experts != nullptr) {
      const FlexCopies copies = flex_copies(*context.experts, context.groups->of(item.group));
      moved = copies.over_network + copies.over_nvlink;
    }
    add_for_group(item.group, static_cast<double>(item.bytes.value()) * item.operations * moved * times, sums.bytes);
    if (item.kind == WorkKind::kScalarAllReduce) {
      const Seconds seconds = price(item, context, Seconds(0));
      (item.group == CommGroup::kTp   ? sums.scalars_tp
       : item.group == CommGroup::kPp ? sums.scalars_pp
                                      : sums.scalars_dp) += seconds;
      sums.kernels_scalars += item.kernels * times;
    } else if (item.scope == WorkScope::kTransfer) {
      if (item.resumes) sums.transfer_resumes += item.calls * times;
      sums.kernels_pp += transfer_kernels(item.pass, p, share, *context.options) * microbatches;
    } else if (item.exposure == Exposure::kBehindBackward) {
      sums.behind_backward += price(item, context, Seconds(0));
      sums.reduced_bytes += static_cast<double>(item.bytes.value());
      sums.kernels_dp += item.kernels * times;
    } else if (item.exposure == Exposure::kAfterBackward) {
      sums.after_backward += price(item, context, Seconds(0)) * times;
      sums.kernels_dp += item.kernels * times;
    }
  }
  return sums;
}

// The critical rank's compute, recomputation and exposed TP, CP and ZeRO-3 communication of its
// microbatches (`layers`: its layers' charges), and the pipeline's terms. Returns the ZeRO-3 root
// unit's calls (outside the stage durations the replay ran).
Seconds microbatch_terms(const StepInventory& inv, const MicrobatchCharges& c, const LayerCharges& layers,
                         const StepEndSums& sums, const CriticalRank& critical, double microbatches,
                         StepTimeBreakdown& t, Seconds& zero3_exposed) {
  const RankShare& share = critical.share;
  const BlockCosts& block = layers.block;
  const HeadCosts& head = c.head;
  const double chunk_passes = share.chunks * microbatches;
  t.compute = (block.forward.total() + block.backward.total() + head.batch_entry.total()) * microbatches +
              head.chunk_entry.total() * chunk_passes;
  if (share.first) t.compute += (head.embedding_forward.total() + head.embedding_backward.total()) * microbatches;
  if (share.last) t.compute += (head.head_forward.total() + head.head_backward.total()) * microbatches;
  t.recompute = block.recompute.total() * microbatches;
  t.continual = block.teacher.total() * microbatches + head.teacher_chunk_entry.total() * chunk_passes;
  if (share.first) t.continual += head.teacher_embedding.total() * microbatches;
  if (share.last) t.continual += head.teacher_head.total() * microbatches;
  // The pipeline's receives and sends each cost the resume, as in the stage durations.
  t.compute += c.resume * sums.transfer_resumes;
  t.tp_comm = layers.tp * microbatches;
  if (share.first) t.tp_comm += (c.embedding_tp_forward + c.embedding_tp_backward) * microbatches;
  if (share.last) t.tp_comm += (c.head_tp_forward + c.head_tp_backward) * microbatches;
  t.cp_comm = layers.cp * microbatches;
  t.ep_comm = layers.ep * microbatches * critical.compute_scale;
  // The blocks' exposed gathers run inside the stage durations the replay ran at the rank's speed.
  zero3_exposed = layers.zero3 * microbatches * critical.compute_scale;
  const Seconds root = c.between_passes * times_per_step(WorkScope::kEmbedding, share, microbatches, inv);
  zero3_exposed += root;
  t.compute = t.compute * critical.compute_scale;
  t.recompute = t.recompute * critical.compute_scale;
  t.continual = t.continual * critical.compute_scale;
  t.tp_comm = t.tp_comm * critical.compute_scale;
  t.cp_comm = t.cp_comm * critical.compute_scale;
  t.pp_comm = critical.pp_comm;
  t.pp_bubble = critical.pp_bubble;
  return root;
}

// The data-parallel terms: the reduction behind the last backward (what its first bucket and the
// backward cannot hide), the work after it, the wait for the group's slowest rank at the last
// reduction, and the compute slowdown beside the overlapped traffic.
void data_parallel_terms(const StepInventory& inv, const MicrobatchCharges& c, const LayerCharges& layers,
                         const StepEndSums& sums, const PricingContext& context, const StepEndGroups& groups,
                         const CriticalRank& critical, double microbatches, Seconds zero3_exposed, StepTimeBreakdown& t,
                         StepEnd& end, Seconds& straggler) {
  const CostModelOptions& o = *context.options;
  const Seconds overlappable = sums.behind_backward;
  const Seconds bucket_time = overlappable.value() > 0
                                  ? overlappable * std::min(1.0, static_cast<double>(o.bucket_elements) *
                                                                     gradient_bytes_per_param(o) / sums.reduced_bytes)
                                  : Seconds(0);
  const Seconds backward(critical.backward_s * critical.compute_scale);
  const Seconds hidden =
      o.overlap_dp_with_backward ? std::max(Seconds(0), std::min(overlappable - bucket_time, backward)) : Seconds(0);
  const double reductions = inv.gradient_reductions;
  t.dp_comm = (overlappable - hidden) * reductions + sums.after_backward + zero3_exposed;
  if (inv.reduces_gradients) {
    straggler = straggler_wait(o.compute_jitter_sqrt_s, t.compute + t.recompute,
                               std::max(groups.shard_group, context.groups->of(CommGroup::kReplicas).size));
    t.dp_comm += straggler;
  }
  t.other = hidden * (reductions * c.overlap_slowdown) + layers.zero3_hidden * microbatches * c.overlap_slowdown;
  end.dp_reduce = o.overlap_dp_with_backward ? overlappable : Seconds(0);
  end.dp_buckets = static_cast<int>(inv.gradient_buckets);
  end.dp_reductions = inv.gradient_reductions;
  // Without overlap the reduction runs after backward: it joins the terms after the reductions.
  end.dp_after = sums.after_backward + (o.overlap_dp_with_backward ? Seconds(0) : overlappable * reductions);
}

// The optimizer step over this rank's shard (CostModelOptions::optimizer_bytes_per_param), with
// the step's kernels (`step_kernels`).
// Parameters of `share` this rank holds state of: its own over the shard group from ZeRO-1 on (the
// routed experts over expert-dp), or under ZeRO-3 alone (`zero_stage` 3 only) its shard.
double local_params(const RankShare& share, const spec::ParallelConfig& p, int shard_group, int from_stage) {
  if (p.zero_stage < from_stage) return share.params;
  return (share.params - share.expert_params) / shard_group + share.expert_params / p.expert_dp();
}

Seconds optimizer_time(const spec::ClusterSpec& cluster, const spec::ParallelConfig& p, const CostModelOptions& o,
                       const RankShare& share, int shard_group, double step_kernels) {
  const double local = local_params(share, p, shard_group, 1);
  const double opt_bytes = o.optimizer_bytes_per_param + (o.precision == spec::Precision::kFp16 ? 8.0 : 0.0);
  Seconds seconds;
  if (p.offload == spec::Offload::kNone) {
    seconds = Seconds(local * opt_bytes / (cluster.gpu().hbm_bandwidth.value() * o.hbm_efficiency));
  } else {
    seconds = Seconds(local * (gradient_bytes_per_param(o) + activation_bytes(o.precision)) / kPcieBytesPerSecond +
                      local / kCpuAdamParamsPerSecond);
  }
  return seconds + o.kernel_overhead * step_kernels;
}

}  // namespace

StepEnd step_time(const spec::ModelSpec& model, const spec::ClusterSpec& cluster, const spec::ParallelConfig& p,
                  const CostModelOptions& o, StepInventory& inv, const MicrobatchCharges& c,
                  const PricingContext& context, const StepEndGroups& groups, const CriticalRank& critical,
                  StepTimeBreakdown& t) {
  const RankShare& share = critical.share;
  const double microbatches = p.grad_accum();
  add_step_end_work(inv, model, p, groups, share, o);
  StepEnd end;
  const StepEndSums sums = sum_step_end(inv, p, share, microbatches, context);
  Seconds zero3_exposed, straggler;
  const LayerCharges layers = layers_of(c, share);
  const Seconds root = microbatch_terms(inv, c, layers, sums, critical, microbatches, t, zero3_exposed);
  data_parallel_terms(inv, c, layers, sums, context, groups, critical, microbatches, zero3_exposed, t, end, straggler);
  // The kernels around the data-parallel and pipeline calls (kernel_dispatch.h).
  t.dp_comm += o.kernel_overhead * sums.kernels_dp;
  t.pp_comm += o.kernel_overhead * sums.kernels_pp;
  end.outside_schedule = straggler + root + o.kernel_overhead * (sums.kernels_dp + sums.kernels_pp);
  // The executor's scalar all-reduces, once per step on every group: latency-bound calls that
  // join the step-end terms the simulator replays (StageDurations::dp_after).
  t.dp_comm += sums.scalars_dp;
  t.tp_comm += sums.scalars_tp;
  t.pp_comm += sums.scalars_pp;
  end.dp_after += sums.scalars_dp + sums.scalars_tp + sums.scalars_pp;
  end.calls = sums.calls;
  end.bytes = sums.bytes;
  const int sharded_stage = groups.shard_group > 1 ? p.zero_stage : 0;
  const double step_k =
      step_kernels(model, p, share.held(), share.first, share.last, sharded_stage, inv.optimizer_segments, o) +
      sums.kernels_scalars;
  const BlockCosts& block = layers.block;
  const HeadCosts& head = c.head;
  end.kernels =
      (block.forward.kernels + block.backward.kernels + block.recompute.kernels + block.teacher.kernels) *
          microbatches +
      (share.first
           ? (head.embedding_forward.kernels + head.embedding_backward.kernels + head.teacher_embedding.kernels) *
                 microbatches
           : 0) +
      (share.last ? (head.head_forward.kernels + head.head_backward.kernels + head.teacher_head.kernels) * microbatches
                  : 0) +
      (head.chunk_entry.kernels + head.teacher_chunk_entry.kernels) * (share.chunks * microbatches) +
      head.batch_entry.kernels * microbatches + step_k + sums.kernels_dp + sums.kernels_pp;
  t.optimizer = optimizer_time(cluster, p, o, share, groups.shard_group, step_k);
  Seconds penalty;
  if (o.ewc) {
    // EWC's penalty over the rank's parameters (shards under ZeRO-3), once per step: forward reads
    // θ, θ* and F and writes two temporaries, backward reads three and adds into the gradient, fp32.
    const double held = local_params(share, p, groups.shard_group, 3);
    penalty = Seconds(held * 4 * 11 / (cluster.gpu().hbm_bandwidth.value() * o.hbm_efficiency));
    t.continual += penalty;
  }
  // The simulator replays the penalty with the optimizer step (both once per step, at its end).
  end.optimizer = t.optimizer + penalty;
  return end;
}

}  // namespace cpt::cost
