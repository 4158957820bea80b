#pragma once
// The mixture-of-experts MLP of an MoE decoder layer (spec::ExpertSpec): a router scores the E
// routed experts for every token, each token goes to its top k, and its output is the routing
// weights' sum of those experts' SwiGLU outputs, plus the shared experts' output for every token
// (DeepSeekMoE's shared experts; absent when shared_ffn_hidden is 0).
//
// Parameter names (under "layers.<i>.mlp."): gate.weight [E, H] (the router, Qwen-MoE's and
// DeepSeek's name), experts.<e>.{gate,up,down}_proj.weight, shared_experts.{gate,up,down}_proj.weight.
// Hugging Face's Mixtral names (block_sparse_moe.*, w1/w2/w3) are mapped in io/model_weights.cpp.
//
// Routing, for tokens x [T, H] (T = B·S):
//   scores = softmax(x·Wᵀ) (or sigmoid, spec::RouterScore) [T, E], in fp32;
//   each token's top k experts (with groups, among its best groups: moe_routing.h's
//   limit_to_best_groups); their scores are its weights, divided by their sum when normalize_top_k
//   (Mixtral, Qwen3-MoE, DeepSeek-V3; HF's norm_topk_prob), then multiplied by top_k_scale;
//   dropless (capacity_factor 0): every (token, expert) pair is computed; with a capacity factor c
//   an expert takes at most ceil(c·T·k/E) of its pairs, in token order, and drops the rest
//   (Megatron-Core's --moe-token-drop-policy position), counted over this microbatch's tokens.
// Every expert runs every microbatch, on zero tokens if none reach it, so that each parameter
// receives a gradient each backward (the data-parallel hooks count them).
//
// Expert bias (DeepSeek-V3's auxiliary-loss-free balancing, spec::ExpertSpec::expert_bias): an fp32
// buffer b [E], gate.e_score_correction_bias (Hugging Face's name), added to the scores for choosing
// each token's top k (and its groups) only; the weights stay the scores of the chosen experts.
// Between steps the trainer moves it against the step's load (update_expert_bias). It is no
// parameter: no gradient, no optimizer state; checkpoints and Hugging Face weights carry it.
//
// Load balancing: the auxiliary loss of Switch Transformer (Fedus et al. 2022, eq. 4), for top-k
// as Megatron-Core's switch_load_balancing_loss_func: aux = E · Σ_e f_e · P_e with f_e the share of
// the T·k routed pairs that chose expert e (no gradient) and P_e the mean router probability of e
// (softmax scores; sigmoid scores normalised to sum 1 per token). Balanced routing gives 1.
// Per sequence (DeepSeek-V3's complementary sequence-wise balance loss, arXiv:2412.19437 eq. 17-20;
// Megatron-Core's seq_aux_loss): the same terms over each sequence's S tokens, f_{b,e} and P_{b,e},
// averaged over the B sequences: aux = (E / B) · Σ_b Σ_e f_{b,e} · P_{b,e}. Either way it
// adds scale · aux to the objective (scale = coefficient / microbatches of the step over all
// data-parallel ranks, set by the trainer): its gradient is attached to the layer's output (as
// Megatron's MoEAuxLossAutoScaler), so it reaches the router through whichever backward runs this
// layer (the microbatch loop, a pipeline schedule, or a recomputation).
//
// Padding (padded packing, Batch::real_tokens): padding positions are routed, computed and take
// their experts' capacity like any token, but the auxiliary loss, the expert bias's load and the
// routing statistics leave them out: T (and each sequence's T_b, for the sequence-wise loss) counts
// the real tokens, f_e their pairs and P_e their probabilities. Megatron-Core's router does the
// same with its padding mask (except that its sequence-wise loss divides every sequence by the
// mean T_b); Hugging Face's load_balancing_loss_func with an attention mask too.
//
// Expert parallelism (parallel/expert_parallel.h): this rank holds its share of the experts, under
// their global names, and its pairs go to their experts' ranks and back by all-to-all; the
// routing, drops and auxiliary loss stay this rank's own, so the layer computes what the single
// process computes.
//
// Expert-tp (etp > 1, parallel/expert_parallel.h): each routed expert's gate/up rows and down
// columns are split over the etp group, whose members run their slices on the rows every member
// received and sum the partial outputs; the parameters keep their global names and whole shapes
// in checkpoints (tensor_parallel.h's ParameterSplits).
// Tensor parallelism, with sequence parallelism (Megatron-Core's "parallel folding"): the layer
// runs on this rank's sequence shard [B, S/tp, H]. The router is replicated over tp (its weight's
// gradient summed over the group, as the norms'); the routed experts are whole or split over etp,
// whose groups (and the ep groups) may be the tp group's ranks; the shared experts are split over
// tp as the dense MLP.
// Context parallelism: the layer runs on this rank's tokens of every sequence [B, S/cp, H] (or
// [B, S/(cp·tp), H] with sequence parallelism), its parameters replicated over cp as every other
// layer's (their gradients summed over dp × cp, or the experts' over expert-dp).
// On sequence shards the auxiliary loss and each expert's capacity are the whole microbatch's
// (model/moe_routing.h): each rank's objective carries the loss's gradient for its own tokens,
// E · f_e / T per router probability, f_e over the microbatch.
#include <torch/torch.h>

