#include "costmodel/step_estimator.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <optional>

#include "core/str_cat.h"
#include "costmodel/collective_model.h"
#include "costmodel/executor_buckets.h"
#include "costmodel/kernel_dispatch.h"
#include "costmodel/layer_costs.h"
#include "costmodel/pipeline_replay.h"
#include "costmodel/compute_sharing.h"
#include "costmodel/straggler.h"
#include "costmodel/topology.h"
#include "spec/executor_support.h"
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

// Time to move `bytes` over PCIe for CPU offload (Gen4 x16, per direction).
constexpr double kPcieBytesPerSecond = 25e9;
// Adam on the host: parameters updated per second by a vectorised CPU optimizer (DeepSpeed's
// CPU Adam reports ~1e9 parameters/s per socket).
constexpr double kCpuAdamParamsPerSecond = 1e9;

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

// What one microbatch of one layer costs on any stage, with the communication a stage cannot hide
// (TP collectives, the CP ring beyond attention, ZeRO-3 gathers beyond compute), and the groups
// the data-parallel terms run on. Shared by every pipeline stage and both evaluations.
struct LayerTerms {
  BlockCosts blk;
  HeadCosts head;
  Seconds call;    // fixed cost of one collective or point-to-point call
  Seconds tp_one;  // one tensor-parallel collective of a block (under SP a reduce-scatter + all-gather pair)
  Seconds cp_fwd, cp_bwd;
  Seconds z3_fwd_exposed, z3_bwd_exposed;
  Seconds z3_fwd_overlapped, z3_bwd_overlapped;  // one layer's ZeRO-3 communication hidden behind its compute
  Seconds layer_fwd, layer_bwd;  // one layer, everything exposed included
  // Tensor-parallel collectives of the embedding (first stage, forward) and of the LM head and
  // loss (last stage, forward and backward), one microbatch (HeadCosts' counts).
  Seconds tp_embedding_fwd, tp_embedding_bwd, tp_head_fwd, tp_head_bwd;
  Seconds tp_norm_grads_bwd;  // one layer's norm-gradient all-reduces (cpt's executor under SP)
  Bytes boundary;                // the activation passed between stages
  GroupPlacement dp_g, shard_g, replicate_g;  // dp_g: the dp × cp replicas
  GroupPlacement tp_g;
  GroupPlacement pp_in_node;  // LayoutCosts::pp_in_node
  LinkSum pp_ring;            // the pipeline's transfers around its ring (the pp scalars' hops)
  double cp_calls = 0;  // context-parallel calls of one layer and microbatch, every pass
  struct PassCalls {
    double forward = 0, backward = 0;
    [[nodiscard]] double total() const { return forward + backward; }
  };
  PassCalls z3_block_calls, z3_root_calls;  // ZeRO-3's per microbatch (0 without it)
  // Tensor-parallel calls of one microbatch, by pass: a block's (a reduce-scatter and an
  // all-gather per collective under sequence parallelism; the norm-gradient all-reduces backward),
  // the embedding's and the head's (with the loss's). Estimate::calls_per_step counts them and the
  // resume cost is charged for each.
  struct TpCalls {
    double forward = 0, backward = 0, recompute = 0;
    [[nodiscard]] double total() const { return forward + backward + recompute; }
  };
  TpCalls tp_block_calls, tp_embedding_calls, tp_head_calls;
  int n_shard = 1;
  double slow_dp = 0;  // compute slowdown per second of overlapped DP communication
  Seconds resume;      // compute lost resuming from one blocking call (NodeSpec)
};

