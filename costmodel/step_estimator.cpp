#include "costmodel/step_estimator.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <optional>

#include "core/str_cat.h"
#include "costmodel/collective_model.h"
#include "costmodel/compute_sharing.h"
#include "costmodel/layer_costs.h"
#include "costmodel/pipeline_replay.h"
#include "costmodel/search_ranks.h"
#include "costmodel/step_end.h"
#include "costmodel/step_inventory.h"
#include "costmodel/topology.h"
#include "costmodel/work_pricing.h"
#include "spec/pipeline_schedule.h"
#include "spec/rank_layout.h"
#include "spec/stage_partition.h"

namespace cpt::cost {

using core::Bytes;
using core::Seconds;
using core::str_cat;

std::string to_string(InfeasibleReason r) {
  switch (r) {
    case InfeasibleReason::kInvalidConfig:
      return "invalid_config";
    case InfeasibleReason::kUnsupportedCombination:
      return "unsupported_combination";
    case InfeasibleReason::kOutOfMemory:
      return "out_of_memory";
  }
  return "?";
}

namespace {

std::string gib(Bytes b) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f", core::to_gibibytes(b));
  return buf;
}

}  // namespace

CostModelOptions with_device_overheads(const CostModelOptions& options, const spec::GpuSpec& gpu) {
  CostModelOptions o = options;
  if (gpu.kernel_overhead) o.kernel_overhead = *gpu.kernel_overhead;
  if (gpu.collective_overhead) o.collective_overhead = *gpu.collective_overhead;
  if (gpu.compute_jitter_sqrt_s) o.compute_jitter_sqrt_s = *gpu.compute_jitter_sqrt_s;
  return o;
}

