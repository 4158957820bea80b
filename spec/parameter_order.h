#pragma once
// The order in which data parallelism lays out a LLaMA model's parameter tensors for its gradient
// buckets (spec/gradient_buckets.h): the order the forward pass consumes them — the embedding; per
// layer the input norm, q, k, v (each weight, then its bias with qkv_bias, then q's and k's norms
// with qk_norm; with latent attention q_a_proj, q_a_layernorm, q_b_proj or q_proj, then
// kv_a_proj_with_mqa, kv_a_layernorm, kv_b_proj), o, the post-attention norm, up, gate, down (an MoE layer: the router,
// each routed expert's up, gate, down, then the shared experts'); the final norm; the LM head. The buckets take it in
// reverse, which is the order backward produces the gradients (LibTorch 2.11's autograd engine,
// observed per parameter on the executor's model): a norm's weight gradient arrives after the
// block part it feeds, so it sits before that part (Megatron-LM registers its modules this way;
// Hugging Face lists the two norms after the MLP, which held four buckets open at once instead of
// two), and gate's gradient arrives before up's. Names are the executor's (Hugging Face's).
// Used by the executor's data-parallel and ZeRO-1/2 buckets and by the cost model's count of them
// (costmodel/executor_buckets.h), so the two cannot drift.
#include <cstdint>
#include <functional>
#include <span>
#include <string_view>
#include <utility>

#include "spec/model_spec.h"
#include "spec/parallel_config.h"
#include "spec/stage_partition.h"

namespace cpt::spec {

// Sort key of parameter `name` ("embed_tokens.weight", "layers.<i>.<tensor>", "norm.weight",
// "lm_head.weight"): smaller comes first. Names it does not know sort last, in their given order
// (use a stable sort).
std::pair<int, int> gradient_order_key(std::string_view name);

// Which of a rank's parameters a visit covers: all of them, or under expert parallelism (the
// executor's two optimizers, train/optimizer_choice.cpp) the routed experts — this rank's E / ep
// of them — or everything else.
enum class ParameterSubset { kAll, kAllButRoutedExperts, kRoutedExperts };

// Whether parameter `name` is one of an MoE layer's routed experts ("layers.<i>.mlp.experts.<e>.*").
[[nodiscard]] bool is_routed_expert(std::string_view name);

// Whether `model`'s routed experts are a subset of their own under `parallel` (ep > 1, or tp > 1
// with the experts whole on each tp rank): their gradients summed and sharded over expert-dp by an
// optimizer of their own, not with their layer (ParallelConfig::experts_with_their_layer).
[[nodiscard]] bool routed_experts_apart(const ModelSpec& model, const ParallelConfig& parallel);

// Calls `visit(numel)` for every parameter tensor of one rank in `subset`, per tp rank, in that
// order: the embedding when `first`; the blocks of `held` in order (a rank's chunks: cpt's
// executor sorts its parameters by gradient_order_key, the global layer index; an MoE layer's
// router, routed experts and shared experts in place of the dense MLP; the routed experts unsplit
// by tp, as the executor runs them, E / ep of them, each split over etp; the shared experts split
// like the dense MLP); the final norm and the LM head when `last` (no head when tied on a single
// stage).
void visit_gradient_order(const ModelSpec& model, int tp, std::span<const LayerRange> held, bool first, bool last,
                          bool single_stage, const std::function<void(std::int64_t numel)>& visit,
                          ParameterSubset subset = ParameterSubset::kAll, int ep = 1, int etp = 1);
// The same over one contiguous range: blocks [first_layer, first_layer + layers).
void visit_gradient_order(const ModelSpec& model, int tp, int first_layer, int layers, bool first, bool last,
                          bool single_stage, const std::function<void(std::int64_t numel)>& visit,
                          ParameterSubset subset = ParameterSubset::kAll, int ep = 1, int etp = 1);

}  // namespace cpt::spec
