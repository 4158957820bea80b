#include "executor/model/llama_blocks.h"

#include <cmath>

#include "executor/model/activation_checkpoint.h"
#include "executor/model/latent_attention.h"

namespace cpt::exec {

namespace {
torch::nn::Linear linear(std::int64_t in, std::int64_t out, bool bias = false) {
  return torch::nn::Linear(torch::nn::LinearOptions(in, out).bias(bias));
}
}  // namespace

RMSNormImpl::RMSNormImpl(std::int64_t dim, double eps, Communicator* replica_group)
    : eps_(eps), replica_group_(replica_group) {
  weight = register_parameter("weight", torch::ones({dim}));
}

torch::Tensor RMSNormImpl::forward(const torch::Tensor& x) {
  const auto xf = x.to(torch::kFloat32);
  const auto normed = xf * torch::rsqrt(xf.pow(2).mean(-1, /*keepdim=*/true) + eps_);
  const auto w = replica_group_ != nullptr ? copy_to_tp(weight, *replica_group_) : weight;
  return w * normed.to(x.scalar_type());
}

namespace {

// Llama 3.1's frequencies from the plain ones (spec::RopeScaling; transformers'
// _compute_llama3_parameters, in fp32 as there).
torch::Tensor llama3_scaled(const torch::Tensor& inv_freq, const spec::RopeScaling& s) {
  const double original = s.original_max_positions;
  const double low_freq_wavelength = original / s.low_freq_factor;
  const double high_freq_wavelength = original / s.high_freq_factor;
  const auto wavelength = 2 * M_PI / inv_freq;
  const auto stretched = torch::where(wavelength > low_freq_wavelength, inv_freq / s.factor, inv_freq);
  const auto smooth = (original / wavelength - s.low_freq_factor) / (s.high_freq_factor - s.low_freq_factor);
  const auto smoothed = (1 - smooth) * stretched / s.factor + smooth * stretched;
  const auto medium = (wavelength >= high_freq_wavelength).logical_and(wavelength <= low_freq_wavelength);
  return torch::where(medium, smoothed, stretched);
}

// YaRN's frequencies from the plain ones `inv_freq` [D/2] (spec::RopeScaling; transformers'
// _compute_yarn_parameters: the correction range in double, the ramp and the blend in fp32).
torch::Tensor yarn_scaled(const torch::Tensor& inv_freq, int head_dim, double theta, const spec::RopeScaling& s) {
  const double dim = head_dim;
  auto correction_dim = [&](double rotations) {
    return dim * std::log(s.original_max_positions / (rotations * 2 * M_PI)) / (2 * std::log(theta));
  };
  double low = correction_dim(s.beta_fast), high = correction_dim(s.beta_slow);
  if (s.truncate) {
    low = std::floor(low);
    high = std::ceil(high);
  }
  low = std::max(low, 0.0);
  high = std::min(high, dim - 1);
  if (low == high) high += 0.001;  // as transformers: no division by zero
  const auto ramp = ((torch::arange(head_dim / 2, torch::kInt64).to(torch::kFloat32) - low) / (high - low)).clamp(0, 1);
  const auto extrapolation = 1 - ramp;  // the share of a pair's plain frequency
  return inv_freq / s.factor * (1 - extrapolation) + inv_freq * extrapolation;
}

}  // namespace

RotaryTables::RotaryTables(int head_dim, int max_positions, double theta, const spec::RopeScaling& scaling)
    : max_positions_(max_positions) {
  // inv_freq[i] = theta^(-2i/D), i < D/2; angle[p, i] = p · inv_freq[i]; channels [i] and [i + D/2] share it.
  const auto exponents =
      torch::arange(0, head_dim, 2, torch::kInt64).to(torch::kFloat32) / static_cast<double>(head_dim);
  auto inv_freq = 1.0 / torch::pow(torch::tensor(theta, torch::kFloat32), exponents);
  if (scaling.yarn()) {
    inv_freq = yarn_scaled(inv_freq, head_dim, theta, scaling);
  } else if (scaling.present()) {
    inv_freq = llama3_scaled(inv_freq, scaling);
  }
  const auto positions = torch::arange(max_positions, torch::kInt64).to(torch::kFloat32);
  const auto angles = torch::outer(positions, inv_freq);
  const auto both = torch::cat({angles, angles}, -1);
  const double magnitude = scaling.yarn_attention_factor();  // YaRN's factor on cos and sin; else 1
  cos_ = both.cos() * magnitude;
  sin_ = both.sin() * magnitude;
}

std::pair<torch::Tensor, torch::Tensor> RotaryTables::lookup(const torch::Tensor& positions,
                                                             torch::ScalarType dtype) const {
  if (!device_cos_.defined() || device_cos_.device() != positions.device()) {
    device_cos_ = cos_.to(positions.device());
    device_sin_ = sin_.to(positions.device());
  }
  const auto cos = device_cos_.index({positions}).unsqueeze(1).to(dtype);
  const auto sin = device_sin_.index({positions}).unsqueeze(1).to(dtype);
  return {cos, sin};
}

// In q's dtype: under bf16 autocast q and k come out of their projections in bf16, and fp32 tables
// would promote them (and the attention's inputs) to fp32. On the CPU everything is fp32.
torch::Tensor apply_rotary(const torch::Tensor& q, const torch::Tensor& cos, const torch::Tensor& sin) {
  const auto half = q.size(-1) / 2;
  const auto rotated = torch::cat({-q.narrow(-1, half, half), q.narrow(-1, 0, half)}, -1);
  return q * cos.to(q.scalar_type()) + rotated * sin.to(q.scalar_type());
}

AttentionImpl::AttentionImpl(const spec::ModelSpec& m, const TensorParallel& tp, const ContextParallel& cp)
    : heads_(m.heads / tp.size()), kv_heads_(m.kv_heads / tp.size()), head_dim_(m.head_dim()), tp_(tp), cp_(cp) {
  q_proj = register_module("q_proj", linear(m.hidden, std::int64_t{heads_} * head_dim_, m.qkv_bias));
  k_proj = register_module("k_proj", linear(m.hidden, std::int64_t{kv_heads_} * head_dim_, m.qkv_bias));
  v_proj = register_module("v_proj", linear(m.hidden, std::int64_t{kv_heads_} * head_dim_, m.qkv_bias));
  o_proj = register_module("o_proj", linear(std::int64_t{heads_} * head_dim_, m.hidden));
  if (m.qk_norm) {
    Communicator* replicas = tp.active() ? tp.group : nullptr;  // each rank normalises its own heads
    q_norm = register_module("q_norm", RMSNorm(head_dim_, m.norm_eps, replicas));
    k_norm = register_module("k_norm", RMSNorm(head_dim_, m.norm_eps, replicas));
  }
}

torch::Tensor AttentionImpl::forward(const torch::Tensor& x_in, const torch::Tensor& cos, const torch::Tensor& sin,
                                     const torch::Tensor& mask) {
  const auto x = enter_tp_region(x_in, tp_);  // [B, S, H] on every rank of the group
  const auto b = x.size(0);
  const auto s = x.size(1);
  // [B, S, heads·D] -> [B, heads, S, D]
  auto q = q_proj(x).view({b, s, heads_, head_dim_});
  auto k = k_proj(x).view({b, s, kv_heads_, head_dim_});
  if (q_norm) {
    q = q_norm(q);
    k = k_norm(k);
  }
  q = q.transpose(1, 2);
  k = k.transpose(1, 2);
  auto v = v_proj(x).view({b, s, kv_heads_, head_dim_}).transpose(1, 2);
  q = apply_rotary(q, cos, sin);
  k = apply_rotary(k, cos, sin);
  if (cp_.active()) {
    // [B, G, S/cp, D] of this rank's tokens -> [B, G, S, D] of the whole sequence.
    k = gather_context(k.transpose(1, 2), cp_).transpose(1, 2);
    v = gather_context(v.transpose(1, 2), cp_).transpose(1, 2);
  }
  const bool gqa = kv_heads_ != heads_;
  const bool recompute = recompute_core && is_training() && torch::GradMode::is_enabled();
  const auto out = recompute ? checkpointed_attention_core(q, k, v, mask, gqa) : attention_core(q, k, v, mask, gqa);
  return leave_tp_region(o_proj(out.transpose(1, 2).reshape({b, s, std::int64_t{heads_} * head_dim_})), tp_);
}

DecoderBlockImpl::DecoderBlockImpl(const spec::ModelSpec& m, int layer, const TensorParallel& tp,
                                   const ContextParallel& cp, const ExpertParallel& ep) {
  // Registration order = Hugging Face's attribute order, so parameters() lists them alike.
  if (m.mla.present()) {
    latent_attn = register_module("self_attn", std::make_shared<LatentAttentionImpl>(m, tp, cp));
  } else {
    self_attn = register_module("self_attn", Attention(m, tp, cp));
  }
  if (m.is_moe_layer(layer)) {
    moe = register_module("mlp", MoeMlp(m, ep, tp, cp));
  } else {
    mlp = register_module("mlp", SwiGluMlp(m.hidden, m.ffn_hidden, tp));
  }
  Communicator* sp = tp.sp() ? tp.group : nullptr;
  input_layernorm = register_module("input_layernorm", RMSNorm(m.hidden, m.norm_eps, sp));
  post_attention_layernorm = register_module("post_attention_layernorm", RMSNorm(m.hidden, m.norm_eps, sp));
}

torch::Tensor DecoderBlockImpl::forward(const torch::Tensor& x, const torch::Tensor& cos, const torch::Tensor& sin,
                                        const torch::Tensor& mask, const torch::Tensor& real_tokens) {
  const auto normed_input = input_layernorm(x);
  const auto h =
      x + (latent_attn ? latent_attn->forward(normed_input, cos, sin, mask) : self_attn(normed_input, cos, sin, mask));
  const auto normed = post_attention_layernorm(h);
  return h + (moe ? moe(normed, real_tokens) : mlp(normed));
}

}  // namespace cpt::exec
