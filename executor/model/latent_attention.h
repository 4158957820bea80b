#pragma once
// DeepSeek's multi-head latent attention (DeepSeek-V2, arXiv:2405.04434, §2.1; spec::LatentAttention)
// as a LibTorch module, its parameters under Hugging Face's DeepseekV2/V3 names (layers.<i>.self_attn.*):
//   q_proj [A·(n + r), H]                      when q_lora_rank is 0, else
//   q_a_proj [q, H], q_a_layernorm [q], q_b_proj [A·(n + r), q]
//   kv_a_proj_with_mqa [c + r, H], kv_a_layernorm [c], kv_b_proj [A·(n + v), c], o_proj [H, A·v]
// with A heads, n = qk_nope_head_dim, r = qk_rope_head_dim, v = v_head_dim, q = q_lora_rank and
// c = kv_lora_rank. Per token: the queries come from h (or from its normed q-latent); the keys'
// n channels and the values per head from the normed kv-latent; the keys' r rotary channels are one
// vector all heads share. RoPE rotates the pairs (2i, 2i + 1) of the r channels (the Meta layout
// DeepSeek's checkpoints use; transformers' rope_interleave), done here by de-interleaving them
// into RotaryTables' rotate-half layout for queries and keys alike, which leaves q·k unchanged.
// Scores are scaled by 1/sqrt(n + r), under YaRN times mscale(factor, mscale_all_dim)² (DeepSeek's
// code and transformers' DeepseekV3). The latents' norms use epsilon 1e-6 (as DeepSeek's code).
//
// Tensor parallelism over t ranks (tensor_parallel.h): q_proj / q_b_proj and kv_b_proj split by
// rows (A/t whole heads each), o_proj by columns; the down projections to the latents and the
// latents' norms are replicated (as Megatron-Core runs them) and computed on every token of the
// group (after the sequence gather under sequence parallelism). Each rank's heads use only part
// of a latent, so those weights' gradients (four tensors; two without a q-latent) are summed over
// tp in every backward (passing each through copy_to_tp, as the q/k norms do), which the cost
// model's step inventory counts. The values are padded to the query width for SDPA's fused
// kernels and the padding sliced off its output. Context
// parallelism gathers the per-head keys and values over the cp group, as AttentionImpl does.
#include <torch/torch.h>

#include "executor/model/llama_blocks.h"

namespace cpt::exec {

class LatentAttentionImpl : public torch::nn::Module {
 public:
  LatentAttentionImpl(const spec::ModelSpec& m, const TensorParallel& tp, const ContextParallel& cp = {});
  // x [B, S, H] (a sequence shard under SP); cos/sin [B, 1, S, r] of RotaryTables at width r;
  // mask as AttentionImpl's. Returns [B, S, H] (the shard under SP).
  torch::Tensor forward(const torch::Tensor& x, const torch::Tensor& cos, const torch::Tensor& sin,
                        const torch::Tensor& mask);
  torch::nn::Linear q_proj{nullptr};  // null when q_lora_rank > 0
  torch::nn::Linear q_a_proj{nullptr}, q_b_proj{nullptr};
  RMSNorm q_a_layernorm{nullptr};
  torch::nn::Linear kv_a_proj_with_mqa{nullptr}, kv_b_proj{nullptr}, o_proj{nullptr};
  RMSNorm kv_a_layernorm{nullptr};
  bool recompute_core = false;  // selective recomputation of the attention core (activation_checkpoint.h)

 private:
  // `linear`'s output with its weight replicated over tp (the gradient summed there).
  torch::Tensor replicated(torch::nn::Linear& linear, const torch::Tensor& x) const;
  torch::Tensor queries(const torch::Tensor& x);  // [B, heads, S, n + r] before RoPE

  spec::LatentAttention dims_;
  int heads_;             // heads of this rank
  double softmax_scale_;  // 1/sqrt(n + r), times YaRN's mscale² (spec::RopeScaling::latent_softmax_factor)
  TensorParallel tp_;
  ContextParallel cp_;
};
TORCH_MODULE(LatentAttention);

}  // namespace cpt::exec