LayerTerms layer_terms(const spec::ModelSpec& model, const spec::ClusterSpec& cluster, const spec::ParallelConfig& p,
                       int seq_len, const CostModelOptions& o, const LayoutCosts& lc) {
  LayerTerms x;
  const double eff = o.network_efficiency;
  x.blk = block_costs(model, p, seq_len, cluster.gpu(), o);
  x.head = head_costs(model, p, seq_len, cluster.gpu(), o);
  const BlockCosts& blk = x.blk;
  x.call = o.collective_overhead;
  const Seconds call = x.call;
  // A block's tensor-parallel collective: an all-reduce, or under sequence parallelism a
  // reduce-scatter and an all-gather — the ring all-reduce's time (the all-reduce may take the
  // tree where it is faster, the pair may not), or apart where the node measured them apart
  // (GroupPlacement::intra_scale). The pair pays one `call`: collective_overhead was fitted per
  // Megatron collective, pair or all-reduce alike. Outside the blocks under sequence
  // parallelism the embedding's forward and the head's backward are one reduce-scatter, the
  // embedding's backward and the head's forward one all-gather; without it all are all-reduces.
  Seconds tp_scatter, tp_gather;  // the embedding's and head's single calls
  if (p.tp > 1 && p.sequence_parallel) {
    tp_scatter = collective_time(Collective::kReduceScatter, blk.tp_bytes, lc.tp, eff) + call;
    tp_gather = collective_time(Collective::kAllGather, blk.tp_bytes, lc.tp, eff) + call;
    x.tp_one = tp_scatter + tp_gather - call;
  } else if (p.tp > 1) {
    x.tp_one = collective_time(Collective::kAllReduce, blk.tp_bytes, lc.tp, eff) + call;
    tp_scatter = tp_gather = x.tp_one;
  }
  auto cp_exposed = [&](Bytes bytes, Seconds attention) {
    if (p.cp <= 1) return Seconds(0);
    // cp − 1 ring steps, each a transfer of one block to the next rank of the ring.
    const Bytes per_step = Bytes(bytes.value() / (p.cp - 1));
    const CallScale& inside = lc.cp.intra_scale[static_cast<std::size_t>(spec::LinkCall::kSendRecv)];
    const LinkCost link = lc.cp.nodes > 1 ? lc.cp.inter
                                          : LinkCost{core::BytesPerSecond(lc.cp.intra.bandwidth.value() * inside.bandwidth),
                                                     lc.cp.intra.latency * inside.latency};
    const Seconds comm = (p2p_time(per_step, link, eff) + call) * static_cast<double>(p.cp - 1);
    return std::max(Seconds(0), comm - attention);
  };
  // The kernels around a pass's communication calls join the pass (costmodel/kernel_dispatch.h).
  auto add_call_kernels = [&](PassTime& pass, double calls, double per_call) {
    pass.kernels += calls * per_call;
    pass.overhead += o.kernel_overhead * (calls * per_call);
  };
  // Blocking calls also wait for the group's slowest rank (straggler.h), after the layer's compute
  // shared among its blocking calls: the tensor-parallel ones and the all-gather CP's four (six
  // with full recomputation).
  const bool cp_gathers = o.context_parallel == ContextParallelKind::kAllGather && p.cp > 1;
  // The all-gather form's four (six) blocking calls; the ring sends and receives a block per
  // step, forward and backward.
  x.cp_calls = cp_gathers ? (p.recompute == spec::Recompute::kFull ? 6.0 : 4.0) : p.cp > 1 ? 4.0 * (p.cp - 1) : 0.0;
  const double blocking_calls =
      (p.tp > 1 ? static_cast<double>(blk.tp_collectives_forward + blk.tp_collectives_backward +
                                      blk.tp_collectives_recompute)
                : 0.0) +
      (cp_gathers ? x.cp_calls : 0.0);
  // A calibrated host loses compute resuming from each blocking call (NodeSpec::
  // compute_lost_resuming_from_call): the tensor-parallel calls of each pass here; CP's gathers
  // below, with their kernels; the pipeline's transfers in the stage durations.
  if (p.tp > 1) {
    const double pair = p.sequence_parallel ? 2.0 : 1.0;
    x.tp_block_calls = {blk.tp_collectives_forward * pair,
                        blk.tp_collectives_backward * pair + blk.tp_norm_grad_allreduces,
                        blk.tp_collectives_recompute * pair};
    x.tp_embedding_calls = {static_cast<double>(x.head.tp_embedding_forward),
                            static_cast<double>(x.head.tp_embedding_backward), 0};
    x.tp_head_calls = {static_cast<double>(x.head.tp_head_forward + x.head.tp_loss_forward),
                       static_cast<double>(x.head.tp_head_backward + x.head.tp_norm_grad_allreduces), 0};
  }
  x.resume = cluster.node.compute_lost_resuming_from_call.value_or(Seconds(0));
  if (x.resume.value() > 0) {
    auto resumes = [&](PassTime& pass, double calls) { pass.resume += x.resume * calls; };
    resumes(x.blk.forward, x.tp_block_calls.forward);
    resumes(x.blk.backward, x.tp_block_calls.backward);
    resumes(x.blk.recompute, x.tp_block_calls.recompute);
    resumes(x.head.embedding_forward, x.tp_embedding_calls.forward);
    resumes(x.head.embedding_backward, x.tp_embedding_calls.backward);
    resumes(x.head.head_forward, x.tp_head_calls.forward);
    resumes(x.head.head_backward, x.tp_head_calls.backward);
  }
  const Seconds segment = blocking_calls > 0
                              ? (blk.forward.total() + blk.backward.total() + blk.recompute.total()) / blocking_calls
                              : Seconds(0);
  if (p.tp > 1) {
    const Seconds wait = straggler_wait(o.compute_jitter_sqrt_s, segment, p.tp);
    x.tp_one += wait;
    tp_scatter += wait;
    tp_gather += wait;
  }
  const Seconds cp_straggler = straggler_wait(o.compute_jitter_sqrt_s, segment, p.cp);
  if (cp_gathers) {
    // K and V gathered before attention (two collectives), their gradients reduce-scattered after
    // it (two): blocking, nothing hidden. Full recomputation gathers them again in backward.
    const Seconds gather =
        (collective_time(Collective::kAllGather, blk.cp_gathered_bytes, lc.cp, eff) + call + cp_straggler) * 2.0;
    x.cp_fwd = gather;
    x.cp_bwd =
        (collective_time(Collective::kReduceScatter, blk.cp_gathered_bytes, lc.cp, eff) + call + cp_straggler) * 2.0 +
        (p.recompute == spec::Recompute::kFull ? gather : Seconds(0));
    // Each of the two calls a pass makes also costs its kernels and the resume after it.
    auto cp_calls_of = [&](PassTime& pass) {
      add_call_kernels(pass, 2, kernels_per_context_parallel_call(o));
      pass.resume += x.resume * 2.0;
    };
    cp_calls_of(x.blk.forward);
    cp_calls_of(x.blk.backward);
    if (p.recompute == spec::Recompute::kFull) cp_calls_of(x.blk.recompute);
  } else {
    x.cp_fwd = cp_exposed(blk.cp_bytes_forward, blk.forward.attention);
    x.cp_bwd = cp_exposed(blk.cp_bytes_backward, blk.backward.attention);
  }

  // ZeRO-3: every microbatch gathers each block's parameters forward and backward and
  // reduce-scatters its gradients over the shard group, prefetched behind compute.
  // Gradients are summed and ZeRO shards spread over the dp × cp replicas (Megatron's
  // data-and-context-parallel group; cpt's executor's replica group).
  x.n_shard = lc.shard_group;
  const GroupPlacement& replicas = lc.replicas;
  x.dp_g = replicas;
  x.shard_g = replicas;
  x.tp_g = lc.tp;
  x.pp_in_node = lc.pp_in_node;
  x.pp_ring = lc.pp_ring;
  if (p.hybrid_shard) {
    x.shard_g = GroupPlacement{replicas.ranks_per_node, 1, replicas.ranks_per_node, replicas.intra, {}, replicas.intra_scale};
    x.replicate_g = GroupPlacement{replicas.nodes, replicas.nodes, 1, {}, replicas.inter};
  }
  const double e = activation_bytes(o.precision);
  if (p.zero_stage == 3 && x.n_shard > 1) {
    const double block_params = block_params_per_tp(model.param_counts(), p.tp);
    const Bytes gathered(static_cast<std::int64_t>(block_params * e));
    const Bytes grads(static_cast<std::int64_t>(block_params * gradient_bytes_per_param(o)));
    const Seconds ag = collective_time(Collective::kAllGather, gathered, x.shard_g, eff) + call;
    const Seconds rs = collective_time(Collective::kReduceScatter, grads, x.shard_g, eff) + call;
    // Each block's gather forward, its gather again and the reduce-scatter backward; the root
    // unit's (embedding, final norm, LM head) gather forward and reduce-scatter backward, kept
    // gathered in between (cpt's executor; FSDP's root is not resharded after forward).
    x.z3_block_calls = {1, 2};
    x.z3_root_calls = {1, 1};
    add_call_kernels(x.blk.forward, x.z3_block_calls.forward, kernels_per_zero3_call(o));
    add_call_kernels(x.blk.backward, x.z3_block_calls.backward, kernels_per_zero3_call(o));
    add_call_kernels(x.head.embedding_forward, x.z3_root_calls.forward, kernels_per_zero3_call(o));
    add_call_kernels(x.head.embedding_backward, x.z3_root_calls.backward, kernels_per_zero3_call(o));
    x.z3_fwd_exposed = std::max(Seconds(0), ag - blk.forward.total());
    x.z3_bwd_exposed = std::max(Seconds(0), ag + rs - blk.backward.total() - blk.recompute.total());
    x.z3_fwd_overlapped = ag - x.z3_fwd_exposed;
    x.z3_bwd_overlapped = ag + rs - x.z3_bwd_exposed;
  }
  // A calibrated node's own slowdown inside it (spec::NodeSpec::overlap_compute_slowdown).
  x.slow_dp = replicas.nodes > 1 ? o.overlap_slowdown_network
                                 : cluster.node.overlap_compute_slowdown.value_or(o.overlap_slowdown_nvlink);
  x.layer_fwd = blk.forward.total() + x.tp_one * static_cast<double>(blk.tp_collectives_forward) + x.cp_fwd +
                x.z3_fwd_exposed;
  x.tp_norm_grads_bwd =
      blk.tp_norm_grad_allreduces > 0
          ? (collective_time(Collective::kAllReduce, blk.tp_norm_grad_bytes, lc.tp, eff) + call) *
                static_cast<double>(blk.tp_norm_grad_allreduces)
          : Seconds(0);
  x.layer_bwd = blk.backward.total() + blk.recompute.total() +
                x.tp_one * static_cast<double>(blk.tp_collectives_backward + blk.tp_collectives_recompute) + x.cp_bwd +
                x.tp_norm_grads_bwd + x.z3_bwd_exposed;
  x.boundary = Bytes(static_cast<std::int64_t>(static_cast<double>(p.micro_batch) * seq_len / p.cp * model.hidden * e /
                                               (p.sequence_parallel ? p.tp : 1)));
  if (p.tp > 1) {
    const Seconds loss_one = collective_time(Collective::kAllReduce, x.head.tp_loss_bytes, lc.tp, eff) + call;
    x.tp_embedding_fwd = tp_scatter * static_cast<double>(x.head.tp_embedding_forward);
    x.tp_embedding_bwd = tp_gather * static_cast<double>(x.head.tp_embedding_backward);
    x.tp_head_fwd = tp_gather * static_cast<double>(x.head.tp_head_forward) +
                    loss_one * static_cast<double>(x.head.tp_loss_forward);
    x.tp_head_bwd = tp_scatter * static_cast<double>(x.head.tp_head_backward) +
                    (x.head.tp_norm_grad_allreduces > 0
                         ? (collective_time(Collective::kAllReduce, blk.tp_norm_grad_bytes, lc.tp, eff) + call) *
                               static_cast<double>(x.head.tp_norm_grad_allreduces)
                         : Seconds(0));
  }
  return x;
}