namespace {

// True when with_device_overheads would change `o` (then evaluate works on a copy).
bool needs_device_overheads(const CostModelOptions& o, const spec::GpuSpec& gpu) {
  return (gpu.kernel_overhead && *gpu.kernel_overhead != o.kernel_overhead) ||
         (gpu.collective_overhead && *gpu.collective_overhead != o.collective_overhead) ||
         (gpu.compute_jitter_sqrt_s && *gpu.compute_jitter_sqrt_s != o.compute_jitter_sqrt_s);
}

// The checks before any cost, in two phases: without `layout`, every rule of ParallelConfig; with
// it, the combinations this model does not cover (uneven hybrid shard groups, context parallelism
// without a fused attention kernel). `detail` receives the reason's text when non-null.
std::optional<InfeasibleReason> find_invalid(const spec::ModelSpec& model, const spec::ClusterSpec& cluster,
                                             const spec::ParallelConfig& p, int seq_len, const CostModelOptions& o,
                                             const LayoutCosts* layout, std::string* detail) {
  if (layout == nullptr) {
    if (auto errors = spec::find_parallel_config_errors(p, model, seq_len, cluster.num_gpus); !errors.empty()) {
      if (detail) *detail = errors.front();
      return InfeasibleReason::kInvalidConfig;
    }
    return std::nullopt;
  }
  if (p.hybrid_shard && layout->hybrid_shard_error) {
    if (detail) *detail = *layout->hybrid_shard_error;
    return InfeasibleReason::kInvalidConfig;
  }
  if (p.cp > 1 && !o.flash_attention) {
    if (detail) *detail = "context parallelism needs a fused (flash) attention kernel";
    return InfeasibleReason::kUnsupportedCombination;
  }
  return std::nullopt;
}

// `t` split by kind of work on the critical rank (StepTimeByKind); "other" is what is left.
StepTimeByKind time_by_kind(const MicrobatchCharges& c, const CriticalRank& critical, double microbatches,
                            const StepTimeBreakdown& t) {
  const BlockCosts block = layers_of(c, critical.share).block;
  const HeadCosts& head = c.head;
  StepTimeByKind k;
  k.gemm = (block.forward.gemm + block.backward.gemm + block.recompute.gemm + block.teacher.gemm) * microbatches;
  k.attention =
      (block.forward.attention + block.backward.attention + block.recompute.attention + block.teacher.attention) *
      microbatches;
  if (critical.share.last) {
    k.gemm += (head.head_forward.gemm + head.head_backward.gemm + head.teacher_head.gemm) * microbatches;
    k.loss = (head.loss_forward + head.loss_backward) * microbatches;
  }
  k.gemm = k.gemm * critical.compute_scale;
  k.attention = k.attention * critical.compute_scale;
  k.loss = k.loss * critical.compute_scale;
  k.optimizer = t.optimizer;
  k.communication = t.tp_comm + t.cp_comm + t.ep_comm + t.dp_comm + t.pp_comm + t.pp_bubble;
  k.other = std::max(Seconds(0), t.total() - k.gemm - k.attention - k.loss - k.optimizer - k.communication);
  return k;
}

// Rates of a step: tokens/s per GPU, model TFLOP/s, MFU and HFU (Estimate's conventions).
struct Rates {
  core::Flops model_flops, hardware_flops;
  double tokens_per_s_per_gpu = 0, model_tflops_per_gpu = 0, mfu = 0, hfu = 0;
};

Rates rates(const spec::ModelSpec& model, const spec::ClusterSpec& cluster, const spec::ParallelConfig& p, int seq_len,
            const CostModelOptions& o, const MicrobatchCharges& c, Seconds step_time) {
  const double step = step_time.value();
  const double gpus = cluster.num_gpus;
  const double microbatches_total = static_cast<double>(p.global_batch) / p.micro_batch;
  const double replicas_of_work = static_cast<double>(p.tp) * p.cp;  // per-rank FLOPs x tp x cp = one microbatch
  const double moe_layers = model.moe_layers_in(0, model.layers);
  const double dense_layers = model.layers - moe_layers;
  const double block_model_flops =
      dense_layers * c.dense_layer.block.model_flops.value() + moe_layers * c.moe_layer.block.model_flops.value();
  const double block_hardware_flops =
      dense_layers * c.dense_layer.block.hardware_flops.value() + moe_layers * c.moe_layer.block.hardware_flops.value();
  Rates r;
  r.model_flops = core::Flops(microbatches_total * replicas_of_work * (block_model_flops + c.head.model_flops.value()));
  r.hardware_flops =
      core::Flops(microbatches_total * replicas_of_work * (block_hardware_flops + c.head.model_flops.value()));
  const double peak =
      (cluster.gpu().peak(o.precision) ? *cluster.gpu().peak(o.precision) : *cluster.gpu().peak(spec::Precision::kBf16))
          .value();
  r.tokens_per_s_per_gpu = static_cast<double>(p.global_batch) * seq_len / step / gpus;
  r.model_tflops_per_gpu = r.model_flops.value() / step / gpus / 1e12;
  r.mfu = r.model_flops.value() / (step * gpus * peak);
  r.hfu = r.hardware_flops.value() / (step * gpus * peak);
  return r;
}

std::string memory_detail(const MemoryBreakdown& peak, const spec::ClusterSpec& cluster, int rank) {
  return str_cat(gib(peak.total()), " GiB > ", gib(cluster.gpu().hbm_capacity), " GiB on pp rank ", rank, " (weights ",
                 gib(peak.weights), ", grads ", gib(peak.grads), ", optimizer ", gib(peak.optimizer), ", activations ",
                 gib(peak.activations), ", other ", gib(peak.other), ")");
}

StepEndGroups step_end_groups(const LayoutCosts& layout_costs, const GroupPlacements& groups) {
  return {layout_costs.shard_group, groups.of(CommGroup::kShard).size, groups.of(CommGroup::kReplicate).size};
}

// The layers of stage `s` of `stages`.
RankShare stage_share(const spec::ModelSpec& model, const spec::StagePartition& stages, int s) {
  RankShare share;
  share.layers = stages.layers_in(s);
  share.moe_layers = model.moe_layers_in(stages.first_layer(s), stages.layers_in(s));
  return share;
}

// The per-stage durations of one microbatch (StageDurations' per-stage vectors) and the
// point-to-point transfer after each stage.
void fill_stage_durations(const spec::ModelSpec& model, const spec::StagePartition& stages, const MicrobatchCharges& c,
                          const PricingContext& context, const LayoutCosts& layout_costs, const spec::ParallelConfig& p,
                          StageDurations& d) {
  const int num_stages = stages.num_stages();
  const auto n = static_cast<std::size_t>(num_stages);
  d.forward_s.assign(n, 0.0);
  d.backward_s.assign(n, 0.0);
  d.weight_grad_s.assign(n, 0.0);
  d.p2p_after_s.assign(n, 0.0);
  const bool zero3 = p.zero_stage == 3 && layout_costs.shard_group > 1;
  if (zero3) {
    d.zero3_overlapped_forward_s.assign(n, 0.0);
    d.zero3_overlapped_backward_s.assign(n, 0.0);
  }
  const double resume = c.transfer && c.transfer->resumes ? c.resume.value() : 0.0;
  for (int s = 0; s < num_stages; ++s) {
    const auto i = static_cast<std::size_t>(s);
    const LayerCharges layers = layers_of(c, stage_share(model, stages, s));
    if (zero3) {
      d.zero3_overlapped_forward_s[i] = layers.zero3_hidden_forward.value();
      d.zero3_overlapped_backward_s[i] = layers.zero3_hidden_backward.value();
    }
    d.forward_s[i] = layers.forward.value() + c.chunk_forward.value();
    if (s < p.pp) d.forward_s[i] += c.batch_forward.value();  // each rank's first chunk
    d.backward_s[i] = layers.backward.value();
    // Resuming from the pipeline's blocking receives and sends.
    if (p.pp > 1) {
      const double transfers = spec::stage_transfers_per_pass(s, num_stages);
      d.forward_s[i] += resume * transfers;
      d.backward_s[i] += resume * transfers;
    }
    // Weight gradients: one GEMM per forward GEMM, of the same size (layer_costs.h).
    d.weight_grad_s[i] = layers.block.forward.gemm.value();
    if (s == 0) {
      d.forward_s[i] += c.embedding_forward.value();
      d.backward_s[i] += c.embedding_backward.value();
    }
    if (s == num_stages - 1) {
      d.forward_s[i] += c.head_forward.value();
      d.backward_s[i] += c.head_backward.value();
      d.weight_grad_s[i] += c.head.head_forward.gemm.value();
    }
    // Stage s -> s+1 runs from pp rank s mod pp to (s+1) mod pp, same tp/cp/dp coordinates.
    if (s < num_stages - 1 && c.transfer) {
      d.p2p_after_s[i] =
          pipeline_transfer_time(*c.transfer, layout_costs.pp_next[static_cast<std::size_t>(s % p.pp)], context)
              .value();
    }
  }
}

// What pipeline rank `r` holds, and its backward over its stages (one microbatch, `d`'s).
RankShare rank_share(const spec::ModelSpec& model, const spec::ParallelConfig& p, const spec::StagePartition& stages,
                     const StageDurations& d, int r, double& backward_s) {
  RankShare share;
  share.pp_rank = r;
  share.chunks = 0;
  share.first_layer = stages.first_layer(stages.stage_of(r, 0));
  const int last_stage = stages.num_stages() - 1;
  backward_s = 0;
  for (int s : stages.stages_of_rank(r)) {
    ++share.chunks;
    share.layers += stages.layers_in(s);
    share.moe_layers += model.moe_layers_in(stages.first_layer(s), stages.layers_in(s));
    share.first = share.first || s == 0;
    share.last = share.last || s == last_stage;
    backward_s += d.backward_s[static_cast<std::size_t>(s)];
  }
  share.params = params_of_pp_rank(model, p, stages, r);
  share.expert_params = share.moe_layers * expert_params_per_moe_layer(model.param_counts(), p);
  share.transfers_per_pass = spec::rank_transfers_per_pass(p.pp, p.virtual_stages, r);
  return share;
}

// The rank that finishes last in the replay `with_transfers`, what it holds, and the pipeline's
// share of its step (`without_transfers`: the same replay with free transfers).
CriticalRank critical_rank(const spec::ModelSpec& model, const spec::ParallelConfig& p,
                           const spec::StagePartition& stages, const StageDurations& d,
                           const ReplayResult& with_transfers, const ReplayResult& without_transfers) {
  std::size_t last = 0;
  for (std::size_t r = 1; r < static_cast<std::size_t>(p.pp); ++r) {
    if (with_transfers.finish[r] > with_transfers.finish[last]) last = r;
  }
  CriticalRank critical;
  critical.share = rank_share(model, p, stages, d, static_cast<int>(last), critical.backward_s);
  critical.pp_comm = std::max(Seconds(0), with_transfers.makespan - without_transfers.makespan);
  critical.pp_bubble = std::max(Seconds(0), without_transfers.makespan - without_transfers.busy[last]);
  if (without_transfers.work[last] > Seconds(0)) {
    critical.compute_scale = without_transfers.busy[last] / without_transfers.work[last];
  }
  return critical;
}

// The step-end terms of StageDurations and the estimate's counts, from step_time's `end`.
void record_step_end(const StepEnd& end, const MicrobatchCharges& c, const CriticalRank& critical, Estimate& est) {
  est.stages.dp_reduce = end.dp_reduce;
  est.stages.dp_buckets = end.dp_buckets;
  est.stages.dp_reductions = end.dp_reductions;
  est.stages.dp_after = end.dp_after;
  est.stages.optimizer = end.optimizer;
  est.stages.outside_schedule = end.outside_schedule;
  est.stages.overlap_slowdown = c.overlap_slowdown;
  est.kernels_per_step = end.kernels;
  est.calls_per_step = end.calls;
  est.bytes_per_step = end.bytes;
  est.critical_pp_rank = critical.share.pp_rank;
}

template <class Out>
void record_rates(const Rates& r, Out& out) {
  out.tokens_per_s_per_gpu = r.tokens_per_s_per_gpu;
  out.model_tflops_per_gpu = r.model_tflops_per_gpu;
  out.mfu = r.mfu;
  out.hfu = r.hfu;
}

}  // namespace

