#include "executor/model/latent_attention.h"

#include <cmath>

#include "executor/model/activation_checkpoint.h"

namespace cpt::exec {

namespace {

// The latents' RMSNorm epsilon: DeepSeek's reference code and transformers' DeepseekV2/V3 build
// those norms with their default 1e-6, whatever the model's rms_norm_eps.
constexpr double kLatentNormEps = 1e-6;

torch::nn::Linear linear(std::int64_t in, std::int64_t out) {
  return torch::nn::Linear(torch::nn::LinearOptions(in, out).bias(false));
}

// [..., r] with channel pairs (2i, 2i + 1) -> [..., r] with the pairs' first members, then their
// second members: the rotate-half layout apply_rotary expects.
torch::Tensor deinterleaved(const torch::Tensor& t) {
  const auto r = t.size(-1);
  return t.unflatten(-1, {r / 2, 2}).transpose(-1, -2).flatten(-2);
}

}  // namespace

LatentAttentionImpl::LatentAttentionImpl(const spec::ModelSpec& m, const TensorParallel& tp, const ContextParallel& cp)
    : dims_(m.mla),
      heads_(m.heads / tp.size()),
      softmax_scale_(m.rope_scaling.latent_softmax_factor() / std::sqrt(static_cast<double>(m.mla.qk_head_dim()))),
      tp_(tp),
      cp_(cp) {
  const std::int64_t h = m.hidden, heads = heads_;
  const std::int64_t qk = dims_.qk_head_dim();
  Communicator* replicas = tp.active() ? tp.group : nullptr;  // each rank uses the latents for its own heads
  // Registration order = Hugging Face's attribute order, so parameters() lists them alike.
  if (dims_.q_lora_rank > 0) {
    q_a_proj = register_module("q_a_proj", linear(h, dims_.q_lora_rank));
    q_a_layernorm = register_module("q_a_layernorm", RMSNorm(dims_.q_lora_rank, kLatentNormEps, replicas));
    q_b_proj = register_module("q_b_proj", linear(dims_.q_lora_rank, heads * qk));
  } else {
    q_proj = register_module("q_proj", linear(h, heads * qk));
  }
  kv_a_proj_with_mqa =
      register_module("kv_a_proj_with_mqa", linear(h, std::int64_t{dims_.kv_lora_rank} + dims_.qk_rope_head_dim));
  kv_a_layernorm = register_module("kv_a_layernorm", RMSNorm(dims_.kv_lora_rank, kLatentNormEps, replicas));
  kv_b_proj = register_module(
      "kv_b_proj", linear(dims_.kv_lora_rank, heads * (std::int64_t{dims_.qk_nope_head_dim} + dims_.v_head_dim)));
  o_proj = register_module("o_proj", linear(heads * dims_.v_head_dim, h));
}

torch::Tensor LatentAttentionImpl::replicated(torch::nn::Linear& layer, const torch::Tensor& x) const {
  const auto& weight = layer->weight;
  return torch::nn::functional::linear(x, tp_.active() ? copy_to_tp(weight, *tp_.group) : weight);
}

torch::Tensor LatentAttentionImpl::queries(const torch::Tensor& x) {
  const auto q = dims_.q_lora_rank > 0 ? q_b_proj(q_a_layernorm(replicated(q_a_proj, x))) : q_proj(x);
  return q.view({x.size(0), x.size(1), heads_, dims_.qk_head_dim()}).transpose(1, 2);
}

torch::Tensor LatentAttentionImpl::forward(const torch::Tensor& x_in, const torch::Tensor& cos,
                                           const torch::Tensor& sin, const torch::Tensor& mask) {
  const auto x = enter_tp_region(x_in, tp_);  // [B, S, H] on every rank of the group
  const auto b = x.size(0);
  const auto s = x.size(1);
  const std::int64_t nope = dims_.qk_nope_head_dim, rope = dims_.qk_rope_head_dim, value_dim = dims_.v_head_dim;
  const auto q = queries(x);
  // [B, S, c + r]: the kv-latent, then the shared rotary key.
  const auto compressed = replicated(kv_a_proj_with_mqa, x);
  const auto latent = compressed.narrow(-1, 0, dims_.kv_lora_rank);
  const auto k_rope = compressed.narrow(-1, dims_.kv_lora_rank, rope).view({b, 1, s, rope});
  // [B, heads, S, n + v]
  const auto kv = kv_b_proj(kv_a_layernorm(latent)).view({b, s, heads_, nope + value_dim}).transpose(1, 2);
  auto v = kv.narrow(-1, nope, value_dim);
  const auto q_rotated = apply_rotary(deinterleaved(q.narrow(-1, nope, rope)), cos, sin);
  const auto k_rotated = apply_rotary(deinterleaved(k_rope), cos, sin);
  const auto query = torch::cat({q.narrow(-1, 0, nope), q_rotated}, -1);
  auto key = torch::cat({kv.narrow(-1, 0, nope), k_rotated.expand({b, heads_, s, rope})}, -1);
  if (cp_.active()) {
    // [B, heads, S/cp, ·] of this rank's tokens -> [B, heads, S, ·] of the whole sequence.
    key = gather_context(key.transpose(1, 2), cp_).transpose(1, 2);
    v = gather_context(v.transpose(1, 2), cp_).transpose(1, 2);
  }
  // SDPA's fused kernels (flash on the CPU, flash and memory-efficient on CUDA) need the values as
  // wide as the queries and keys; narrower values would fall back to its math path, which keeps
  // the B·heads·S² probabilities. Zero channels added to the values give zero output channels.
  const std::int64_t qk = dims_.qk_head_dim();
  const auto padded = value_dim < qk ? torch::constant_pad_nd(v, {0, qk - value_dim}) : v;
  const bool recompute = recompute_core && is_training() && torch::GradMode::is_enabled();
  const auto out = recompute ? checkpointed_attention_core(query, key, padded, mask, false, softmax_scale_)
                             : attention_core(query, key, padded, mask, false, softmax_scale_);
  const auto heads_out = value_dim < qk ? out.narrow(-1, 0, value_dim) : out;
  return leave_tp_region(o_proj(heads_out.transpose(1, 2).reshape({b, s, std::int64_t{heads_} * value_dim})), tp_);
}

}  // namespace cpt::exec