// The pipeline rank that finishes last, and the pipeline's share of the step on it.
struct CriticalRank {
  int rank = 0;
  double layers = 0;       // layers it holds over its chunks
  bool first = false;      // holds the embedding
  bool last = false;       // holds the LM head
  double params = 0;       // parameters it holds, per tp rank
  double backward_s = 0;   // its backward over its stages, one microbatch
  Seconds pp_comm;         // transfers on the critical path
  Seconds pp_bubble;       // idle time in the schedule
  // Its wall-clock compute over its compute at the profile's rates: 1 unless ranks share CPU cores
  // and it computed while others waited (compute_sharing.h). Scales its per-microbatch terms.
  double compute_scale = 1;
};

// The step-end terms of StageDurations (data parallelism and the optimizer).
struct StepEnd {
  Seconds dp_reduce;
  int dp_buckets = 1;
  int dp_reductions = 1;
  Seconds dp_after;
  Seconds optimizer;
  Seconds outside_schedule;  // StageDurations::outside_schedule
  double kernels = 0;  // dispatched by the critical rank in the step (costmodel/kernel_dispatch.h)
  CallsPerStep calls;
};

// `t` split by kind of work on the critical rank (StepTimeByKind); "other" is what is left.
StepTimeByKind time_by_kind(const LayerTerms& x, const CriticalRank& crit, double microbatches,
                            const StepTimeBreakdown& t) {
  const double per_step = crit.layers * microbatches;
  const BlockCosts& blk = x.blk;
  const HeadCosts& head = x.head;
  StepTimeByKind k;
  k.gemm = (blk.forward.gemm + blk.backward.gemm + blk.recompute.gemm) * per_step;
  k.attention = (blk.forward.attention + blk.backward.attention + blk.recompute.attention) * per_step;
  if (crit.last) {
    k.gemm += (head.head_forward.gemm + head.head_backward.gemm) * microbatches;
    k.loss = (head.loss_forward + head.loss_backward) * microbatches;
  }
  k.gemm = k.gemm * crit.compute_scale;
  k.attention = k.attention * crit.compute_scale;
  k.loss = k.loss * crit.compute_scale;
  k.optimizer = t.optimizer;
  k.communication = t.tp_comm + t.cp_comm + t.dp_comm + t.pp_comm + t.pp_bubble;
  k.other = std::max(Seconds(0), t.total() - k.gemm - k.attention - k.loss - k.optimizer - k.communication);
  return k;
}

