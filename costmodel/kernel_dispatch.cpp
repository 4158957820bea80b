#include "costmodel/kernel_dispatch.h"
#include "spec/parameter_order.h"

namespace cpt::cost {

namespace {

bool eager(const CostModelOptions& o) {
  return o.dispatch == KernelDispatch::kEager;
}

}  // namespace

PassKernels layer_kernels(const CostModelOptions& o) {
  if (!eager(o)) {
    const double fwd = o.flash_attention ? 12 : 15;
    return {fwd, 2 * fwd};
  }
  return {61, 76};
}

// cpt's MoE layer (model/moe_mlp.cpp) beyond a dense layer, counted with the op counter on the
// layer alone (kernel_dispatch.h): forward 30 + 11 per routed expert (9 under expert parallelism:
// no per-expert count copy), 9 for shared experts, 12 for a capacity; backward 4 + 12 per expert,
// 12 for shared experts, 1 for a capacity. Expert parallelism (parallel/expert_parallel.cpp) adds
// the dispatch, its three calls' own operators included (the inventory charges its all-to-alls and
// count gather no kernels of their own), and the second optimizer's per-step kernels (the experts'
// own norm, clipping and AdamW call). Routing over sequence shards (tp > 1 with sequence
// parallelism, or cp > 1; model/moe_routing.cpp) adds 40 forward (the per-run counts and the
// offsets) and 4 per group it gathers over (tp, cp: the output buffer and views), 3 more for a
// capacity; 2 backward under sequence parallelism (the router's weight entering the tp region). The
// inventory charges the gathers and the router's all-reduce no kernels of their own. Group-limited
// routing (model/moe_routing.h) adds 11 forward (the group scores, the best groups' mask and the
// weights' gather); its backward has as many nodes as the plain top-k's. The auxiliary loss per
// sequence (CostModelOptions::aux_loss_per_sequence) adds 9 forward on whole sequences (the
// per-sequence counts and sums), 3 on sequence shards (whose gather brings them), and 1 backward
// (tiny-v3 of tests/integration/experts_train_test.cpp, one process, cp 2 and tp 2 + SP, with and
// without it).
constexpr double kMoeForward = 30, kMoeBackward = 4;
constexpr double kExpertForward = 11, kLocalExpertForward = 9, kExpertBackward = 12;
constexpr double kSharedForward = 9, kSharedBackward = 12, kCapacityForward = 12, kCapacityBackward = 1;
constexpr double kEpDispatchForward = 13, kEpDispatchBackward = 5, kEpSecondOptimizer = 26;
constexpr double kShardRoutingForward = 40, kShardGatherForward = 4, kShardCapacityForward = 3;
constexpr double kShardRoutingBackward = 2;
constexpr double kGroupRoutingForward = 11;
constexpr double kSequenceAuxForward = 9, kShardSequenceAuxForward = 3, kSequenceAuxBackward = 1;

PassKernels moe_layer_kernels(const spec::ModelSpec& m, const spec::ParallelConfig& p, const CostModelOptions& o) {
  if (!m.moe.present()) return {};
  if (eager(o)) {
    const bool shared = m.moe.shared_ffn_hidden > 0, capacity = m.moe.capacity_factor > 0;
    const bool sp = p.tp > 1 && p.sequence_parallel, shards = sp || p.cp > 1;
    const double gathers = (sp ? 1 : 0) + (p.cp > 1 ? 1 : 0);
    const double base_forward =
        kMoeForward + (shared ? kSharedForward : 0) + (capacity ? kCapacityForward : 0) +
        (m.moe.expert_groups > 1 ? kGroupRoutingForward : 0) +
        (shards ? kShardRoutingForward + kShardGatherForward * gathers + (capacity ? kShardCapacityForward : 0) : 0) +
        (o.aux_loss_per_sequence ? (shards ? kShardSequenceAuxForward : kSequenceAuxForward) : 0);
    const double base_backward = kMoeBackward + (shared ? kSharedBackward : 0) + (capacity ? kCapacityBackward : 0) +
                                 (sp ? kShardRoutingBackward : 0) +
                                 (o.aux_loss_per_sequence ? kSequenceAuxBackward : 0);
    const int ep = p.ep;
    if (ep == 1)
      return {base_forward + kExpertForward * m.moe.experts, base_backward + kExpertBackward * m.moe.experts};
    const double local = static_cast<double>(m.moe.experts) / ep;
    return {base_forward + kEpDispatchForward + kLocalExpertForward * local,
            base_backward + kEpDispatchBackward + kExpertBackward * local};
  }
  const double router = 5, dispatch = m.moe.capacity_factor > 0 ? 4 : 6, experts = 3, combine = 3;
  const double shared = m.moe.shared_ffn_hidden > 0 ? 3 : 0;
  const double forward = router + dispatch + experts + combine + shared;
  return {forward, 2 * forward};
}

PassKernels qk_norm_kernels(const spec::ModelSpec& m, const CostModelOptions& o) {
  if (!m.qk_norm) return {};
  return eager(o) ? PassKernels{18, 14} : PassKernels{2, 4};
}

// Eager: the op counter on tiny-mla (tiny's sizes, 2 layers; one process; its step with full
// recomputation against one without gives the forward): latent attention adds 32 forward and 18
// backward over grouped-query attention (its values padded to the query width for SDPA's fused
// kernel included), a query latent (q_lora_rank > 0) 10 and 12 more. Fused
// (Megatron-Core's MLA, counted from its modules, not measured): the q and kv up projections, the
// kv down projection and latent norm and the key's concatenation in place of the fused QKV GEMM,
// the query's down projection and norm.
PassKernels latent_attention_kernels(const spec::ModelSpec& m, const CostModelOptions& o) {
  if (!m.mla.present()) return {};
  const bool query_latent = m.mla.q_lora_rank > 0;
  if (eager(o)) return query_latent ? PassKernels{42, 30} : PassKernels{32, 18};
  return query_latent ? PassKernels{6, 12} : PassKernels{4, 8};
}

double selective_recompute_kernels(const CostModelOptions& o) {
  if (!eager(o)) return o.flash_attention ? 1 : 4;
  return 8;
}

PassKernels embedding_kernels(const CostModelOptions&) {
  return {1, 2};
}

double batch_entry_kernels(const CostModelOptions& o) {
  return eager(o) ? 7 : 0;
}

TransferKernels activation_transfer_kernels(const CostModelOptions& o) {
  return eager(o) ? TransferKernels{2, 1} : TransferKernels{};
}
TransferKernels gradient_transfer_kernels(const CostModelOptions& o) {
  return eager(o) ? TransferKernels{0, 1} : TransferKernels{};
}
TransferKernels teacher_transfer_kernels(const CostModelOptions& o) {
  return eager(o) ? TransferKernels{1, 1} : TransferKernels{};
}

// Eager: counted with the op counter on tiny in one process, a teacher's forward against the
// student's forward and loss, and kl_sum with its weight forward and backward (train_step.cpp):
// the teacher's head is the student's final norm and LM head without the loss's 7 (its reshapes,
// cast, cross-entropy, the loss's item, scale and seed gradient), the KL 16 forward and 9
// backward. Fused (Megatron-LM): the head's kernels without the loss's, the KL not counted apart.
DistillationKernels distillation_kernels(const CostModelOptions& o) {
  if (!eager(o)) return {head_kernels(o).forward, {}};
  return {head_kernels(o).forward - 7, {16, 9}};
}

// Eager: LlamaModelImpl::blocks looks the rotary tables up for each chunk (index, unsqueeze and
// cast, for cos and for sin). Fused (Megatron-LM): the rotary embedding is cached per length.
double chunk_entry_kernels(const CostModelOptions& o) {
  return eager(o) ? 6 : 0;
}

PassKernels head_kernels(const CostModelOptions& o) {
  if (!eager(o)) return {6, 6};
  return {17, 16};
}

double step_kernels(const spec::ModelSpec& m, const spec::ParallelConfig& p, const HeldLayers& held, bool first,
                    bool last, int sharded_zero_stage, double busiest_segments, const CostModelOptions& o) {
  if (!eager(o)) return 4;
  // Parameter tensors: per layer a dense block's (an MoE layer's router, routed and shared experts
  // in place of the MLP's); the embedding; the final norm and the LM head (none apart when tied).
  const double blocks = dense_block_tensors(m) * held.layers + moe_layer_extra_tensors(m, p.ep) * held.moe_layers;
  const double tensors = blocks + (first ? 1 : 0) + (last ? (m.tied_embeddings ? 1 : 2) : 0);
  // The routed experts apart from their layer (ep > 1, or tp > 1) have an optimizer of their own,
  // on the stages that hold some (executor/train/optimizer_choice.cpp).
  const bool experts_apart = spec::routed_experts_apart(m, p) && held.moe_layers > 0;
  double k = 22 + 2 * tensors + (experts_apart ? kEpSecondOptimizer : 0);
  if (sharded_zero_stage == 3) {
    k += 3 * tensors;
  } else if (sharded_zero_stage >= 1) {
    k += 3 * tensors + 12 * busiest_segments;
  }
  return k;
}

double kernels_per_call(const CostModelOptions& o) {
  return eager(o) ? 5 : 0;
}
double kernels_per_sequence_parallel_call(const CostModelOptions& o) {
  return eager(o) ? 9 : 0;
}
double kernels_per_context_parallel_call(const CostModelOptions& o) {
  return eager(o) ? 14 : 0;
}
double kernels_per_zero3_call(const CostModelOptions& o) {
  return eager(o) ? 13 : 0;
}
double kernels_per_zero3_block_call(const spec::ModelSpec& m, const CostModelOptions& o) {
  constexpr double kLlamaBlockTensors = 9;
  const double beyond = dense_block_tensors(m) - kLlamaBlockTensors + moe_extra_tensors_per_layer(m, 1);
  return eager(o) ? 13 + 1.4 * beyond : 0;
}

double kernels_per_zero3_teacher_unit(double tensors, const CostModelOptions& o) {
  return eager(o) ? 5 + 5 * tensors : 0;
}

namespace {

double mlp_tensors(const spec::ModelSpec& m) {
  return m.mlp == spec::MlpKind::kSwiGLU ? 3 : 2;
}

}  // namespace

double dense_block_tensors(const spec::ModelSpec& m) {
  // Latent attention (model/latent_attention.h): kv_a_proj_with_mqa, kv_a_layernorm, kv_b_proj,
  // o_proj, and q_proj or q_a_proj, q_a_layernorm, q_b_proj.
  const double attention = m.mla.present() ? (m.mla.q_lora_rank > 0 ? 7 : 5) : 4;
  return attention + mlp_tensors(m) + 2 + (m.qk_norm ? 2 : 0) + (m.qkv_bias ? 3 : 0);
}

double routed_expert_tensors_per_moe_layer(const spec::ModelSpec& m, int ep) {
  if (!m.moe.present()) return 0;
  return mlp_tensors(m) * static_cast<double>(m.moe.experts) / ep;
}

double routed_expert_tensors_per_layer(const spec::ModelSpec& m, int ep) {
  return m.moe_layer_share() * routed_expert_tensors_per_moe_layer(m, ep);
}

double moe_layer_extra_tensors(const spec::ModelSpec& m, int ep) {
  if (!m.moe.present()) return 0;
  const double router_and_shared = 1 + (m.moe.shared_ffn_hidden > 0 ? mlp_tensors(m) : 0);
  return routed_expert_tensors_per_moe_layer(m, ep) + router_and_shared - mlp_tensors(m);
}

double moe_extra_tensors_per_layer(const spec::ModelSpec& m, int ep) {
  return m.moe_layer_share() * moe_layer_extra_tensors(m, ep);
}

}  // namespace cpt::cost