#include <cstdint>
#include <memory>
#include <vector>

#include "executor/model/moe_routing.h"
#include "executor/model/swiglu_mlp.h"
#include "executor/parallel/context_parallel.h"
#include "executor/parallel/expert_parallel.h"
#include "executor/parallel/tensor_parallel.h"
#include "spec/model_spec.h"

namespace cpt::exec {

// What the layer routed during training since the last take_routing_stats(), for metrics.
struct RoutingStats {
  // int64 [E], (token, expert) pairs chosen, before any drop, of real tokens (padding left out).
  torch::Tensor tokens_per_expert;
  std::int64_t routed = 0;   // every pair routed, padding's included
  std::int64_t dropped = 0;  // of those, pairs over capacity (0 when dropless)
  // (On sequence shards every rank of the tp × cp group records the whole microbatch's.)
  double aux_loss_sum = 0;  // Σ over forwards of the unscaled auxiliary loss
  std::int64_t forwards = 0;
};

class MoeMlpImpl : public torch::nn::Module {
 public:
  // `tp`: the layer's tensor-parallel group; active only with sequence parallelism. `cp`: the
  // context-parallel group.
  explicit MoeMlpImpl(const spec::ModelSpec& m, ExpertParallel ep = {}, TensorParallel tp = {},
                      ContextParallel cp = {});
  // [B, S, H] -> [B, S, H] (on sequence shards this rank's tokens [B, S/(cp·tp), H]).
  // `real_tokens`: bool [B, S] (x's positions), false at padding, or undefined: no padding.
  torch::Tensor forward(const torch::Tensor& x, const torch::Tensor& real_tokens = {});
  // The objective's weight of this layer's auxiliary loss per microbatch (0: none).
  void set_aux_loss_scale(double scale) { aux_loss_scale_ = scale; }
  // The loss per sequence (DeepSeek-V3's sequence-wise balance loss) instead of over the microbatch.
  void set_aux_loss_per_sequence(bool per_sequence) { aux_per_sequence_ = per_sequence; }
  [[nodiscard]] double aux_loss_scale() const { return aux_loss_scale_; }
  // Whether training forwards count into the routing statistics (true by default).
  void set_recording(bool recording) { recording_ = recording; }
  // The statistics recorded since the last call, then cleared.
  RoutingStats take_routing_stats();
  // With an expert bias: b_e += rate · sign(Σ_e' n_e' − E · n_e), with `pairs` n [E] the (token,
  // expert) pairs each expert was chosen for over the step on every replica (any common multiple
  // of them: only the sign counts; exact in integers). Megatron-Core's get_updated_expert_bias.
  // REQUIRES: has_expert_bias().
  void update_expert_bias(const torch::Tensor& pairs, double rate);
  [[nodiscard]] bool has_expert_bias() const { return expert_bias_.defined(); }
  [[nodiscard]] const torch::Tensor& expert_bias() const { return expert_bias_; }

  // This rank's experts: every expert, or under expert parallelism [first_expert(), + local_experts()).
  [[nodiscard]] std::int64_t first_expert() const { return first_expert_; }
  [[nodiscard]] std::int64_t local_experts() const { return static_cast<std::int64_t>(local_.size()); }
  // Expert e of this rank's (0 <= e < local_experts()), global index first_expert() + e.
  [[nodiscard]] SwiGluMlpImpl& local_expert(std::int64_t e) { return *local_[static_cast<std::size_t>(e)]; }

  torch::nn::Linear gate{nullptr};
  std::shared_ptr<torch::nn::Module> experts;  // children named by global expert index
  SwiGluMlp shared_experts{nullptr};           // null without shared experts

 private:
  // The routed pairs' rows [N, H], sorted by expert with `per_expert` [E] rows each, through their
  // experts (on this rank or, under expert parallelism, on theirs): [N, H] in the same order.
  torch::Tensor run_experts(const torch::Tensor& rows, const torch::Tensor& per_expert);
  // Adds a training forward's routing to stats_; `aux_loss` its unscaled auxiliary loss (the
  // whole microbatch's), without gradient.
  void record_routing(const MicrobatchRouting& routing, std::int64_t capacity, const torch::Tensor& aux_loss);

  spec::ExpertSpec spec_;
  ExpertParallel ep_;
  torch::Tensor expert_bias_;  // fp32 [E], gate's buffer; undefined without an expert bias
  // The sequence shards of this rank's tokens for shards of `shard_positions_` positions (built at
  // the first forward, and again if the sequence length changes).
  const SequenceShards* sequence_shards(const torch::Tensor& x);

  Communicator* sp_group_ = nullptr;  // the tp group under sequence parallelism
  ContextParallel cp_;
  std::int64_t shard_positions_ = 0;
  SequenceShards shards_;
  std::int64_t first_expert_ = 0;
  std::vector<SwiGluMlpImpl*> local_;
  double aux_loss_scale_ = 0;
  bool aux_per_sequence_ = false;
  bool recording_ = true;
  RoutingStats stats_;
  torch::Tensor aux_loss_sum_;  // on the layer's device, read only by take_routing_stats (no sync per forward)
};
TORCH_MODULE(MoeMlp);

}  // namespace cpt::exec
