#include "costmodel/step_inventory.h"

#include <algorithm>
#include <cmath>

#include "core/check.h"
#include "costmodel/executor_buckets.h"
#include "costmodel/kernel_dispatch.h"
#include "costmodel/layer_costs.h"
#include "costmodel/expert_work.h"
#include "costmodel/memory_model.h"
#include "costmodel/work_item_builders.h"
#include "spec/executor_support.h"
#include "spec/parameter_order.h"

namespace cpt::cost {

using core::Bytes;

void StepInventory::add(const WorkItem& item) {
  CPT_CHECK(size_ < kMaxWorkItems, "step inventory: more than ", kMaxWorkItems, " work items");
  items_[static_cast<std::size_t>(size_++)] = item;
}

namespace {

// Where the runtimes differ in the work they do (the rest is the parallel layout's).
struct Runtime {
  bool executor = false;  // cpt's own (KernelDispatch::kEager); else Megatron-LM with fused kernels
  // The vocabulary-parallel cross-entropy's all-reduces: Megatron's three (max, target logit,
  // exp-sum); the executor gathers the maxima and reduces the other two in one call (two calls).
  double loss_all_reduces = 3;
  // The executor all-reduces each sequence-parallel norm's weight gradient over tp in every
  // backward (Megatron sums them once per step, which is not counted).
  bool norm_grads_each_backward = false;
  // The executor's ZeRO-3 root unit (embedding, final norm, LM head) is gathered before each
  // microbatch's forward and reduce-scattered after its backward, nothing beside either
  // (executor/parallel/fully_sharded.h).
  bool gathers_root_unit = false;
};

Runtime runtime_of(const spec::ParallelConfig& p, const CostModelOptions& o) {
  Runtime r;
  r.executor = o.dispatch == KernelDispatch::kEager;
  if (r.executor) {
    r.loss_all_reduces = 2;
    r.norm_grads_each_backward = p.sequence_parallel;
    r.gathers_root_unit = true;
  }
  return r;
}

// KL distillation under tensor parallelism: the teacher's embedding (and under SP its head's
// input gather), the KL's vocabulary-parallel log-softmaxes (a max and a sum each) and its sum over
// the vocabulary shards, forward; the student's normaliser gradient, backward.
void add_tensor_parallel_teacher(StepInventory& inv, const spec::ParallelConfig& p, const Runtime& runtime,
                                 Bytes activations, Bytes loss, const CostModelOptions& o) {
  const bool sp = p.sequence_parallel;
  const double around_one = sp ? kernels_per_sequence_parallel_call(o) : kernels_per_call(o);
  const WorkKind scatter = sp ? WorkKind::kReduceScatter : WorkKind::kAllReduce;
  inv.add(waiting(
      calls_of(WorkPass::kTeacher, WorkScope::kEmbedding, CommGroup::kTp, scatter, activations, 1, around_one)));
  if (sp) {
    inv.add(waiting(calls_of(WorkPass::kTeacher, WorkScope::kHead, CommGroup::kTp, WorkKind::kAllGather, activations, 1,
                             around_one)));
  }
  if (runtime.executor) {
    // Each log-softmax's maxima gathered from every tp rank (fp32 per token), its normaliser
    // reduced, and the KL's per-token sum reduced.
    inv.add(calls_of(WorkPass::kTeacher, WorkScope::kHead, CommGroup::kTp, WorkKind::kAllGather, loss * p.tp, 2,
                     kernels_per_call(o)));
    inv.add(calls_of(WorkPass::kTeacher, WorkScope::kHead, CommGroup::kTp, WorkKind::kAllReduce, loss, 3,
                     kernels_per_call(o)));
  } else {
    inv.add(calls_of(WorkPass::kTeacher, WorkScope::kHead, CommGroup::kTp, WorkKind::kAllReduce, loss, 5,
                     kernels_per_call(o)));
  }
  // The backward of copy_to_tp in executor/parallel/tensor_parallel.cpp vocab_parallel_log_softmax.
  inv.add(calls_of(WorkPass::kBackward, WorkScope::kHead, CommGroup::kTp, WorkKind::kAllReduce, loss, 1,
                   kernels_per_call(o)));
}

// Tensor parallelism (Megatron's f/g): two collectives per layer and pass (after attention and
// after the MLP; see per_layer for MoE layers), each an all-reduce or, under sequence parallelism, a reduce-scatter and
// an all-gather priced as one; the embedding's sum over the vocabulary shards forward (a reduce-scatter under SP),
// under SP also its gradient gathered backward; the LM head's input gathered forward under SP and its gradient reduced
// backward; the loss's all-reduces.
void add_tensor_parallel(StepInventory& inv, const spec::ModelSpec& model, const spec::ParallelConfig& p,
                         const Runtime& runtime, double tokens, double hidden, double element_bytes,
                         const CostModelOptions& o) {
  if (p.tp <= 1) return;
  // Per layer: one collective after attention and one after the MLP. An MoE layer without shared
  // experts has no tp-split MLP: its routed experts run on the sequence-parallel shard (their
  // tokens gathered over etp, add_expert_parallel), so only the dense layers run the second.
  const bool mlp_on_every_layer = !model.moe.present() || model.moe.shared_ffn_hidden > 0;
  const Bytes activations(static_cast<std::int64_t>(tokens * hidden * element_bytes));
  const Bytes norm_grads(static_cast<std::int64_t>(hidden * 4));  // fp32 weight gradient of one norm
  const Bytes loss(static_cast<std::int64_t>(tokens * 4));        // fp32 per token
  const bool sp = p.sequence_parallel;
  const double around_pair = sp ? 2 * kernels_per_sequence_parallel_call(o) : kernels_per_call(o);
  const double around_one = sp ? kernels_per_sequence_parallel_call(o) : kernels_per_call(o);
  const WorkKind block_kind = sp ? WorkKind::kReduceScatterAllGather : WorkKind::kAllReduce;
  auto add_collectives = [&](WorkPass pass, WorkScope scope, double per_layer) {
    WorkItem item = waiting(calls_of(pass, scope, CommGroup::kTp, block_kind, activations, per_layer, 0));
    item.calls = (sp ? 2 : 1) * per_layer;
    item.kernels = per_layer * around_pair;
    inv.add(item);
  };
  auto block_collectives = [&](WorkPass pass) {
    if (mlp_on_every_layer) {
      add_collectives(pass, WorkScope::kLayer, 2);
    } else {
      add_collectives(pass, WorkScope::kLayer, 1);
      add_collectives(pass, WorkScope::kDenseLayer, 1);
    }
  };
  block_collectives(WorkPass::kForward);
  block_collectives(WorkPass::kBackward);
  if (p.recompute == spec::Recompute::kFull) block_collectives(WorkPass::kRecompute);
  if (o.distill_teacher) block_collectives(WorkPass::kTeacher);
  if (runtime.norm_grads_each_backward) {
    inv.add(calls_of(WorkPass::kBackward, WorkScope::kLayer, CommGroup::kTp, WorkKind::kAllReduce, norm_grads, 2,
                     kernels_per_call(o)));
  }
  if (model.qk_norm && runtime.executor) {
    // Each rank normalises its own heads with the replicated q/k norm weights: cpt's executor sums
    // their gradients over tp every backward (model/llama_blocks.h).
    const Bytes head_norm_grads(static_cast<std::int64_t>(model.head_dim()) * 4);
    inv.add(calls_of(WorkPass::kBackward, WorkScope::kLayer, CommGroup::kTp, WorkKind::kAllReduce, head_norm_grads, 2,
                     kernels_per_call(o)));
  }
  if (model.mla.present() && runtime.executor) {
    // Latent attention's down projections and latent norms are replicated while each rank's heads
    // use part of the latents: cpt's executor sums their fp32 gradients over tp every backward, one
    // call per tensor (model/latent_attention.h), priced at their mean size.
    const std::int64_t elements = model.param_counts().attention_replicated_per_layer;
    const std::int64_t tensors = model.mla.q_lora_rank > 0 ? 4 : 2;
    inv.add(calls_of(WorkPass::kBackward, WorkScope::kLayer, CommGroup::kTp, WorkKind::kAllReduce,
                     Bytes(elements * 4 / tensors), static_cast<double>(tensors), kernels_per_call(o)));
  }
  const WorkKind scatter = sp ? WorkKind::kReduceScatter : WorkKind::kAllReduce;
  const WorkKind gather = sp ? WorkKind::kAllGather : WorkKind::kAllReduce;
  inv.add(waiting(
      calls_of(WorkPass::kForward, WorkScope::kEmbedding, CommGroup::kTp, scatter, activations, 1, around_one)));
  if (o.distill_teacher) add_tensor_parallel_teacher(inv, p, runtime, activations, loss, o);
  if (sp) {
    inv.add(waiting(
        calls_of(WorkPass::kBackward, WorkScope::kEmbedding, CommGroup::kTp, gather, activations, 1, around_one)));
    inv.add(
        waiting(calls_of(WorkPass::kForward, WorkScope::kHead, CommGroup::kTp, gather, activations, 1, around_one)));
  }
  if (runtime.executor) {
    // Its maxima (fp32 per token) gathered from every tp rank; its target logits and sums of
    // exponentials reduced in one call.
    inv.add(calls_of(WorkPass::kForward, WorkScope::kHead, CommGroup::kTp, WorkKind::kAllGather, loss * p.tp, 1,
                     kernels_per_call(o)));
    inv.add(calls_of(WorkPass::kForward, WorkScope::kHead, CommGroup::kTp, WorkKind::kAllReduce, loss * 2, 1,
                     kernels_per_call(o)));
  } else {
    inv.add(calls_of(WorkPass::kForward, WorkScope::kHead, CommGroup::kTp, WorkKind::kAllReduce, loss,
                     runtime.loss_all_reduces, kernels_per_call(o)));
  }
  inv.add(
      waiting(calls_of(WorkPass::kBackward, WorkScope::kHead, CommGroup::kTp, scatter, activations, 1, around_one)));
  if (runtime.norm_grads_each_backward) {  // the final norm's
    inv.add(calls_of(WorkPass::kBackward, WorkScope::kHead, CommGroup::kTp, WorkKind::kAllReduce, norm_grads, 1,
                     kernels_per_call(o)));
  }
}

// Context parallelism per layer. All-gather form: K and V gathered before attention (two
// blocking calls), their gradients reduce-scattered after it (two), gathered again when full
// recomputation reruns the forward. Ring form: cp − 1 steps per pass, each a send and a receive
// of one block to the next rank, hidden behind the attention core; forward passes K and V,
// backward also their gradients.
void add_context_parallel(StepInventory& inv, const spec::ModelSpec& model, const spec::ParallelConfig& p,
                          double tokens, double element_bytes, const CostModelOptions& o) {
  if (p.cp <= 1) return;
  const spec::AttentionWidths widths = model.attention_widths();
  const double kv = tokens * static_cast<double>(widths.key + widths.value) / p.tp * element_bytes;
  if (o.context_parallel == ContextParallelKind::kAllGather) {
    const Bytes gathered(static_cast<std::int64_t>(kv / 2 * p.cp));
    const double around = kernels_per_context_parallel_call(o);
    auto gathers = [&](WorkPass pass, WorkKind kind) {
      inv.add(waiting(calls_of(pass, WorkScope::kLayer, CommGroup::kCp, kind, gathered, 2, around)));
    };
    gathers(WorkPass::kForward, WorkKind::kAllGather);
    gathers(WorkPass::kBackward, WorkKind::kReduceScatter);
    if (p.recompute == spec::Recompute::kFull) gathers(WorkPass::kRecompute, WorkKind::kAllGather);
    if (o.distill_teacher) gathers(WorkPass::kTeacher, WorkKind::kAllGather);
    return;
  }
  const double steps = p.cp - 1;
  auto ring = [&](WorkPass pass, double blocks) {
    const Bytes per_step(static_cast<std::int64_t>(blocks * kv * steps) / static_cast<std::int64_t>(steps));
    WorkItem item = calls_of(pass, WorkScope::kLayer, CommGroup::kCp, WorkKind::kSendReceive, per_step, steps, 0,
                             Exposure::kBehindAttention);
    item.calls = 2 * steps;
    inv.add(item);
  };
  ring(WorkPass::kForward, 1);
  ring(WorkPass::kBackward, 2);
  if (o.distill_teacher) ring(WorkPass::kTeacher, 1);
}

// ZeRO-3 over the shard group, every microbatch: each block's parameters gathered forward and
// again backward, its gradients reduce-scattered backward, prefetched behind compute; the
// executor's root unit (what the rank holds outside its blocks) gathered and reduced between
// passes, kept gathered in between (FSDP's root is not resharded after forward either).
void add_zero3(StepInventory& inv, const spec::ModelSpec& model, const spec::ParallelConfig& p, int shard_group,
               const Runtime& runtime, double element_bytes, const CostModelOptions& o) {
  if (p.zero_stage != 3) return;
  const auto counts = model.param_counts();
  // Over a group of one a unit is used in place (parallel/fully_sharded.h): its parameters and
  // gradient views are set as around a collective, and no collective runs.
  bool in_place = false;
  auto unit = [&](WorkPass pass, WorkScope scope, CommGroup group, WorkKind kind, double params, double bytes_per_param,
                  Exposure exposure, double kernels_around) {
    const Bytes bytes(static_cast<std::int64_t>(params * bytes_per_param));
    WorkItem item = calls_of(pass, scope, group, kind, bytes, 1, kernels_around, exposure);
    if (in_place) item.operations = item.call_overheads = item.calls = 0;
    inv.add(item);
  };
  const double grad_bytes = gradient_bytes_per_param(o);
  // A block's units, prefetched: gathered forward and backward, reduce-scattered backward, with
  // `around` kernels each; the teacher, sharded like the student (executor/train/continual_objective.h),
  // gathered and released within its forward (`tensors`: the unit's, kernels_per_zero3_teacher_unit).
  // The routed experts are their own units over expert-dp unless they live with their layer
  // (spec::ParallelConfig::experts_with_their_layer).
  auto block_units = [&](WorkScope scope, CommGroup group, double params, double around, double tensors) {
    unit(WorkPass::kForward, scope, group, WorkKind::kAllGather, params, element_bytes, Exposure::kPrefetched, around);
    unit(WorkPass::kBackward, scope, group, WorkKind::kAllGather, params, element_bytes, Exposure::kPrefetched, around);
    unit(WorkPass::kBackward, scope, group, WorkKind::kReduceScatter, params, grad_bytes, Exposure::kPrefetched,
         around);
    if (o.distill_teacher) {
      unit(WorkPass::kTeacher, scope, group, WorkKind::kAllGather, params, element_bytes, Exposure::kPrefetched,
           kernels_per_zero3_teacher_unit(tensors, o));
    }
  };
  // The block unit is the mean layer's (its size and tensors averaged over dense and MoE layers);
  // the routed experts' own unit is each MoE layer's.
  const double experts = expert_params_per_layer(counts, p);
  const bool experts_apart = experts > 0 && !p.experts_with_their_layer();
  const double expert_tensors = experts_apart ? routed_expert_tensors_per_layer(model, p.ep) : 0.0;
  if (experts_apart) {
    in_place = p.expert_dp() == 1;
    block_units(WorkScope::kMoeLayer, CommGroup::kExpertReplicas, expert_params_per_moe_layer(counts, p),
                kernels_per_zero3_call(o), routed_expert_tensors_per_moe_layer(model, p.ep));
    in_place = false;
  }
  if (shard_group <= 1) return;
  block_units(WorkScope::kLayer, CommGroup::kShard, block_params_per_tp(counts, p.tp) + (experts_apart ? 0.0 : experts),
              experts_apart ? kernels_per_zero3_call(o) : kernels_per_zero3_block_call(model, o),  // experts too
              dense_block_tensors(model) + moe_extra_tensors_per_layer(model, p.ep) - expert_tensors);
  if (!runtime.gathers_root_unit) return;
  const bool single_stage = p.pp * p.virtual_stages == 1;
  const double root = root_params(model, counts, p.tp, true, single_stage, single_stage);
  const double around = kernels_per_zero3_call(o);
  unit(WorkPass::kForward, WorkScope::kEmbedding, CommGroup::kShard, WorkKind::kAllGather, root, element_bytes,
       Exposure::kBetweenPasses, around);
  if (o.distill_teacher) {
    unit(WorkPass::kTeacher, WorkScope::kEmbedding, CommGroup::kShard, WorkKind::kAllGather, root, element_bytes,
         Exposure::kBetweenPasses, kernels_per_zero3_teacher_unit(model.tied_embeddings ? 2 : 3, o));
  }
  unit(WorkPass::kBackward, WorkScope::kEmbedding, CommGroup::kShard, WorkKind::kReduceScatter, root, grad_bytes,
       Exposure::kBetweenPasses, around);
}

}  // namespace

StepInventory microbatch_work(const spec::ModelSpec& model, const spec::ParallelConfig& p, int seq_len, int shard_group,
                              const CostModelOptions& o) {
  StepInventory inv;
  const Runtime runtime = runtime_of(p, o);
  const double tokens = static_cast<double>(p.micro_batch) * seq_len / p.cp;  // per rank
  const double element_bytes = activation_bytes(o.precision);
  add_tensor_parallel(inv, model, p, runtime, tokens, model.hidden, element_bytes, o);
  add_context_parallel(inv, model, p, tokens, element_bytes, o);
  add_zero3(inv, model, p, shard_group, runtime, element_bytes, o);
  add_expert_parallel(inv, model, p, tokens, element_bytes, o);
  add_sequence_shard_routing(inv, model, p, o);
  if (p.pp > 1) {
    // The activation passed between stages (scattered over tp under SP), and its gradient back.
    // The kernels around a transfer depend on its direction: step_end.cpp folds them per rank
    // (kernel_dispatch.h TransferKernels), none here.
    const Bytes boundary(static_cast<std::int64_t>(static_cast<double>(p.micro_batch) * seq_len / p.cp * model.hidden *
                                                   element_bytes / (p.sequence_parallel ? p.tp : 1)));
    for (const WorkPass pass : {WorkPass::kForward, WorkPass::kBackward}) {
      inv.add(calls_of(pass, WorkScope::kTransfer, CommGroup::kPp, WorkKind::kSendReceive, boundary, 1, 0));
    }
    // KL distillation: the teacher's hidden states, sent on their own beside the student's
    // (executor/parallel/pipeline_executor.cpp).
    if (o.distill_teacher) {
      inv.add(
          calls_of(WorkPass::kTeacher, WorkScope::kTransfer, CommGroup::kPp, WorkKind::kSendReceive, boundary, 1, 0));
    }
  }
  return inv;
}

namespace {

// The hybrid all-reduce across nodes of the gradient shard. The executor all-reduces each unit's
// shard right after its reduce-scatter, every microbatch, and waits for it
// (parallel/fully_sharded.cpp); Megatron-style runtimes once per step, bucketed.
void add_hybrid_all_reduce(StepInventory& inv, const spec::ModelSpec& model, const spec::ParallelConfig& p,
                           int shard_size, const RankShare& share, const Runtime& runtime, Bytes grad_bytes,
                           const CostModelOptions& o) {
  const double shard = std::max(1, shard_size);
  const double grad_b = gradient_bytes_per_param(o);
  auto all_reduce = [&](WorkScope scope, Bytes bytes, double calls) {
    inv.add(calls_of(WorkPass::kStepEnd, scope, CommGroup::kReplicate, WorkKind::kAllReduce, bytes, calls,
                     kernels_per_call(o), Exposure::kAfterBackward));
  };
  if (!runtime.executor) {
    WorkItem item = calls_of(WorkPass::kStepEnd, WorkScope::kStep, CommGroup::kReplicate, WorkKind::kAllReduce,
                             Bytes(static_cast<std::int64_t>(static_cast<double>(grad_bytes.value()) / shard)), 1, 0,
                             Exposure::kAfterBackward);
    item.call_overheads = item.calls = inv.gradient_buckets;
    item.kernels = kernels_per_call(o) * inv.gradient_buckets;
    inv.add(item);
    return;
  }
  const auto counts = model.param_counts();
  all_reduce(WorkScope::kLayer, Bytes(static_cast<std::int64_t>(block_params_per_tp(counts, p.tp) * grad_b / shard)),
             1);
  const double root = root_params(model, counts, p.tp, share.first, share.last, p.pp * p.virtual_stages == 1);
  if (root > 0) {
    all_reduce(WorkScope::kStep, Bytes(static_cast<std::int64_t>(root * grad_b / shard)), p.grad_accum());
  }
}

// The executor's scalar all-reduces of every step (spec::executor_step_scalar_all_reduces), and
// EWC's (spec::executor_ewc_scalar_all_reduces).
void add_step_scalars(StepInventory& inv, const spec::ModelSpec& model, const spec::ParallelConfig& p, int shard_group,
                      const CostModelOptions& o) {
  const spec::StepScalarAllReduces scalars =
      spec::executor_step_scalar_all_reduces(p, shard_group, model.moe.present());
  auto add = [&](CommGroup group, int calls, int values) {
    if (calls <= 0) return;
    WorkItem item = calls_of(WorkPass::kStepEnd, WorkScope::kStep, group, WorkKind::kScalarAllReduce,
                             Bytes(std::int64_t{values} * spec::kScalarValueBytes), calls, kernels_per_call(o));
    item.resumes = false;  // after the step's compute
    inv.add(item);
  };
  // The replicas' loss-token count (one value) and loss sums (two); the last stage's loss (two)
  // and the norms' sums (one each) over pp; every other group's norm sum (one).
  add(CommGroup::kReplicas, std::min(scalars.replicas, 1), 1);
  add(CommGroup::kReplicas, scalars.replicas - 1, 2);
  add(CommGroup::kShard, scalars.shard, 1);
  add(CommGroup::kTp, scalars.tp, 1);
  add(CommGroup::kPp, std::min(scalars.pp, 1), 2);
  add(CommGroup::kPp, scalars.pp - 1, 1);
  add(CommGroup::kExpertTp, scalars.etp, 1);
  add(CommGroup::kExpert, scalars.ep, 1);
  add(CommGroup::kExpertReplicas, scalars.expert_shard, 1);
  if (o.ewc) {
    const spec::StepScalarAllReduces ewc = spec::executor_ewc_scalar_all_reduces(p, shard_group, model.moe.present());
    add(CommGroup::kShard, ewc.shard, 1);
    add(CommGroup::kTp, ewc.tp, 1);
    add(CommGroup::kExpertTp, ewc.etp, 1);
    add(CommGroup::kExpert, ewc.ep, 1);
    add(CommGroup::kExpertReplicas, ewc.expert_shard, 1);
    add(CommGroup::kPp, ewc.pp, 1);
  }
}

}  // namespace

void add_step_end_work(StepInventory& inv, const spec::ModelSpec& model, const spec::ParallelConfig& p,
                       const StepEndGroups& groups, const RankShare& share, const CostModelOptions& o) {
  const Runtime runtime = runtime_of(p, o);
  const double grad_b = gradient_bytes_per_param(o);
  const Bytes grad_bytes(static_cast<std::int64_t>(share.params * grad_b));
  // Buckets per reduction: the executor's own (whole parameters, executor_buckets.h); Megatron's
  // filled to the cap.
  const int shard_group = groups.shard_group;
  const bool experts_apart = spec::routed_experts_apart(model, p);
  if (runtime.executor) {
    // Under expert parallelism the executor's two optimizers bucket (and shard) their own
    // parameters: the routed experts over expert-dp, the rest over the replicas.
    auto executor_buckets = [&](int group, spec::ParameterSubset subset) {
      return executor_gradient_buckets(
          model, p.tp,
          spec::StagePartition::balanced_ranges_of_rank(model.layers, p.pp, p.virtual_stages, share.pp_rank),
          share.first, share.last, p.pp * p.virtual_stages == 1, o.bucket_elements,
          p.zero_stage == 1 || p.zero_stage == 2 ? group : 1, subset, p.ep, p.etp);
    };
    const BucketStats buckets = executor_buckets(
        shard_group, experts_apart ? spec::ParameterSubset::kAllButRoutedExperts : spec::ParameterSubset::kAll);
    inv.gradient_buckets = buckets.count;
    inv.optimizer_segments = buckets.busiest_segments;
    if (experts_apart) {
      const BucketStats experts = executor_buckets(p.expert_dp(), spec::ParameterSubset::kRoutedExperts);
      inv.expert_gradient_buckets = experts.count;
      inv.gradient_buckets += experts.count;
      inv.optimizer_segments += experts.busiest_segments;
    }
  } else {
    inv.gradient_buckets = std::max(1.0, std::ceil(share.params / static_cast<double>(o.bucket_elements)));
  }
  // ZeRO-2 keeps only its gradient shard, so it reduce-scatters after every microbatch's backward
  // (DeepSpeed's micro-step reduction); ZeRO 0/1 accumulate whole gradients, as does the executor
  // under a pipeline schedule (spec::executor_zero2_reduces_each_microbatch).
  const bool accumulates = runtime.executor && !spec::executor_zero2_reduces_each_microbatch(p);
  inv.gradient_reductions = p.zero_stage == 2 && !accumulates ? p.grad_accum() : 1;
  inv.reduces_gradients = shard_group > 1 || (p.hybrid_shard && groups.replicate_size > 1);
  // Routed experts reduce over expert-dp (spec::ParallelConfig::expert_dp), the rest over the
  // replicas; each its share of the buckets.
  const double expert_share =
      share.params > 0 && !p.experts_with_their_layer() ? share.expert_params / share.params : 0.0;
  const int expert_dp = p.expert_dp();
  inv.reduces_gradients = inv.reduces_gradients || (expert_share > 0 && expert_dp > 1);
  auto bucketed = [&](WorkKind kind, double bytes_per_param, Exposure exposure) {
    auto add = [&](CommGroup group, double params, double buckets) {
      WorkItem item =
          calls_of(WorkPass::kStepEnd, exposure == Exposure::kBehindBackward ? WorkScope::kReduction : WorkScope::kStep,
                   group, kind, Bytes(static_cast<std::int64_t>(params * bytes_per_param)), 1, 0, exposure);
      item.call_overheads = item.calls = buckets;
      item.kernels = kernels_per_call(o) * buckets;
      inv.add(item);
    };
    const double buckets = inv.gradient_buckets;
    if (expert_share <= 0) {
      add(CommGroup::kReplicas, share.params, buckets);
      return;
    }
    const double expert_buckets = inv.expert_gradient_buckets >= 0 ? inv.expert_gradient_buckets
                                                                   : std::max(1.0, std::round(buckets * expert_share));
    if (shard_group > 1)
      add(CommGroup::kReplicas, share.params - share.expert_params, std::max(1.0, buckets - expert_buckets));
    if (expert_dp > 1) add(CommGroup::kExpertReplicas, share.expert_params, expert_buckets);
  };
  if (inv.reduces_gradients) {
    if (p.zero_stage == 0) {
      bucketed(WorkKind::kAllReduce, grad_b, Exposure::kBehindBackward);
    } else if (p.zero_stage <= 2) {
      bucketed(WorkKind::kReduceScatter, grad_b, Exposure::kBehindBackward);
      bucketed(WorkKind::kAllGather, activation_bytes(o.precision), Exposure::kAfterBackward);
    } else if (p.hybrid_shard && groups.replicate_size > 1) {
      add_hybrid_all_reduce(inv, model, p, groups.shard_size, share, runtime, grad_bytes, o);
    }
  }
  if (runtime.executor) add_step_scalars(inv, model, p, shard_group, o);
}

}  // namespace cpt::cost