Evaluation evaluate(const spec::ModelSpec& model, const spec::ClusterSpec& cluster, const spec::ParallelConfig& p,
                    int seq_len, const CostModelOptions& o) {
  // Invalid configurations need no graph.
  std::string detail;
  if (auto why = find_invalid(model, cluster, p, seq_len, o, nullptr, &detail)) return Infeasible{*why, detail};
  return evaluate(model, cluster, p, seq_len, o, Topology(cluster));
}

Evaluation evaluate(const spec::ModelSpec& model, const spec::ClusterSpec& cluster, const spec::ParallelConfig& p,
                    int seq_len, const CostModelOptions& options, const Topology& topo) {
  // A calibrated profile may carry its own fixed costs per kernel and per collective call; copied
  // only then.
  std::optional<CostModelOptions> calibrated;
  if (needs_device_overheads(options, cluster.node.gpu)) calibrated = with_device_overheads(options, cluster.node.gpu);
  const CostModelOptions& o = calibrated ? *calibrated : options;
  // 1. Validity.
  std::string detail;
  if (auto why = find_invalid(model, cluster, p, seq_len, o, nullptr, &detail)) return Infeasible{*why, detail};
  const spec::RankLayout layout(p, cluster.node.gpus_per_node);
  const LayoutCosts& layout_costs = topo.layout_costs(layout, model.moe.present());
  if (auto why = find_invalid(model, cluster, p, seq_len, o, &layout_costs, &detail)) return Infeasible{*why, detail};
  const int microbatches = p.grad_accum();
  const auto stages = spec::StagePartition::balanced(model.layers, p.pp, p.virtual_stages);
  std::optional<spec::PipelineSchedule> schedule;
  if (o.exact_pipeline) schedule = spec::make_schedule(p.schedule, p.pp, p.virtual_stages, microbatches);

  // 2. Memory of every pipeline rank.
  Estimate est;
  est.memory_per_pp_rank = memory_per_pp_rank(model, p, seq_len, stages, schedule ? &*schedule : nullptr, layout, o);
  for (int r = 0; r < p.pp; ++r) {
    if (est.memory_per_pp_rank[static_cast<std::size_t>(r)].total() > est.peak_memory().total()) est.worst_pp_rank = r;
  }
  if (est.peak_memory().total() > cluster.gpu().hbm_capacity) {
    return Infeasible{InfeasibleReason::kOutOfMemory, memory_detail(est.peak_memory(), cluster, est.worst_pp_rank)};
  }

  // 3. The step's work, priced; per-stage durations of one microbatch.
  const GroupPlacements groups(layout_costs, p);
  const PricingContext context = pricing_context(groups, cluster, o, &model.moe);
  StepInventory inventory = microbatch_work(model, p, seq_len, layout_costs.shard_group, o);
  const MicrobatchCharges charges = price_microbatch(model, cluster, p, seq_len, o, inventory, context);
  fill_stage_durations(model, stages, charges, context, layout_costs, p, est.stages);

  // 4. The pipeline schedule replayed with and without its transfers. Ranks sharing CPU cores (an
  // oversubscribed local profile) run faster while others wait: the exact replay follows it
  // (compute_sharing.h); the search's closed form does not.
  const StageDurations& d = est.stages;
  const std::vector<double> no_transfers(d.p2p_after_s.size(), 0.0);
  const std::span<const double> split = p.schedule == spec::ScheduleKind::kZeroBubbleH1
                                            ? std::span<const double>(d.weight_grad_s)
                                            : std::span<const double>();
  const ComputeSharing sharing(cluster, p);
  auto replay = [&](std::span<const double> transfers) {
    if (!schedule) {
      return closed_form_makespan(p.pp, p.virtual_stages, microbatches, d.forward_s, d.backward_s, transfers, split);
    }
    if (!sharing.active()) return replay_schedule(*schedule, d.forward_s, d.backward_s, transfers, split);
    return replay_schedule_at_speeds(
        *schedule, d.forward_s, d.backward_s, transfers, split,
        [&](std::span<const char> computing, int r) { return sharing.speed(computing, r); });
  };
  const CriticalRank critical = critical_rank(model, p, stages, d, replay(d.p2p_after_s), replay(no_transfers));

  // 5. The step's end and the step time on the critical rank.
  const StepEnd end = step_time(model, cluster, p, o, inventory, charges, context,
                                step_end_groups(layout_costs, groups), critical, est.time);
  record_step_end(end, charges, critical, est);
  est.by_kind = time_by_kind(charges, critical, microbatches, est.time);

  // 6. Rates.
  const Rates r = rates(model, cluster, p, seq_len, o, charges, est.time.total());
  est.model_flops_per_step = r.model_flops;
  est.hardware_flops_per_step = r.hardware_flops;
  record_rates(r, est);
  return est;
}

