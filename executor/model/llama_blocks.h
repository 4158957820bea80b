#pragma once
// The single-device building blocks of a LLaMA-family decoder (RMSNorm, RoPE, grouped-query
// attention, SwiGLU MLP, the pre-norm block), written as plain LibTorch modules so that the
// parallel executor can later swap their linears for tensor-parallel ones (design.md: model code
// first, parallelism applied in separate steps).
//
// Submodule names follow Hugging Face's LlamaForCausalLM (self_attn.q_proj, mlp.gate_proj,
// input_layernorm, ...), so a state dict maps to a Hugging Face checkpoint by adding "model.".
//
// Shapes: B batch, S sequence, H hidden, A query heads, G key/value heads, D head_dim (H / A unless
// the model gives its own, as Qwen3 and GPT-OSS do).
// With tensor parallelism over t ranks (tensor_parallel.h) each rank holds A/t query heads, G/t
// key/value heads and F/t of the FFN width; with sequence parallelism the blocks' inputs and
// outputs are [B, S/t, H] shards.
#include <torch/torch.h>

#include "executor/model/moe_mlp.h"
#include "executor/model/swiglu_mlp.h"
#include "executor/parallel/context_parallel.h"
#include "executor/parallel/tensor_parallel.h"
#include "spec/model_spec.h"

namespace cpt::exec {

class LatentAttentionImpl;  // model/latent_attention.h

// y = x / sqrt(mean(x^2) + eps) * weight, computed in fp32 and returned in x's dtype (as HF does).
// `replica_group`: when set, the weight is replicated over that group whose ranks each see part of
// the inputs (a sequence shard under sequence parallelism; their own heads for q/k norms), so the
// weight's gradient is summed over it.
class RMSNormImpl : public torch::nn::Module {
 public:
  RMSNormImpl(std::int64_t dim, double eps, Communicator* replica_group = nullptr);
  torch::Tensor forward(const torch::Tensor& x);
  torch::Tensor weight;

 private:
  double eps_;
  Communicator* replica_group_;
};
TORCH_MODULE(RMSNorm);

// Rotary position embedding with HF's "rotate half" layout (not the interleaved one of the Meta
// reference code): the first D/2 channels pair with the last D/2.
class RotaryTables {
 public:
  // `scaling`: Llama 3.1's or YaRN's (spec::RopeScaling; YaRN's cos and sin carry its attention
  // factor), or none.
  RotaryTables(int head_dim, int max_positions, double theta, const spec::RopeScaling& scaling = {});
  // cos and sin for `positions` [B, S] (int64): each [B, 1, S, D], in `dtype` on positions' device.
  std::pair<torch::Tensor, torch::Tensor> lookup(const torch::Tensor& positions, torch::ScalarType dtype) const;
  [[nodiscard]] int max_positions() const { return max_positions_; }

 private:
  int max_positions_;
  torch::Tensor cos_, sin_;  // [max_positions, D], fp32, on the CPU until first use on another device
  mutable torch::Tensor device_cos_, device_sin_;
};

// q·cos + rotate_half(q)·sin, for q [B, heads, S, D] and cos/sin [B, 1, S, D].
torch::Tensor apply_rotary(const torch::Tensor& q, const torch::Tensor& cos, const torch::Tensor& sin);

// Multi-head attention with G key/value heads shared by A/G query heads each.
// `mask`: undefined for plain causal attention, or bool [B, 1, S, S] (true = may attend) for
// packed sequences whose documents must not see each other.
// With context parallelism (context_parallel.h) x holds this rank's tokens, the keys and values are
// gathered over the cp group before the attention core, and `mask` is [B, 1, S/cp, S].
class AttentionImpl : public torch::nn::Module {
 public:
  AttentionImpl(const spec::ModelSpec& m, const TensorParallel& tp, const ContextParallel& cp = {});
  torch::Tensor forward(const torch::Tensor& x, const torch::Tensor& cos, const torch::Tensor& sin,
                        const torch::Tensor& mask);
  torch::nn::Linear q_proj{nullptr}, k_proj{nullptr}, v_proj{nullptr}, o_proj{nullptr};
  // With spec::ModelSpec::qk_norm (Qwen3): an RMSNorm over each head's D channels of the queries
  // and of the keys, before RoPE; their weights are replicated over tp (gradients summed).
  RMSNorm q_norm{nullptr}, k_norm{nullptr};
  bool recompute_core = false;  // selective recomputation of the attention core (activation_checkpoint.h)

 private:
  int heads_, kv_heads_, head_dim_;  // heads of this rank
  TensorParallel tp_;
  ContextParallel cp_;
};
TORCH_MODULE(Attention);

// x + attn(norm(x)), then + mlp(norm(.)); the MLP is the mixture of experts in the model's MoE
// layers (spec::ModelSpec::is_moe_layer(layer)), registered under the same name "mlp"; the
// attention DeepSeek's latent attention where the model has it, under the same name "self_attn".
// `real_tokens`: bool [B, S] of x's positions, false at padding (Batch::real_tokens, this rank's
// positions of it), or undefined; only the mixture of experts reads it.
class DecoderBlockImpl : public torch::nn::Module {
 public:
  DecoderBlockImpl(const spec::ModelSpec& m, int layer, const TensorParallel& tp, const ContextParallel& cp = {},
                   const ExpertParallel& ep = {});
  torch::Tensor forward(const torch::Tensor& x, const torch::Tensor& cos, const torch::Tensor& sin,
                        const torch::Tensor& mask, const torch::Tensor& real_tokens = {});
  RMSNorm input_layernorm{nullptr}, post_attention_layernorm{nullptr};
  Attention self_attn{nullptr};                      // null with latent attention
  std::shared_ptr<LatentAttentionImpl> latent_attn;  // null without
  SwiGluMlp mlp{nullptr};                            // null in an MoE layer
  MoeMlp moe{nullptr};                               // null in a dense layer
};
TORCH_MODULE(DecoderBlock);

}  // namespace cpt::exec