// The step time by cause on the critical rank: its compute, recomputation and exposed TP/CP/ZeRO-3
// per microbatch, the pipeline terms, the data-parallel reduction (overlapped with the last
// backward), the ZeRO-1/2 all-gather, the HSDP all-reduce and the optimizer step.
StepEnd step_time(const spec::ModelSpec& model, const spec::ClusterSpec& cluster, const spec::ParallelConfig& p,
                  const CostModelOptions& o, const LayerTerms& x, const CriticalRank& crit, StepTimeBreakdown& t) {
  const BlockCosts& blk = x.blk;
  const HeadCosts& head = x.head;
  const double eff = o.network_efficiency;
  const Seconds call = x.call;
  const double mm = p.grad_accum();
  const double rank_layers = crit.layers;
  t.compute = (blk.forward.total() + blk.backward.total()) * (rank_layers * mm);
  if (crit.first) t.compute += (head.embedding_forward.total() + head.embedding_backward.total()) * mm;
  if (crit.last) t.compute += (head.head_forward.total() + head.head_backward.total()) * mm;
  t.recompute = blk.recompute.total() * (rank_layers * mm);
  // The pipeline's receives and sends, both passes; each costs the resume, as in the stage
  // durations.
  const double pp_calls = 2.0 * mm * spec::rank_transfers_per_pass(p.pp, p.virtual_stages, crit.rank);
  t.compute += x.resume * pp_calls;
  t.tp_comm = x.tp_one * static_cast<double>(blk.tp_collectives_forward + blk.tp_collectives_backward +
                                             blk.tp_collectives_recompute) *
              (rank_layers * mm);
  t.tp_comm += x.tp_norm_grads_bwd * (rank_layers * mm);
  if (crit.first) t.tp_comm += (x.tp_embedding_fwd + x.tp_embedding_bwd) * mm;
  if (crit.last) t.tp_comm += (x.tp_head_fwd + x.tp_head_bwd) * mm;
  t.cp_comm = (x.cp_fwd + x.cp_bwd) * (rank_layers * mm);
  // The blocks' exposed gathers run inside the stage durations the replay ran at the rank's speed.
  Seconds zero3_exposed = (x.z3_fwd_exposed + x.z3_bwd_exposed) * (rank_layers * mm) * crit.compute_scale;
  Seconds zero3_root;  // the root unit's calls, outside the stage durations
  if (o.dispatch == KernelDispatch::kEager && p.zero_stage == 3 && x.n_shard > 1) {
    // cpt's executor gathers the root unit (embedding, final norm, LM head: what the rank holds
    // outside its blocks) before each microbatch's forward and reduce-scatters its gradients after
    // its backward (executor/parallel/fully_sharded.h): nothing runs beside either.
    const double root =
        root_params(model, model.param_counts(), p.tp, crit.first, crit.last, p.pp * p.virtual_stages == 1);
    if (root > 0) {
      const Bytes whole(static_cast<std::int64_t>(root * activation_bytes(o.precision)));
      const Bytes grads(static_cast<std::int64_t>(root * gradient_bytes_per_param(o)));
      zero3_root = (collective_time(Collective::kAllGather, whole, x.shard_g, o.network_efficiency) +
                    collective_time(Collective::kReduceScatter, grads, x.shard_g, o.network_efficiency) + x.call * 2.0) *
                   mm;
      zero3_exposed += zero3_root;
    }
  }
  // The per-microbatch terms make up the stage durations the replay ran at the ranks' speeds.
  t.compute = t.compute * crit.compute_scale;
  t.recompute = t.recompute * crit.compute_scale;
  t.tp_comm = t.tp_comm * crit.compute_scale;
  t.cp_comm = t.cp_comm * crit.compute_scale;
  t.pp_comm = crit.pp_comm;
  t.pp_bubble = crit.pp_bubble;

  // Data parallelism: gradient reduction overlapped with the (last) backward, the ZeRO-1/2
  // parameter all-gather after the optimizer, the HSDP cross-node all-reduce.
  const double psi = crit.params;
  const double e = activation_bytes(o.precision);
  const double grad_b = gradient_bytes_per_param(o);
  const Bytes grad_bytes(static_cast<std::int64_t>(psi * grad_b));
  const Bytes param_bytes(static_cast<std::int64_t>(psi * e));
  Seconds overlappable, exposed_after;
  double overlappable_calls = 0, after_calls = 0;  // per reduction; after the optimizer
  // Buckets per reduction: cpt's executor's own (whole parameters, executor_buckets.h); Megatron's
  // filled to the cap.
  const bool eager = o.dispatch == KernelDispatch::kEager;
  const BucketStats executor_buckets =
      eager ? executor_gradient_buckets(model, p.tp, static_cast<int>(std::lround(crit.layers)), crit.first, crit.last,
                                        p.pp * p.virtual_stages == 1, o.bucket_elements,
                                        p.zero_stage == 1 || p.zero_stage == 2 ? x.n_shard : 1)
            : BucketStats{};
  const double buckets = eager ? executor_buckets.count : std::max(1.0, std::ceil(psi / static_cast<double>(o.bucket_elements)));
  if (x.n_shard > 1 || (p.hybrid_shard && x.replicate_g.size > 1)) {
    if (p.zero_stage == 0) {
      overlappable = collective_time(Collective::kAllReduce, grad_bytes, x.dp_g, eff) + call * buckets;
      overlappable_calls = buckets;
    } else if (p.zero_stage <= 2) {
      overlappable = collective_time(Collective::kReduceScatter, grad_bytes, x.dp_g, eff) + call * buckets;
      exposed_after = collective_time(Collective::kAllGather, param_bytes, x.dp_g, eff) + call * buckets;
      overlappable_calls = after_calls = buckets;
    } else if (p.hybrid_shard && x.replicate_g.size > 1) {
      const double shard = std::max(1, x.shard_g.size);
      if (eager) {
        // cpt's executor all-reduces each unit's gradient shard across nodes right after its
        // reduce-scatter, every microbatch, and waits for it (parallel/fully_sharded.cpp).
        const auto counts = model.param_counts();
        const double root = root_params(model, counts, p.tp, crit.first, crit.last, p.pp * p.virtual_stages == 1);
        auto shard_all_reduce = [&](double params) {
          return collective_time(Collective::kAllReduce, Bytes(static_cast<std::int64_t>(params * grad_b / shard)),
                                 x.replicate_g, eff) +
                 call;
        };
        exposed_after = (shard_all_reduce(block_params_per_tp(counts, p.tp)) * rank_layers +
                         (root > 0 ? shard_all_reduce(root) : Seconds(0))) *
                        mm;
        after_calls = (rank_layers + (root > 0 ? 1.0 : 0.0)) * mm;
      } else {
        const Bytes shard_bytes(static_cast<std::int64_t>(static_cast<double>(grad_bytes.value()) / shard));
        exposed_after = collective_time(Collective::kAllReduce, shard_bytes, x.replicate_g, eff) + call * buckets;
        after_calls = buckets;
      }
    }
  }
  const Seconds bucket_time =
      overlappable.value() > 0
          ? overlappable * std::min(1.0, static_cast<double>(o.bucket_elements) * grad_b / static_cast<double>(grad_bytes.value()))
          : Seconds(0);
  const Seconds hidden =
      o.overlap_dp_with_backward ? std::min(overlappable - bucket_time, Seconds(crit.backward_s * crit.compute_scale))
                                 : Seconds(0);
  // ZeRO-2 keeps only its gradient shard, so it reduce-scatters after every microbatch's backward
  // (DeepSpeed's micro-step reduction), not once per step; ZeRO 0/1 accumulate full gradients.
  // cpt's executor under a pipeline schedule accumulates whole gradients like ZeRO-1, so reduces once.
  const bool executor_accumulates =
      o.dispatch == KernelDispatch::kEager && !spec::executor_zero2_reduces_each_microbatch(p);
  const double reductions = p.zero_stage == 2 && !executor_accumulates ? mm : 1.0;
  t.dp_comm = (overlappable - std::max(Seconds(0), hidden)) * reductions + exposed_after + zero3_exposed;
  // The step's last data-parallel reduction waits for the group's slowest rank after the whole
  // step's compute (straggler.h).
  Seconds dp_straggler;
  if (x.n_shard > 1 || (p.hybrid_shard && x.replicate_g.size > 1)) {
    dp_straggler = straggler_wait(o.compute_jitter_sqrt_s, t.compute + t.recompute, std::max(x.n_shard, x.dp_g.size));
    t.dp_comm += dp_straggler;
  }
  t.other = std::max(Seconds(0), hidden) * (reductions * x.slow_dp) + (x.z3_fwd_overlapped + x.z3_bwd_overlapped) * (rank_layers * mm) * x.slow_dp;
  StepEnd end;
  end.dp_reduce = o.overlap_dp_with_backward ? overlappable : Seconds(0);
  end.dp_buckets = static_cast<int>(buckets);
  end.dp_reductions = static_cast<int>(reductions);
  // Without overlap the reduction runs after backward: it joins the terms after the reductions.
  end.dp_after = exposed_after + (o.overlap_dp_with_backward ? Seconds(0) : overlappable * reductions);

  // The kernels around the data-parallel and pipeline calls (costmodel/kernel_dispatch.h).
  const double dp_calls = overlappable_calls * reductions + after_calls;
  t.dp_comm += o.kernel_overhead * (kernels_per_call(o) * dp_calls);
  t.pp_comm += o.kernel_overhead * (kernels_per_call(o) * pp_calls);
  end.outside_schedule = dp_straggler + zero3_root + o.kernel_overhead * (kernels_per_call(o) * (dp_calls + pp_calls));

  // The step's scalar all-reduces (the loss, its token count, the gradient norm): latency-bound
  // calls, once per step on every group. Priced for cpt's executor, whose calls are known exactly
  // (spec::executor_step_scalar_all_reduces; on Gloo 0.4-1.4 ms each on this project's CPU VM);
  // Megatron's few (microseconds on NCCL) are left out. They join the step-end terms the
  // simulator replays (StageDurations::dp_after).
  const int sharded_stage = x.n_shard > 1 ? p.zero_stage : 0;
  const spec::StepScalarAllReduces scalars = spec::executor_step_scalar_all_reduces(p, x.n_shard);
  Seconds scalar_dp, scalar_tp, scalar_pp;
  if (eager) {
    const Bytes scalar_bytes(16);  // two fp64 values
    // Inside a node at the node's measured scalar latency where it has one (a backend may take
    // another path for a few bytes than the link's fit describes).
    const auto& scalar_step = cluster.node.scalar_all_reduce_step_latency;
    auto scalar_time = [&](const GroupPlacement& g, int n) {
      if (n <= 0 || g.size <= 1) return Seconds(0);
      const Seconds one = scalar_step && g.nodes <= 1 ? *scalar_step * (2.0 * (g.size - 1))
                                                      : collective_time(Collective::kAllReduce, scalar_bytes, g, eff);
      return (one + call) * static_cast<double>(n);
    };
    scalar_dp = scalar_time(x.dp_g, scalars.replicas) + scalar_time(x.shard_g, scalars.shard);
    scalar_tp = scalar_time(x.tp_g, scalars.tp);
    // Over pp: inside one node as any group; across nodes (the pp groups are not placed there)
    // 2(pp − 1) hops of the pipeline's own ring at their mean latency.
    if (x.pp_in_node.size > 1) {
      scalar_pp = scalar_time(x.pp_in_node, scalars.pp);
    } else if (scalars.pp > 0 && x.pp_ring.links > 0) {
      const Seconds hop(x.pp_ring.latency_s / static_cast<double>(x.pp_ring.links));
      scalar_pp = (hop * (2.0 * (p.pp - 1)) + call) * static_cast<double>(scalars.pp);
    }
    t.dp_comm += scalar_dp;
    t.tp_comm += scalar_tp;
    t.pp_comm += scalar_pp;
    end.dp_after += scalar_dp + scalar_tp + scalar_pp;
  }

  // The calls the critical rank starts per step, by group (Estimate::calls_per_step).
  end.calls.tp = x.tp_block_calls.total() * (rank_layers * mm) +
                 (crit.first ? x.tp_embedding_calls.total() * mm : 0.0) + (crit.last ? x.tp_head_calls.total() * mm : 0.0);
  end.calls.cp = x.cp_calls * (rank_layers * mm);
  end.calls.dp = dp_calls;
  end.calls.dp += x.z3_block_calls.total() * (rank_layers * mm) + (crit.first ? x.z3_root_calls.total() * mm : 0.0);
  end.calls.pp = pp_calls;
  if (eager) {
    end.calls.tp += scalars.tp;
    end.calls.dp += scalars.replicas + scalars.shard;
    end.calls.pp += scalars.pp;
  }

  // Optimizer step over this rank's shard (CostModelOptions::optimizer_bytes_per_param), with its
  // kernels and those of the step's small all-reduces (the gradient norm over tp, pp and a
  // sharded dp; the loss over pp; for the executor also the loss and its token count over the
  // replicas).
  const double step_calls = scalars.tp + scalars.pp + scalars.shard + (eager ? scalars.replicas : 0);
  const double step_k = step_kernels(model, rank_layers, crit.first, crit.last, sharded_stage,
                                     executor_buckets.busiest_segments, o) +
                        kernels_per_call(o) * step_calls;
  end.kernels = (blk.forward.kernels + blk.backward.kernels + blk.recompute.kernels) * (rank_layers * mm) +
                (crit.first ? (head.embedding_forward.kernels + head.embedding_backward.kernels) * mm : 0) +
                (crit.last ? (head.head_forward.kernels + head.head_backward.kernels) * mm : 0) + step_k +
                kernels_per_call(o) * (dp_calls + pp_calls);
  const double local = psi / (p.zero_stage >= 1 ? x.n_shard : 1);
  const double opt_bytes = o.optimizer_bytes_per_param + (o.precision == spec::Precision::kFp16 ? 8.0 : 0.0);
  if (p.offload == spec::Offload::kNone) {
    t.optimizer = Seconds(local * opt_bytes / (cluster.gpu().hbm_bandwidth.value() * o.hbm_efficiency));
  } else {
    t.optimizer = Seconds(local * (grad_b + e) / kPcieBytesPerSecond + local / kCpuAdamParamsPerSecond);
  }
  t.optimizer += o.kernel_overhead * step_k;
  end.optimizer = t.optimizer;
  return end;
}