SearchEstimate evaluate_search(const spec::ModelSpec& model, const spec::ClusterSpec& cluster,
                               const spec::ParallelConfig& p, int seq_len, const CostModelOptions& options,
                               const Topology& topo) {
  std::optional<CostModelOptions> calibrated;  // no copy (nor allocation) unless the device has its own
  if (needs_device_overheads(options, cluster.node.gpu)) calibrated = with_device_overheads(options, cluster.node.gpu);
  const CostModelOptions& o = calibrated ? *calibrated : options;
  SearchEstimate out;
  if (auto why = find_invalid(model, cluster, p, seq_len, o, nullptr, nullptr)) {
    out.infeasible = why;
    return out;
  }
  const spec::RankLayout layout(p, cluster.node.gpus_per_node);
  const LayoutCosts& layout_costs = topo.layout_costs(layout, model.moe.present());
  if (auto why = find_invalid(model, cluster, p, seq_len, o, &layout_costs, nullptr)) {
    out.infeasible = why;
    return out;
  }
  const SearchRanks ranks = search_ranks(model, p);
  const SearchMemoryTerms memory = search_memory_terms(model, p, seq_len, layout_costs.shard_group, o);
  search_memory(model, p, memory, o, ranks, out);
  if (out.peak_memory.total() > cluster.gpu().hbm_capacity) {
    out.infeasible = InfeasibleReason::kOutOfMemory;
    return out;
  }
  const GroupPlacements groups(layout_costs, p);
  const PricingContext context = pricing_context(groups, cluster, o, &model.moe);
  StepInventory inventory = microbatch_work(model, p, seq_len, layout_costs.shard_group, o);
  const MicrobatchCharges charges = price_microbatch(model, cluster, p, seq_len, o, inventory, context);
  const CriticalRank critical = search_critical_rank(model, memory, ranks, charges, layout_costs, p, context);
  (void)step_time(model, cluster, p, o, inventory, charges, context, step_end_groups(layout_costs, groups), critical,
                  out.time);
  record_rates(rates(model, cluster, p, seq_len, o, charges, out.time.total()), out);
  return out;
}

}  // namespace cpt::cost