// Rates of a step: tokens/s per GPU, model TFLOP/s, MFU and HFU (Estimate's conventions).
struct Rates {
  core::Flops model_flops, hardware_flops;
  double tokens_per_s_per_gpu = 0, model_tflops_per_gpu = 0, mfu = 0, hfu = 0;
};

Rates rates(const spec::ModelSpec& model, const spec::ClusterSpec& cluster, const spec::ParallelConfig& p, int seq_len,
            const CostModelOptions& o, const LayerTerms& x, Seconds step_time) {
  const double step = step_time.value();
  const double gpus = cluster.num_gpus;
  const double microbatches_total = static_cast<double>(p.global_batch) / p.micro_batch;
  const double replicas_of_work = static_cast<double>(p.tp) * p.cp;  // per-rank FLOPs x tp x cp = one microbatch
  Rates r;
  r.model_flops = core::Flops(microbatches_total * replicas_of_work *
                              (model.layers * x.blk.model_flops.value() + x.head.model_flops.value()));
  r.hardware_flops = core::Flops(microbatches_total * replicas_of_work *
                                 (model.layers * x.blk.hardware_flops.value() + x.head.model_flops.value()));
  const double pk = (cluster.gpu().peak(o.precision) ? *cluster.gpu().peak(o.precision)
                                                       : *cluster.gpu().peak(spec::Precision::kBf16))
                        .value();
  r.tokens_per_s_per_gpu = static_cast<double>(p.global_batch) * seq_len / step / gpus;
  r.model_tflops_per_gpu = r.model_flops.value() / step / gpus / 1e12;
  r.mfu = r.model_flops.value() / (step * gpus * pk);
  r.hfu = r.hardware_flops.value() / (step * gpus * pk);
  return r;
}

std::string memory_detail(const MemoryBreakdown& peak, const spec::ClusterSpec& cluster, int rank) {
  return str_cat(gib(peak.total()), " GiB > ", gib(cluster.gpu().hbm_capacity), " GiB on pp rank ", rank, " (weights ",
                 gib(peak.weights), ", grads ", gib(peak.grads), ", optimizer ", gib(peak.optimizer),
                 ", activations ", gib(peak.activations), ", other ", gib(peak.other), ")");
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
  const auto& gpu = cluster.node.gpu;
  std::optional<CostModelOptions> calibrated;  // no copy (nor allocation) unless the device has its own
  if (needs_device_overheads(options, gpu)) calibrated = with_device_overheads(options, gpu);
  const CostModelOptions& o = calibrated ? *calibrated : options;
  // 1. Validity.
  std::string detail;
  if (auto why = find_invalid(model, cluster, p, seq_len, o, nullptr, &detail)) return Infeasible{*why, detail};
  const spec::RankLayout layout(p, cluster.node.gpus_per_node);
  const LayoutCosts& lc = topo.layout_costs(layout);
  if (auto why = find_invalid(model, cluster, p, seq_len, o, &lc, &detail)) return Infeasible{*why, detail};
  const int m = p.grad_accum();
  const auto stages = spec::StagePartition::balanced(model.layers, p.pp, p.virtual_stages);
  std::optional<spec::PipelineSchedule> schedule;
  if (o.exact_pipeline) schedule = spec::make_schedule(p.schedule, p.pp, p.virtual_stages, m);

  // 2. Memory of every pipeline rank.
  Estimate est;
  est.memory_per_pp_rank = memory_per_pp_rank(model, p, seq_len, stages, schedule ? &*schedule : nullptr, layout, o);
  for (int r = 0; r < p.pp; ++r) {
    if (est.memory_per_pp_rank[static_cast<std::size_t>(r)].total() > est.peak_memory().total()) est.worst_pp_rank = r;
  }
  if (est.peak_memory().total() > cluster.gpu().hbm_capacity) {
    return Infeasible{InfeasibleReason::kOutOfMemory, memory_detail(est.peak_memory(), cluster, est.worst_pp_rank)};
  }

  // 3. Per-layer costs and the communication inside a stage.
  const LayerTerms x = layer_terms(model, cluster, p, seq_len, o, lc);
  const HeadCosts& head = x.head;
  const double eff = o.network_efficiency;

  // 4. Per-stage durations of one microbatch, and the point-to-point transfer after each stage.
  const int S = stages.num_stages();
  std::vector<double> fwd(static_cast<std::size_t>(S)), bwd(static_cast<std::size_t>(S)), p2p(static_cast<std::size_t>(S)),
      wgrad(static_cast<std::size_t>(S)), z3_fwd(static_cast<std::size_t>(S)), z3_bwd(static_cast<std::size_t>(S));
  for (int s = 0; s < S; ++s) {
    const auto i = static_cast<std::size_t>(s);
    const double L = stages.layers_in(s);
    z3_fwd[i] = L * x.z3_fwd_overlapped.value();
    z3_bwd[i] = L * x.z3_bwd_overlapped.value();
    fwd[i] = L * x.layer_fwd.value();
    bwd[i] = L * x.layer_bwd.value();
    // Resuming from the pipeline's blocking receives and sends (NodeSpec::
    // compute_lost_resuming_from_call).
    if (p.pp > 1) {
      const double transfers = spec::stage_transfers_per_pass(s, S);
      fwd[i] += x.resume.value() * transfers;
      bwd[i] += x.resume.value() * transfers;
    }
    // Weight gradients: one GEMM per forward GEMM, of the same size (layer_costs.h).
    wgrad[i] = L * x.blk.forward.gemm.value();
    if (s == 0) {
      fwd[i] += (head.embedding_forward.total() + x.tp_embedding_fwd).value();
      bwd[i] += (head.embedding_backward.total() + x.tp_embedding_bwd).value();
    }
    if (s == S - 1) {
      fwd[i] += (head.head_forward.total() + x.tp_head_fwd).value();
      bwd[i] += (head.head_backward.total() + x.tp_head_bwd).value();
      wgrad[i] += head.head_forward.gemm.value();
    }
    // Stage s -> s+1 runs from pp rank s mod pp to (s+1) mod pp, same tp/cp/dp coordinates.
    if (s < S - 1 && p.pp > 1) {
      p2p[i] = (p2p_time(x.boundary, lc.pp_next[static_cast<std::size_t>(s % p.pp)], eff) + x.call).value();
    }
  }
  const std::vector<double> no_p2p(static_cast<std::size_t>(S), 0.0);
  const std::span<const double> split =
      p.schedule == spec::ScheduleKind::kZeroBubbleH1 ? std::span<const double>(wgrad) : std::span<const double>();
  // Ranks sharing CPU cores (an oversubscribed local profile) run faster while others wait: the
  // exact replay follows it (compute_sharing.h); the search's closed form does not.
  const ComputeSharing sharing(cluster, p);
  auto replay = [&](std::span<const double> transfers) {
    if (!schedule) return closed_form_makespan(p.pp, p.virtual_stages, m, fwd, bwd, transfers, split);
    if (!sharing.active()) return replay_schedule(*schedule, fwd, bwd, transfers, split);
    return replay_schedule_at_speeds(*schedule, fwd, bwd, transfers, split,
                                     [&](std::span<const char> computing, int r) { return sharing.speed(computing, r); });
  };
  const ReplayResult with_p2p = replay(p2p);
  const ReplayResult without_p2p = replay(no_p2p);
  // The critical rank: the one that finishes last.
  CriticalRank crit;
  for (int r = 0; r < p.pp; ++r) {
    if (with_p2p.finish[static_cast<std::size_t>(r)] > with_p2p.finish[static_cast<std::size_t>(crit.rank)]) crit.rank = r;
  }
  for (int s : stages.stages_of_rank(crit.rank)) {
    crit.layers += stages.layers_in(s);
    crit.first = crit.first || s == 0;
    crit.last = crit.last || s == S - 1;
    crit.backward_s += bwd[static_cast<std::size_t>(s)];
  }
  crit.params = params_of_pp_rank(model, p, stages, crit.rank);
  crit.pp_comm = std::max(Seconds(0), with_p2p.makespan - without_p2p.makespan);
  const auto cr = static_cast<std::size_t>(crit.rank);
  crit.pp_bubble = std::max(Seconds(0), without_p2p.makespan - without_p2p.busy[cr]);
  if (without_p2p.work[cr] > Seconds(0)) crit.compute_scale = without_p2p.busy[cr] / without_p2p.work[cr];

  // 5. Data parallelism and the optimizer on the critical rank.
  const StepEnd end = step_time(model, cluster, p, o, x, crit, est.time);
  est.stages.forward_s = fwd;
  est.stages.backward_s = bwd;
  est.stages.weight_grad_s = wgrad;
  est.stages.p2p_after_s = p2p;
  est.stages.dp_reduce = end.dp_reduce;
  est.stages.dp_buckets = end.dp_buckets;
  est.stages.dp_reductions = end.dp_reductions;
  est.stages.dp_after = end.dp_after;
  est.stages.optimizer = end.optimizer;
  est.stages.outside_schedule = end.outside_schedule;
  est.stages.overlap_slowdown = x.slow_dp;
  if (p.zero_stage == 3 && x.n_shard > 1) {
    est.stages.zero3_overlapped_forward_s = z3_fwd;
    est.stages.zero3_overlapped_backward_s = z3_bwd;
  }
  est.kernels_per_step = end.kernels;
  est.calls_per_step = end.calls;
  est.critical_pp_rank = crit.rank;

  est.by_kind = time_by_kind(x, crit, p.grad_accum(), est.time);

  // 6. Rates.
  const Rates r = rates(model, cluster, p, seq_len, o, x, est.time.total());
  est.model_flops_per_step = r.model_flops;
  est.hardware_flops_per_step = r.hardware_flops;
  est.tokens_per_s_per_gpu = r.tokens_per_s_per_gpu;
  est.model_tflops_per_gpu = r.model_tflops_per_gpu;
  est.mfu = r.mfu;
  est.hfu = r.hfu;
  return est;
}

SearchEstimate evaluate_search(const spec::ModelSpec& model, const spec::ClusterSpec& cluster,
                               const spec::ParallelConfig& p, int seq_len, const CostModelOptions& options,
                               const Topology& topo) {
  const auto& gpu = cluster.node.gpu;
  std::optional<CostModelOptions> calibrated;  // no copy (nor allocation) unless the device has its own
  if (needs_device_overheads(options, gpu)) calibrated = with_device_overheads(options, gpu);
  const CostModelOptions& o = calibrated ? *calibrated : options;
  SearchEstimate out;
  if (auto why = find_invalid(model, cluster, p, seq_len, o, nullptr, nullptr)) {
    out.infeasible = why;
    return out;
  }
  const spec::RankLayout layout(p, cluster.node.gpus_per_node);
  const LayoutCosts& lc = topo.layout_costs(layout);
  if (auto why = find_invalid(model, cluster, p, seq_len, o, &lc, nullptr)) {
    out.infeasible = why;
    return out;
  }
  const int L = model.layers, pp = p.pp, v = p.virtual_stages, m = p.grad_accum();

  // The pipeline ranks that can be worst. Under the balanced partition the extra layers go to the
  // inner stages first, so among ranks 1..pp-2 (no embedding, no head) rank 1 holds the most
  // layers and the heaviest chunk, and the closed-form live microbatches never grow with the rank:
  // rank 1 bounds every inner rank in each memory component and in work. Only ranks 0, 1 and
  // pp - 1 need computing; the inner ranks 2..pp-2 enter the bubble as a sum of their layers.
  struct Rank {
    int r;
    double layers, heaviest;
    bool first, last;
  };
  Rank ranks[3];
  int n_ranks = 0;
  auto add_rank = [&](int r) {
    Rank k{r, static_cast<double>(spec::StagePartition::balanced_layers_of_rank(L, pp, v, r)), 0, r == 0, r == pp - 1};
    for (int c = 0; c < v; ++c) {
      k.heaviest = std::max(k.heaviest, static_cast<double>(spec::StagePartition::balanced_layers_in(L, pp, v, c * pp + r)));
    }
    ranks[n_ranks++] = k;
  };
  add_rank(0);
  if (pp >= 3) add_rank(1);
  if (pp >= 2) add_rank(pp - 1);
  double inner_layers = L;  // ranks 2..pp-2
  for (int i = 0; i < n_ranks; ++i) inner_layers -= ranks[i].layers;

  // Memory: the first rank with the highest total, as evaluate() picks it.
  const auto counts = model.param_counts();
  const double block_params = block_params_per_tp(counts, p.tp);
  const MemoryTerms mt = memory_terms(model, p, seq_len, lc.shard_group, o);
  const bool single_stage = pp * v == 1;
  double params[3];
  for (int i = 0; i < n_ranks; ++i) {
    const Rank& k = ranks[i];
    const double root = root_params(model, counts, p.tp, k.first, k.last, single_stage);
    params[i] = k.layers * block_params + root;
    const double act = mt.activation_per_layer * k.heaviest *
                       spec::in_flight_closed_form(p.schedule, pp, v, m, k.r);
    const MemoryBreakdown mem = rank_memory(mt, p, k.layers, root, act, k.first, k.last, o);
    if (i == 0 || mem.total() > out.peak_memory.total()) {
      out.peak_memory = mem;
      out.worst_pp_rank = k.r;
    }
  }
  if (out.peak_memory.total() > cluster.gpu().hbm_capacity) {
    out.infeasible = InfeasibleReason::kOutOfMemory;
    return out;
  }

  // Time: closed_form_makespan over the ranks' work per microbatch (pipeline_replay.h).
  const LayerTerms x = layer_terms(model, cluster, p, seq_len, o, lc);
  const HeadCosts& head = x.head;
  const double lf = x.layer_fwd.value(), lb = x.layer_bwd.value(), lw = x.blk.forward.gemm.value();
  const bool zero_bubble = p.schedule == spec::ScheduleKind::kZeroBubbleH1;
  double work[3], fill[3], backward[3];
  int crit_i = 0;
  for (int i = 0; i < n_ranks; ++i) {
    const Rank& k = ranks[i];
    double f = k.layers * lf, b = k.layers * lb, w = k.layers * lw;
    if (k.first) {
      f += (head.embedding_forward.total() + x.tp_embedding_fwd).value();
      b += (head.embedding_backward.total() + x.tp_embedding_bwd).value();
    }
    if (k.last) {
      f += (head.head_forward.total() + x.tp_head_fwd).value();
      b += (head.head_backward.total() + x.tp_head_bwd).value();
      w += head.head_forward.gemm.value();
    }
    // Resuming from its receives and sends, as evaluate()'s stage durations.
    const double transfers = spec::rank_transfers_per_pass(p.pp, p.virtual_stages, k.r);
    f += x.resume.value() * transfers;
    b += x.resume.value() * transfers;
    work[i] = f + b;
    backward[i] = b;
    fill[i] = bubble_fill(f, b, w, zero_bubble);
    if (work[i] > work[crit_i]) crit_i = i;
  }
  double others = inner_layers * bubble_fill(lf, lb, lw, zero_bubble);
  for (int i = 0; i < n_ranks; ++i) others += i == crit_i ? 0.0 : fill[i];
  // Transfers: stage s -> s+1 for s < S - 1 leaves pp rank s mod pp: every link of the ring v
  // times, but the wrap from pp - 1 to 0 once less.
  Seconds transfers;
  if (pp > 1) {
    const double eff = o.network_efficiency;
    transfers = (p2p_time(x.boundary, lc.pp_ring, eff) + x.call * static_cast<double>(pp)) * static_cast<double>(v) -
                (p2p_time(x.boundary, lc.pp_next.back(), eff) + x.call);
  }
  const PipelineTerms pipe = closed_form_terms(v, m, work[crit_i], others, transfers.value());
  CriticalRank crit;
  crit.rank = ranks[crit_i].r;
  crit.layers = ranks[crit_i].layers;
  crit.first = ranks[crit_i].first;
  crit.last = ranks[crit_i].last;
  crit.params = params[crit_i];
  crit.backward_s = backward[crit_i];
  crit.pp_comm = Seconds(pipe.transfers_s);
  crit.pp_bubble = Seconds(std::max(0.0, pipe.bubble_s));
  (void)step_time(model, cluster, p, o, x, crit, out.time);
  const Rates r = rates(model, cluster, p, seq_len, o, x, out.time.total());
  out.tokens_per_s_per_gpu = r.tokens_per_s_per_gpu;
  out.model_tflops_per_gpu = r.model_tflops_per_gpu;
  out.mfu = r.mfu;
  out.hfu = r.hfu;
  return out;
}

}  // namespace cpt::cost
